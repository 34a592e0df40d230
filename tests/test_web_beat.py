"""The web view against a running beat: a real ``celery beat`` (redbeat, metrics on),
the real ``redbeat web`` command, a real headless Chromium, one redis-server for the
schedule and (another database) the broker. Disabling an entry from its page stops its
dispatch, run now dispatches it, the timeline shows a burst, and the Prometheus
counters match the messages the broker holds.

The tests share one beat (one per xdist worker) and each uses entries of its own, so
they pass in any order and split across workers."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import make_app
from redbeat import RedBeatSchedulerEntry, browse, manage
from support.processes import Cluster
from support.redis_server import RedisServer, free_port, require_redis_server
from support.waiting import wait_until
from support.web import WebServer, browser_available, screenshot, write_entries

pytestmark = pytest.mark.e2e

BURST = 1000
#: How often a wait here looks again: the beat ticks once a second, so looking every
#: 20 ms (wait_until's default) only adds reads of the broker's queue, each a new
#: connection and every message decoded.
POLL = 0.1


class Stack:
    def __init__(self, redis: RedisServer, cluster: Cluster, web: WebServer,
                 metrics_port: int) -> None:
        self.redis, self.cluster, self.web = redis, cluster, web
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        self.app = make_app(redis.url)

    def sent(self, name: str) -> list[str]:
        return [task_id for task_id in self.cluster.queued_task_ids()
                if task_id.startswith(name + ":")]

    def ticks(self, count: int) -> None:
        """Wait for ``count`` more ticks of the beat: each stamps the beat's heartbeat
        (``redbeat::nodes``) anew, paused or not. A non-event (nothing sent) is proved
        over ticks counted this way, not over a sleep a loaded machine may fill with no
        tick at all."""
        client = self.redis.client()

        def last() -> float:
            return max((score for _, score in client.zrange("redbeat::nodes", 0, -1,
                                                            withscores=True)), default=0.0)

        for _ in range(count):
            before = last()
            wait_until(lambda mark=before: last() > mark, 60, "a tick of the beat",
                       interval=POLL)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    browser_available()
    require_redis_server()
    directory = tmp_path_factory.mktemp("web-beat")
    redis = RedisServer().start()
    port = free_port()
    cluster = Cluster(directory, redis.url, redis.url.replace("/0", "/1"),
                      redbeat_metrics_port=port)
    web = WebServer(redis.url, directory=directory)
    try:
        beat = cluster.beat("beat")
        beat.wait_for("Leading as")
        web.wait_ready()
        yield Stack(redis, cluster, web, port)
    finally:
        web.stop()
        cluster.stop()
        redis.cleanup()


@pytest.fixture(scope="module")
def page(stack: Stack, browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    yield context.new_page()
    context.close()


def test_disabling_an_entry_from_its_page_stops_its_dispatch(stack: Stack, page: Any) -> None:
    RedBeatSchedulerEntry("every-second", "beatapp.record", 1.0, app=stack.app).save()
    wait_until(lambda: len(stack.sent("every-second")) >= 2, 60, "two dispatches",
               interval=POLL)
    page.goto(stack.web.url + "/entry?" + "name=every-second")
    screenshot(page, "entry")
    assert page.locator("#action-enable").count() == 0  # only the actions that apply
    page.click("#action-disable")
    assert page.inner_text("#confirm-title") == "Disable every-second?"
    assert len(stack.sent("every-second")) >= 2  # asking stopped nothing yet
    page.click("#confirm")
    assert page.inner_text("#state").startswith("disabled")
    assert page.locator("#action-disable").count() == 0
    assert page.locator("#action-enable").count() == 1
    at_disable = len(stack.sent("every-second"))
    stack.ticks(3)  # each would have sent the every-second entry
    # one slot may have been claimed by the tick running at the click
    assert len(stack.sent("every-second")) <= at_disable + 1
    assert manage.get_entry(stack.app, "every-second").state == "disabled"


def test_run_now_from_the_entry_page_dispatches_it(stack: Stack, page: Any) -> None:
    RedBeatSchedulerEntry("hourly", "beatapp.record", 3600.0, app=stack.app).save()
    page.goto(stack.web.url + "/entry?name=hourly")
    page.click("#action-run")
    assert "queued hourly as hourly:run-now:" in page.inner_text(".flash")
    wait_until(lambda: any(":run-now:" in task_id for task_id in stack.sent("hourly")), 10,
               "the run-now dispatch in the broker", interval=POLL)
    assert len(stack.sent("hourly")) == 1


def test_editing_an_entry_validates_and_the_beat_follows_it(stack: Stack, page: Any) -> None:
    RedBeatSchedulerEntry("edited", "beatapp.record", 3600.0, args=[1], app=stack.app).save()
    page.goto(stack.web.url + "/entry?name=edited")
    page.click("#action-edit")
    assert page.input_value("input[name=schedule]") == "1h"
    page.select_option("select[name=kind]", "cron")
    page.fill("input[name=schedule]", "61 * * * *")  # no minute 61
    page.click("#save")
    assert "Not saved" in page.inner_text(".flash-error")
    assert page.inner_text("#error-schedule").startswith("Schedule: ")
    assert page.input_value("input[name=schedule]") == "61 * * * *"  # the input is kept
    assert manage.get_entry(stack.app, "edited").entry.schedule.run_every.total_seconds() \
        == 3600
    page.fill("textarea[name=args_json]", '["edited", 2]')
    page.select_option("select[name=kind]", "every")
    page.fill("input[name=schedule]", "1s")
    page.click("#save")
    assert "saved edited" in page.inner_text(".flash-ok")
    entry = manage.get_entry(stack.app, "edited").entry
    assert entry.args == ["edited", 2] and entry.schedule.run_every.total_seconds() == 1
    wait_until(lambda: len(stack.sent("edited")) >= 2, 60, "the edited schedule to run",
               interval=POLL)
    page.click("#action-disable")  # quiet again for the metrics test
    page.click("#confirm")


def paused_gauge(stack: Stack) -> float | None:
    """The gauge from a registry of its own (the view's /metrics keeps the quarantined
    count 30 s, which the metrics test below must see fresh)."""
    from redbeat.metrics import schedule_registry

    return schedule_registry(stack.app).get_sample_value("redbeat_schedule_paused")


def test_pausing_the_schedule_stops_the_beat_until_resumed(stack: Stack, page: Any) -> None:
    RedBeatSchedulerEntry("paused-every-second", "beatapp.record", 1.0, app=stack.app).save()
    wait_until(lambda: len(stack.sent("paused-every-second")) >= 2, 60, "two dispatches",
               interval=POLL)
    page.goto(stack.web.url + "/nodes")
    page.click("#pause")
    assert page.inner_text("#confirm-title") == "Pause the whole schedule?"
    page.click("#confirm")
    assert "The whole schedule is paused by web" in page.inner_text("#paused")
    assert paused_gauge(stack) == 1
    screenshot(page, "nodes-paused")
    stack.ticks(2)  # a tick that read the schedule before the pause may still send
    at_pause = len(stack.sent("paused-every-second"))
    stack.ticks(3)  # each would have sent the every-second entry, were it not paused
    assert len(stack.sent("paused-every-second")) == at_pause
    assert "lock expires in" in page.inner_text("#leader")  # still leading
    page.click("#resume")
    assert "running" in page.inner_text("#paused")
    wait_until(lambda: len(stack.sent("paused-every-second")) >= at_pause + 2, 15,
               "dispatches again once resumed", interval=POLL)
    assert paused_gauge(stack) == 0
    manage.set_enabled(stack.app, "paused-every-second", False)


def test_the_nodes_page_shows_the_leader_and_its_heartbeat(stack: Stack, page: Any) -> None:
    page.goto(stack.web.url + "/nodes")
    assert "lock expires in" in page.inner_text("#leader")
    row = page.locator("#nodes tr.leader")
    assert row.count() == 1 and "leader" in row.inner_text()
    screenshot(page, "nodes")


def test_the_celery_subcommand_serves_the_apps_schedule(stack: Stack, page: Any) -> None:
    """``celery -A proj redbeat web``: the app's own settings (its Redis, its prefix)."""
    port = free_port()
    web = stack.cluster.command("celery-web", "redbeat", "web", "--port", str(port))
    web.wait_for("redbeat web: http://127.0.0.1:")
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/nodes"), 60, "celery redbeat web",
               interval=POLL)
    page.goto(f"http://127.0.0.1:{port}/nodes")
    assert "lock expires in" in page.inner_text("#leader")
    web.terminate()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_the_timeline_shows_a_burst_and_links_to_its_entries(stack: Stack, page: Any) -> None:
    minute = (time.time() // 60 + 180) * 60  # three hours from now, on the minute
    # the runs other tests' entries have in that minute (an hourly one may have one)
    before = browse.compute_timeline(stack.app, time.time())
    bucket = next(bucket for bucket in before.buckets if bucket.start == minute)
    # the steady load (entries every minute or more often) is stated apart, not counted
    # among the minute's runs; the minute's entries list every entry with a run in it
    others, listed_too = bucket.bursts, bucket.count
    write_entries(stack.app, [(f"burst-{i:04d}", "beatapp.record", minute + i % 60,
                               {"every": 86400.0}) for i in range(BURST)])  # daily
    page.goto(stack.web.url + "/timeline")
    screenshot(page, "timeline")
    label = time.strftime("%H:%M", time.gmtime(minute))
    busiest = page.locator("#busiest tbody tr").first
    assert busiest.inner_text().split() == [label, str(BURST + others)]
    assert page.locator("#timeline a.bar").count() >= 2  # the burst and the hourly entry
    assert "computed 0 s ago" in page.inner_text("#figures")
    busiest.locator("a").click()
    assert page.inner_text("#band").startswith("Entries with a run in the minute")
    assert page.inner_text("#summary").startswith("50 match(es)")
    names = page.locator("#entries td.name").all_inner_texts()
    assert len(names) == 50
    assert sum(not name.startswith("burst-") for name in names) <= listed_too


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_metrics_match_the_dispatches_in_the_broker(stack: Stack, page: Any) -> None:
    # dispatches of its own (the other tests may run in another worker), then quiet
    RedBeatSchedulerEntry("metered", "beatapp.record", 1.0, app=stack.app).save()
    wait_until(lambda: len(stack.sent("metered")) >= 3, 60, "three dispatches",
               interval=POLL)
    manage.set_enabled(stack.app, "metered", False)
    client = stack.redis.client()
    client.hset("redbeat:broken", mapping={"definition": "{not json", "meta": "{}"})
    client.zadd("redbeat::schedule", {"redbeat:broken": time.time()})
    wait_until(lambda: manage.get_entry(stack.app, "broken").quarantine is not None, 10,
               "the beat to quarantine the broken entry",  # (its state says so at once)
               interval=POLL)
    stack.ticks(2)  # nothing is due now (a slot claimed at the disable has gone out)
    beat = scrape(stack.metrics_url)
    in_broker = len(stack.cluster.queued_task_ids())

    def dispatches(outcome: str) -> float:
        return beat[("redbeat_dispatches_total", (("outcome", outcome),))]

    sent, held = dispatches("sent"), dispatches("held")
    assert sent == in_broker > 0, beat
    assert dispatches("failed") == dispatches("skipped") == 0
    # a send the tick stopped waiting for (a slow machine) counts as held, and once it
    # went out it is confirmed by the publishing thread, with no lag observed
    assert sent - held <= beat[("redbeat_dispatch_lag_seconds_count", ())] <= sent
    assert beat[("redbeat_leader", ())] == 1
    assert beat[("redbeat_leadership_changes_total", ())] % 2 == 1  # leading now
    assert beat[("redbeat_tick_duration_seconds_count", ())] > 0
    web = scrape(stack.web.url + "/metrics")
    assert web[("redbeat_schedule_up", ())] == 1
    assert web[("redbeat_leader_present", ())] == 1
    assert web[("redbeat_schedule_paused", ())] == 0
    # Celery's own backend_cleanup and metered (disabled: it keeps its due score, as in
    # 2.4.2) are scheduled; broken (quarantined) is parked
    assert web[("redbeat_entries", (("state", "scheduled"),))] == client.zcount(
        "redbeat::schedule", "(0", "+inf") >= 2
    assert web[("redbeat_entries", (("state", "parked"),))] == client.zcount(
        "redbeat::schedule", -1, -1) >= 1
    assert web[("redbeat_quarantined_entries", ())] == 1
    assert beat[("redbeat_quarantined_entries", ())] == 1

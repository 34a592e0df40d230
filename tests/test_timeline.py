"""The timeline counts every run in the next 24 hours, not each entry once (a real
redis-server): intervals, a crontab spike, an end time, the budget past which entries
count once, the cache, and the entries a bar lists."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

import pytest
from celery.schedules import crontab

from conftest import make_app
from redbeat import RedBeatSchedulerEntry, browse
from redbeat.browse import Query, compute_timeline
from redbeat.policy import EntryPolicy
from support.web import write_entries


def window_start() -> float:
    now = time.time()
    return now - now % 60


def counts(app: Any, start: float, **options: Any) -> list[int]:
    return [bucket.count for bucket in compute_timeline(app, start + 1, **options).buckets]


def test_an_every_minute_entry_is_in_every_bar(redis_server: Any) -> None:
    app = make_app(redis_server.url)
    start = window_start()
    # never ran, saved to run 30 s into this minute, then every minute
    write_entries(app, [("minutely", "tasks.x", start + 30, {"every": 60.0})])
    assert counts(app, start) == [1] * 1440


def test_an_every_ten_seconds_entry_counts_six_a_minute(redis_server: Any) -> None:
    app = make_app(redis_server.url)
    start = window_start()
    write_entries(app, [("ten-s", "tasks.x", start + 5, {"every": 10.0})])
    assert counts(app, start) == [6] * 1440


def test_a_midnight_crontab_spike_stands_out(redis_server: Any) -> None:
    app = make_app(redis_server.url)
    if time.time() % 86400 < 60:  # midnight's own minute: the spike is a day away
        time.sleep(61 - time.time() % 86400)
    start = window_start()
    write_entries(app, [(f"minutely-{i}", "tasks.x", start + 30 + i % 30, {"every": 60.0})
                        for i in range(20)])
    for i in range(1000):
        RedBeatSchedulerEntry(f"nightly-{i:04d}", "tasks.n", crontab(minute=0, hour=0),
                              app=app).save()
    found = compute_timeline(app, start + 1)
    midnight = (start // 86400 + 1) * 86400  # the app's zone is UTC
    at = int((midnight - start) // 60)
    assert found.buckets[at].start == midnight and found.buckets[at].count == 1020
    assert [bucket.count for bucket in found.buckets[:at]] == [20] * at
    assert found.expanded == 1020 and not found.partial
    # the bar's entries: the nightly ones and the minutely ones, which run then too
    page = browse.read_page(app, Query(due_from=midnight, due_to=midnight + 60, runs=True,
                                       size=50), now=start + 1)
    assert len(page.rows) == 50
    names = [info.name for info in page.rows]
    assert all(name.startswith("minutely-") for name in names[:20])  # next due first
    assert all(name.startswith("nightly-") for name in names[20:])
    # the minute after midnight: the minutely ones only
    after = browse.read_page(app, Query(due_from=midnight + 60, due_to=midnight + 120,
                                        runs=True, size=50), now=start + 1)
    assert len(after.rows) == 20 and after.next_start is None


def test_runs_stop_at_the_end_time(redis_server: Any) -> None:
    app = make_app(redis_server.url)
    start = window_start()
    end = datetime.fromtimestamp(start + 7200 + 45, tz=timezone.utc)  # in 2 h
    entry = RedBeatSchedulerEntry("ending", "tasks.x", 60.0, app=app,
                                  last_run_at=datetime.fromtimestamp(start - 50,
                                                                     tz=timezone.utc),
                                  policy=EntryPolicy(end_time=end))
    entry.save()
    found = counts(app, start)
    # runs at :10 of each minute from this one (overdue or not) to the end's minute
    assert found[:121] == [1] * 121 and sum(found[121:]) == 0


def test_past_the_budget_entries_count_once_and_the_page_says_so(
        redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from redbeat.web import create_app

    app = make_app(redis_server.url)
    start = window_start()
    write_entries(app, [(f"job-{i:04d}", "tasks.x", start + 30 + i * 0.01, {"every": 60.0})
                        for i in range(1000)])
    found = compute_timeline(app, start + 1, budget=300, chunk=100)
    assert found.expanded == 300 and found.counted_once == 700 and found.partial
    assert found.buckets[0].count == 1000 and found.buckets[1].count == 300
    assert sum(bucket.count for bucket in found.buckets) == 300 * 1440 + 700
    monkeypatch.setattr(browse, "TIMELINE_BUDGET", 300)
    client = create_app(app).test_client()
    page = client.get("/timeline", headers={"Host": "127.0.0.1"}).get_data(as_text=True)
    assert "Partial timeline" in page and "only the first 300 entries" in page
    assert "700 more count once" in page
    # kept: the next page load serves the same figures, with their age
    write_entries(app, [("late", "tasks.x", start + 90, {"every": 60.0})])
    again = client.get("/timeline", headers={"Host": "127.0.0.1"}).get_data(as_text=True)
    assert "700 more count once" in again and "s ago" in again


def test_a_kept_timeline_is_served_until_it_is_too_old(redis_server: Any) -> None:
    app = make_app(redis_server.url)
    start = window_start()
    write_entries(app, [("one", "tasks.x", start + 30, {"every": 3600.0})])
    first = browse.timeline(app, start + 1)
    write_entries(app, [("two", "tasks.x", start + 30, {"every": 3600.0})])
    kept = browse.timeline(app, start + 2)
    assert kept.buckets == first.buckets and kept.computed_at == first.computed_at
    redis_server.client().pexpire("redbeat::view:timeline",
                                  (browse.TIMELINE_LIFETIME - browse.TIMELINE_REFRESH - 1)
                                  * 1000)
    fresh = browse.timeline(app, start + 3)
    assert fresh.buckets[0].count == 2 and fresh.age == 0
    assert sum(bucket.count for bucket in fresh.buckets) == 48


def test_an_entry_that_cannot_be_decoded_counts_once(redis_server: Any) -> None:
    app = make_app(redis_server.url)
    start = window_start()
    client = redis_server.client()
    client.hset("redbeat:broken", mapping={"definition": "{not json", "meta": "{}"})
    client.zadd("redbeat::schedule", {"redbeat:broken": start + 30})
    write_entries(app, [("fine", "tasks.x", start + 40, {"every": 3600.0})])
    found = compute_timeline(app, start + 1)
    assert found.unreadable == 1 and found.expanded == 2
    assert found.buckets[0].count == 2 and sum(b.count for b in found.buckets) == 25


def test_entries_that_run_every_second_are_the_steady_load_not_the_bars(
        redis_server: Any) -> None:
    """Two entries every second and one every 30 s (the steady load: 122 runs a minute)
    do not drown an hourly entry: each bucket keeps them apart, and the page's columns
    show the hourly runs on a scale of their own while it states the steady load."""
    from redbeat.web import create_app

    app = make_app(redis_server.url)
    start = window_start()
    write_entries(app, [("second-a", "tasks.s", start + 1, {"every": 1.0}),
                        ("second-b", "tasks.s", start + 1, {"every": 1.0}),
                        ("half-minute", "tasks.s", start + 1, {"every": 30.0}),
                        ("hourly", "tasks.h", start + 300, {"every": 3600.0})])
    found = compute_timeline(app, start + 1)
    assert found.frequent == 3 and set(found.frequent_names) == {
        "second-a", "second-b", "half-minute"}
    assert [bucket.steady for bucket in found.buckets[1:]] == [122] * 1439
    bursts = [bucket.bursts for bucket in found.buckets]
    assert sum(bursts) == 24 and bursts[5] == 1  # the hourly entry's runs only
    again = browse.Timeline.from_json(found.to_json(), 0.0)
    assert [bucket.steady for bucket in again.buckets] == [
        bucket.steady for bucket in found.buckets] and again.frequent == 3
    page = create_app(app).test_client().get("/timeline", headers={"Host": "127.0.0.1"})
    text = page.get_data(as_text=True)
    assert "Steady load, not in the columns: 3 entries run every minute" in text
    assert "122 runs a minute" in text
    assert text.count('class="bar"') == 24  # one column per hourly run, at full height
    assert 'height="150"' in text
    assert len(text) < 60_000  # 144 columns, not 1,440 bars

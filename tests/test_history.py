"""Dispatch history: one capped stream for the whole schedule (``<prefix>:history``),
read per entry by ``get_entry`` and ``redbeat show``; an entry's hash keeps no record of
its runs. The ring of ``history:<i>`` fields an older release kept in every hash is
still shown, and deleted when the entry is next written. Real redis-server."""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime

from click.testing import CliRunner

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.cli import main
from redbeat.lock import Holder
from redbeat.manage import get_entry
from redbeat.schedulers import get_redis
from support.recording import T0, Clock, Recording, at, leader

HISTORY = "redbeat::history"


def run(scheduler: Recording, clock: Clock, ticks: int, every: float = 10.0) -> None:
    for step in range(ticks):
        clock.now = T0 + every * step
        scheduler.tick()


def show(url: str, name: str) -> str:
    result = CliRunner().invoke(main, ["--url", url, "show", name], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_dispatch_is_a_stream_record_and_the_entry_hash_does_not_grow(redis_server):
    app = make_app(redis_server.url, redbeat_history_length=3)
    client = get_redis(app)
    entry = RedBeatSchedulerEntry("every-10", "tasks.x", 10.0, app=app, last_run_at=at(-10))
    entry.save()
    clock = Clock()
    scheduler = leader(app, clock)
    run(scheduler, clock, 1)
    after_one = client.memory_usage(entry.key, samples=0)
    run(scheduler, clock, 20)
    assert set(client.hkeys(entry.key)) == {"definition", "meta", "changed", "created"}
    assert client.memory_usage(entry.key, samples=0) <= after_one + 16  # run count digits
    history = get_entry(app, "every-10").history
    assert [record["task_id"] for record in history] == \
        [task_id for _, task_id in reversed(scheduler.sent)][:3]
    claimed_at = history[0].pop("claimed_at")  # the record's id: Redis's clock, not the test's
    assert abs(datetime.fromisoformat(claimed_at).timestamp() - time.time()) < 60
    assert history[0] == {"task_id": f"every-10:{round((T0 + 190) * 1000)}",
                          "due": at(190).isoformat(),
                          "node": Holder.parse(scheduler.node_id).process}


def test_the_stream_is_capped_whatever_the_number_of_dispatches(redis_server):
    app = make_app(redis_server.url, redbeat_history_stream_length=100)
    client = get_redis(app)
    for i in range(30):
        RedBeatSchedulerEntry(f"e{i}", "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
    clock = Clock()
    scheduler = leader(app, clock)
    run(scheduler, clock, 20)
    assert len(scheduler.sent) == 600
    # trimmed with MAXLEN ~: whole nodes of the stream (100 records each here) go
    assert 100 <= client.xlen(HISTORY) <= 200
    newest = client.xrevrange(HISTORY, count=30)
    assert {record["task_id"] for _, record in newest} == \
        {task_id for _, task_id in scheduler.sent[-30:]}


def test_show_lists_only_the_entrys_own_dispatches(redis_server):
    app = make_app(redis_server.url)
    for name in ("alpha", "beta"):
        RedBeatSchedulerEntry(name, "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
    clock = Clock()
    scheduler = leader(app, clock)
    run(scheduler, clock, 4)
    shown = show(redis_server.url, "alpha")
    listed = [line.split()[0] for line in
              shown.split("recent dispatches:\n")[1].split("next runs:")[0].splitlines()]
    assert listed == [f"alpha:{round((T0 + 10 * step) * 1000)}" for step in (3, 2, 1, 0)]
    assert "beta" not in shown


def test_history_is_not_recorded_when_turned_off(redis_server):
    app = make_app(redis_server.url, redbeat_history_length=0)
    RedBeatSchedulerEntry("quiet", "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
    clock = Clock()
    scheduler = leader(app, clock)
    run(scheduler, clock, 2)
    assert len(scheduler.sent) == 2 and not get_redis(app).exists(HISTORY)
    assert get_entry(app, "quiet").history == []


class Refusing(Recording):
    """A task whose arguments Celery refuses, as a TypeError from its signature would."""

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        if entry.name == "bad":
            raise TypeError("strict() takes 1 positional argument but 2 were given")
        super().apply_async(entry, producer, advance, **kwargs)


def test_a_refused_dispatch_shows_its_reason_next_to_its_record(redis_server):
    app = make_app(redis_server.url)
    for name in ("bad", "good"):
        RedBeatSchedulerEntry(name, "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
    clock = Clock()
    scheduler = Refusing(app, clock=clock)
    scheduler.tick()
    run(scheduler, clock, 2)
    shown = show(redis_server.url, "bad")
    assert f"bad:{round((T0 + 10) * 1000)}" in shown
    assert shown.count("FAILED: TypeError") == 2, shown
    assert "failed dispatches: 2" in shown
    assert "FAILED" not in show(redis_server.url, "good")


def legacy_record(name: str, seconds: float) -> str:
    """One dispatch as releases before the history stream kept it in the entry's hash."""
    return json.dumps({"task_id": f"{name}:{round((T0 + seconds) * 1000)}",
                       "due": at(seconds).isoformat(), "claimed_at": at(seconds).isoformat(),
                       "node": "old-host:4242:0123456789abcdef"})


def test_an_older_releases_history_fields_are_shown_then_cleaned_up(redis_server):
    app = make_app(redis_server.url)
    client = get_redis(app)
    entry = RedBeatSchedulerEntry("upgraded", "tasks.x", 10.0, app=app, last_run_at=at(-10))
    entry.save()
    ring = {f"history:{i}": legacy_record("upgraded", -10 * (3 - i)) for i in range(3)}
    client.hset(entry.key, mapping={**ring, "history:7": "not json"})  # advisory: skipped
    before = get_entry(app, "upgraded").history
    assert [record["due"] for record in before] == [at(-10).isoformat(), at(-20).isoformat(),
                                                   at(-30).isoformat()]
    assert "old-host:4242:0123456789abcdef" in show(redis_server.url, "upgraded")
    clock = Clock()
    scheduler = leader(app, clock)
    run(scheduler, clock, 1)
    assert set(client.hkeys(entry.key)) == {"definition", "meta", "changed", "created"}
    after = get_entry(app, "upgraded").history
    assert [record["task_id"] for record in after] == [f"upgraded:{round(T0 * 1000)}"]


def test_a_partial_ring_without_its_first_field_still_shows(redis_server):
    """A ring an older release started mid-way (a run count carried over from
    celery-redbeat) may lack ``history:0``: its records stay readable."""
    app = make_app(redis_server.url)
    client = get_redis(app)
    entry = RedBeatSchedulerEntry("partial", "tasks.x", 10.0, app=app, last_run_at=at(-10))
    entry.save()
    client.hset(entry.key, "history:4", legacy_record("partial", -10))
    clock = Clock()
    scheduler = leader(app, clock)
    run(scheduler, clock, 1)
    tasks = [record["task_id"] for record in get_entry(app, "partial").history]
    assert tasks == [f"partial:{round(T0 * 1000)}", f"partial:{round((T0 - 10) * 1000)}"]


def test_another_type_at_the_stream_key_stops_neither_beat_nor_show_nor_the_web(redis_server,
                                                                               caplog):
    """Another client's string at ``<prefix>:history``: beat keeps sending (the record is
    advisory), and ``show`` and the entry page show the entry and say why its history is
    missing (``show`` failed with the Redis error, exit 1)."""
    from redbeat.web import create_app

    app = make_app(redis_server.url)
    get_redis(app).set(HISTORY, "not a stream")
    RedBeatSchedulerEntry("steady", "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
    clock = Clock()
    scheduler = leader(app, clock)
    with caplog.at_level(logging.INFO, logger="celery.beat"):
        run(scheduler, clock, 3)
        # one line for the whole outage (there was none at all), one when it is over
        assert [record.getMessage() for record in caplog.records
                if "Dispatch history" in record.getMessage()] == [
            "Dispatch history not written to redbeat::history: WRONGTYPE Operation "
            "against a key holding the wrong kind of value (entries still run; fix or "
            "delete that key)"]
    assert [name for name, _ in scheduler.sent] == ["steady"] * 3
    assert "recent dispatches: (history stream unreadable: redbeat::history: WRONGTYPE" \
        in show(redis_server.url, "steady")
    page = create_app(app).test_client().get("/entry?name=steady",
                                              headers={"Host": "127.0.0.1"})
    assert page.status_code == 200
    assert "history stream unreadable" in page.get_data(as_text=True)
    get_redis(app).delete(HISTORY)
    with caplog.at_level(logging.INFO, logger="celery.beat"):
        clock.now += 10
        scheduler.tick()
    assert "Dispatch history written again to redbeat::history" in caplog.text


def test_a_user_without_stream_commands_runs_and_shows_without_history():
    """An ACL user set up from an older docs/deployments.md (no XADD, XTRIM, XREVRANGE):
    the commit still applies (the record is skipped, not the run), and the entry reads
    with the reason in place of its history."""
    from support.deployments import SCHEDULER_COMMANDS, acl_server

    commands = SCHEDULER_COMMANDS.replace(" +xadd +xtrim +xrevrange", "")
    assert commands != SCHEDULER_COMMANDS
    with acl_server("redbeat:", commands=commands) as server:
        app = make_app(server.beat_url)
        entry = RedBeatSchedulerEntry("e", "tasks.x", 10.0, app=app, last_run_at=at(-10))
        entry.save()
        clock = Clock()
        scheduler = leader(app, clock)
        run(scheduler, clock, 2)
        assert [task_id for _, task_id in scheduler.sent] == \
            [f"e:{round(T0 * 1000)}", f"e:{round((T0 + 10) * 1000)}"]
        assert RedBeatSchedulerEntry.from_key(entry.key, app=app).total_run_count == 2
        assert not server.client().exists(HISTORY)
        info = get_entry(app, "e")
        assert info.history == [] and "no permissions" in (info.history_error or "")


def test_hostile_dispatch_records_are_shown_as_text_on_one_line(redis_server):
    """Records another client wrote (a legacy ring field, a stream record): an ANSI
    sequence in the node reached the terminal, and a due time the shown zone cannot hold
    (year 1 at +14:00) failed `show` with an OverflowError."""
    app = make_app(redis_server.url)
    client = get_redis(app)
    entry = RedBeatSchedulerEntry("odd", "tasks.x", 10.0, app=app, last_run_at=at(-10))
    entry.save()
    client.hset(entry.key, mapping={
        "history:0": json.dumps({"task_id": "a\nforged", "due": "0001-01-01T00:00:00+14:00",
                                 "node": "\x1b[2J"}),
        "history:1": json.dumps({"task_id": ["x"], "due": {"y": 1}})})
    client.xadd(HISTORY, {"key": entry.key, "task_id": "s", "due_ms": "z", "node": "\x9b1m"})
    output = show(redis_server.url, "odd")
    assert "\x1b" not in output and "\x9b" not in output and "\nforged" not in output
    assert "  a\\nforged  due 0001-01-01T00:00:00+14:00  by \\x1b[2J" in output
    assert "  s  due z  by \\x9b1m" in output

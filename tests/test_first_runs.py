"""When an entry runs for the first time, as in Celery: an entry created without a last
run counts as created now (to the millisecond) and first runs one interval, or at the
next calendar match strictly after that; a new static first runs one interval after the
leader first syncs it; an entry written by hand (a definition with no meta, or a null
``last_run_at``, and score 0) is still due at once.

Entries take their creation time from the real clock, so expectations are computed
from the ``last_run_at`` stored for them; the scheduler's clock is injected, and set
just before and at the expected first run.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from celery.schedules import crontab

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.entry import to_score
from redbeat.schedulers import get_redis
from redbeat.schedules import rrule
from support.recording import Clock, Recording, after_interval

SCHEDULE_KEY = "redbeat::schedule"
#: A sync time clear of every boundary the schedules below have (12:00:07.5 UTC).
SYNC = datetime(2026, 11, 23, 12, 0, 7, 500000, tzinfo=timezone.utc)
DAY_START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def floor_to(moment: datetime, minutes: int) -> datetime:
    start = moment.replace(second=0, microsecond=0)
    return start.replace(minute=start.minute - start.minute % minutes)


# name -> (schedule, the first run of an entry created at ``t``: strictly after it)
SCHEDULES = {
    "interval": (10.0, lambda t: after_interval(t, timedelta(seconds=10))),
    "crontab": (crontab(minute="*/5"), lambda t: floor_to(t, 5) + timedelta(minutes=5)),
    "rrule": (rrule("MINUTELY", dtstart=DAY_START),
              lambda t: floor_to(t, 1) + timedelta(minutes=1)),
}


def ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def score(app, key: str) -> float | None:
    return get_redis(app).zscore(SCHEDULE_KEY, key)


def raw_meta(app, key: str) -> dict:
    return json.loads(get_redis(app).hget(key, "meta"))


def assert_datetime_meta(meta: dict) -> None:
    """celery-redbeat 2.4.2's encoding of ``last_run_at``: a tagged UTC datetime."""
    last = meta["last_run_at"]
    assert last["__type__"] == "datetime" and last["timezone"] == "UTC"
    assert set(last) >= {"year", "month", "day", "hour", "minute", "second", "microsecond"}


def leader_at(app, clock: Clock) -> Recording:
    # without Celery's own static (celery.backend_cleanup, daily at 4:00), which a tick
    # at 4:00 UTC sends too: these tests compare what a tick sent with their entry alone
    app.conf.result_expires = None
    scheduler = Recording(app, clock=clock)
    assert scheduler.tick() == 0.0 and scheduler.leading
    return scheduler


def sent_at(scheduler: Recording, clock: Clock, moment: datetime) -> list[tuple[str, str]]:
    """Tick at ``moment``; what that tick sent."""
    clock.now = moment.timestamp()
    before = len(scheduler.sent)
    scheduler.tick()
    return scheduler.sent[before:]


# -- entries saved from Python ---------------------------------------------------------------


@pytest.mark.parametrize("last_run_at", ["omitted", None], ids=["omitted", "None"])
@pytest.mark.parametrize("kind", sorted(SCHEDULES))
def test_a_saved_entry_first_runs_after_its_creation(app, kind, last_run_at):
    schedule, first_run = SCHEDULES[kind]
    extra = {} if last_run_at == "omitted" else {"last_run_at": last_run_at}
    before = datetime.now(timezone.utc)
    entry = RedBeatSchedulerEntry(kind, "tasks.x", schedule, app=app, **extra)
    entry.save()
    after = datetime.now(timezone.utc)

    created = entry.last_run_at
    assert created.microsecond % 1000 == 0  # cut to the millisecond, like scores
    assert before - timedelta(milliseconds=1) <= created <= after
    meta = raw_meta(app, entry.key)
    assert_datetime_meta(meta)
    stored = RedBeatSchedulerEntry.from_key(entry.key, app=app)
    assert stored.last_run_at == created and stored.total_run_count == 0
    due = first_run(created)
    assert due > created
    assert score(app, entry.key) == to_score(due)
    assert entry.is_due().is_due is False  # not at once

    clock = Clock(created.timestamp())
    scheduler = leader_at(app, clock)
    assert sent_at(scheduler, clock, created) == []
    assert sent_at(scheduler, clock, due - timedelta(milliseconds=1)) == []
    assert sent_at(scheduler, clock, due) == [(kind, f"{kind}:{ms(due)}")]
    ran = RedBeatSchedulerEntry.from_key(entry.key, app=app)
    assert ran.last_run_at == due and ran.total_run_count == 1
    assert_datetime_meta(raw_meta(app, entry.key))


def test_an_interval_saved_from_python_is_not_sent_by_the_next_tick(app):
    """The 2.4.2-era surprise this replaces: a new entry fired on the first tick."""
    entry = RedBeatSchedulerEntry("fresh", "tasks.x", 3600.0, app=app)
    entry.save()
    clock = Clock(datetime.now(timezone.utc).timestamp())
    scheduler = leader_at(app, clock)
    scheduler.tick()
    assert scheduler.sent == []
    assert score(app, entry.key) == to_score(after_interval(entry.last_run_at, timedelta(hours=1)))


def test_an_explicit_last_run_at_is_kept(app):
    last = datetime(2026, 11, 23, 11, 59, 55, 123456, tzinfo=timezone.utc)
    entry = RedBeatSchedulerEntry("given", "tasks.x", 10.0, app=app, last_run_at=last)
    entry.save()
    assert RedBeatSchedulerEntry.from_key(entry.key, app=app).last_run_at == last
    assert score(app, entry.key) == to_score(after_interval(last, timedelta(seconds=10)))


@pytest.mark.parametrize("how", ["saved", "static"])
@pytest.mark.parametrize("kind", ["crontab", "rrule"])
def test_a_calendar_entry_created_exactly_on_a_match_waits_for_the_next(redis_server, kind,
                                                                        how):
    """Issue 12, item 7: as in Celery, created at 12:00:00.000 on an every-five-minutes
    schedule, it first runs at 12:05, not at once."""
    schedule = {"crontab": crontab(minute="*/5"),
                "rrule": rrule("MINUTELY", interval=5, dtstart=DAY_START)}[kind]
    on_match = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)
    statics = {"e": {"task": "tasks.x", "schedule": schedule}} if how == "static" else {}
    app = make_app(redis_server.url, beat_schedule=statics)
    app.now = lambda: on_match  # the clock the entry's creation time is read from
    if how == "saved":
        RedBeatSchedulerEntry("e", "tasks.x", schedule, app=app).save()
    clock = Clock(on_match.timestamp())
    scheduler = leader_at(app, clock)
    following = on_match + timedelta(minutes=5)
    assert score(app, "redbeat:e") == to_score(following)
    assert sent_at(scheduler, clock, on_match) == []
    assert sent_at(scheduler, clock, following) == [("e", f"e:{ms(following)}")]


# -- statics (beat_schedule) -------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(SCHEDULES))
def test_a_new_static_first_runs_after_the_leader_first_syncs_it(redis_server, kind):
    schedule, first_run = SCHEDULES[kind]
    app = make_app(redis_server.url, beat_schedule={kind: {"task": "tasks.s",
                                                           "schedule": schedule}})
    key = f"redbeat:{kind}"
    clock = Clock(SYNC.timestamp())
    first = leader_at(app, clock)
    due = first_run(SYNC)
    assert score(app, key) == to_score(due)
    meta = raw_meta(app, key)
    assert_datetime_meta(meta)
    stored = RedBeatSchedulerEntry.from_key(key, app=app)
    assert stored.last_run_at == SYNC and stored.total_run_count == 0
    assert sent_at(first, clock, SYNC) == []

    # a restart before the first run keeps it (the sync time is history, not reset)
    first.close()
    later = Clock((SYNC + timedelta(seconds=5)).timestamp())
    second = leader_at(make_app(redis_server.url, beat_schedule={kind: {
        "task": "tasks.s", "schedule": schedule}}), later)
    assert score(app, key) == to_score(due)
    assert sent_at(second, later, due - timedelta(milliseconds=1)) == []
    assert sent_at(second, later, due) == [(kind, f"{kind}:{ms(due)}")]
    ran = RedBeatSchedulerEntry.from_key(key, app=app)
    assert ran.last_run_at == due and ran.total_run_count == 1
    second.close()


def test_a_static_synced_with_locking_disabled_also_waits(redis_server):
    app = make_app(redis_server.url, redbeat_lock_key=None,
                   beat_schedule={"s": {"task": "tasks.s", "schedule": 30.0}})
    clock = Clock(SYNC.timestamp())
    scheduler = Recording(app, clock=clock)  # no lock: statics are written at start
    due = after_interval(SYNC, timedelta(seconds=30))
    assert score(app, "redbeat:s") == to_score(due)
    assert sent_at(scheduler, clock, SYNC) == []
    assert sent_at(scheduler, clock, due) == [("s", f"s:{ms(due)}")]


# -- entries written by hand -------------------------------------------------------------------

# meta variant -> hash fields besides the definition
NO_RUN_YET = {
    "no meta": {},
    "null meta": {"meta": json.dumps({"last_run_at": None})},
    "null meta with count": {"meta": json.dumps({"last_run_at": None, "total_run_count": 0})},
}
RAW_INTERVAL = json.dumps({"name": "raw", "task": "tasks.raw",
                           "schedule": {"__type__": "interval", "every": 30, "relative": False}})


def write_by_hand(app, name: str, definition: str, fields: dict, score_: float = 0) -> str:
    key = f"redbeat:{name}"
    client = get_redis(app)
    client.hset(key, mapping={"definition": definition, **fields})
    client.zadd(SCHEDULE_KEY, {key: score_})
    return key


def definition_of(app, name: str, schedule) -> str:
    return RedBeatSchedulerEntry(name, "tasks.raw", schedule, app=app).definition_json()


@pytest.mark.parametrize("variant", sorted(NO_RUN_YET))
@pytest.mark.parametrize("kind", ["interval", "interval json", "crontab on a match",
                                  "rrule on a match"])
def test_a_hand_written_entry_that_never_ran_is_due_at_once(app, kind, variant):
    """Due at once: an interval at any time, a calendar schedule when ``now`` is one of
    its times (it never waits a full interval)."""
    now = datetime(2026, 11, 23, 12, 5, tzinfo=timezone.utc)  # a */5 and a minutely match
    schedules = {"interval": 30.0, "crontab on a match": crontab(minute="*/5"),
                 "rrule on a match": rrule("MINUTELY", dtstart=DAY_START)}
    name = "raw"
    definition = RAW_INTERVAL if kind == "interval json" else \
        definition_of(app, name, schedules[kind])
    key = write_by_hand(app, name, definition, NO_RUN_YET[variant])
    clock = Clock(now.timestamp())
    scheduler = leader_at(app, clock)
    assert sent_at(scheduler, clock, now) == [(name, f"{name}:{ms(now)}")]
    meta = raw_meta(app, key)
    assert_datetime_meta(meta)
    ran = RedBeatSchedulerEntry.from_key(key, app=app)
    assert ran.last_run_at == now and ran.total_run_count == 1
    assert sent_at(scheduler, clock, now + timedelta(seconds=1)) == []


@pytest.mark.parametrize("variant", sorted(NO_RUN_YET))
@pytest.mark.parametrize("kind", ["crontab", "rrule"])
def test_a_hand_written_calendar_entry_waits_for_its_next_match(app, kind, variant):
    schedule, first_run = SCHEDULES[kind]
    key = write_by_hand(app, "raw", definition_of(app, "raw", schedule), NO_RUN_YET[variant])
    clock = Clock(SYNC.timestamp())
    scheduler = leader_at(app, clock)
    due = first_run(SYNC)
    assert sent_at(scheduler, clock, SYNC) == []
    assert score(app, key) == to_score(due)  # the score 0 is corrected to the real time
    assert sent_at(scheduler, clock, due) == [("raw", f"raw:{ms(due)}")]


def test_a_hand_written_entry_with_a_future_score_waits_for_it(app):
    at = SYNC + timedelta(seconds=42)
    key = write_by_hand(app, "raw", RAW_INTERVAL, {}, score_=at.timestamp())
    clock = Clock(SYNC.timestamp())
    scheduler = leader_at(app, clock)
    assert sent_at(scheduler, clock, SYNC) == []
    assert sent_at(scheduler, clock, at) == [("raw", f"raw:{ms(at)}")]
    assert RedBeatSchedulerEntry.from_key(key, app=app).last_run_at == at


def test_a_hand_written_entry_with_score_0_and_a_last_run_follows_the_last_run(app):
    last = SYNC - timedelta(seconds=4)
    meta = {"meta": json.dumps({"last_run_at": {
        "__type__": "datetime", "year": last.year, "month": last.month, "day": last.day,
        "hour": last.hour, "minute": last.minute, "second": last.second,
        "microsecond": last.microsecond, "timezone": "UTC"}})}
    key = write_by_hand(app, "raw", RAW_INTERVAL, meta)
    clock = Clock(SYNC.timestamp())
    scheduler = leader_at(app, clock)
    assert sent_at(scheduler, clock, SYNC) == []
    assert score(app, key) == to_score(after_interval(last, timedelta(seconds=30)))


def test_a_hand_written_entry_on_the_per_entry_path_is_due_at_once(app):
    """A subclass with its own hooks reads the same hand-written entry the same way."""
    from redbeat import RedBeatScheduler

    sent = []

    class Hooked(RedBeatScheduler):
        def is_due(self, entry):
            return super().is_due(entry)

        def send_task(self, name, *args, **kwargs):
            sent.append(name)

    key = write_by_hand(app, "raw", RAW_INTERVAL, NO_RUN_YET["null meta"])
    scheduler = Hooked(app)
    assert scheduler.tick() == 0.0
    scheduler.tick()
    assert sent == ["tasks.raw"]
    ran = RedBeatSchedulerEntry.from_key(key, app=app)
    assert ran.total_run_count == 1 and isinstance(ran.last_run_at, datetime)
    assert_datetime_meta(raw_meta(app, key))

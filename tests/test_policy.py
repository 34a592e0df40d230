"""Per-entry semantics through the real tick with a controlled clock: one-off entries,
start/end windows, misfire grace, catch-up, jitter, retention."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from redbeat import RedBeatSchedulerEntry, manage
from redbeat.entry import InvalidEntry
from redbeat.policy import EntryPolicy
from redbeat.schedulers import SWEEP_EVERY, get_redis
from redbeat.schedules import clocked
from support.recording import T0, Clock, at, leader

UNKNOWN_ZONE = json.dumps(
    {
        "start_time": {
            "__type__": "datetime",
            "year": 2030,
            "month": 1,
            "day": 1,
            "hour": 0,
            "minute": 0,
            "second": 0,
            "microsecond": 0,
            "timezone": "Mars/Olympus",
        }
    }
)


def names(scheduler):
    return [task_id for _, task_id in scheduler.sent]


def test_one_off_runs_once_then_is_finished_and_expires(app):
    clock = Clock()
    RedBeatSchedulerEntry("once", "tasks.once", clocked(at(5)), ttl=3600, app=app).save()
    scheduler = leader(app, clock)
    scheduler.tick()
    assert scheduler.sent == []
    clock.now = T0 + 5
    scheduler.tick()
    clock.now = T0 + 500
    scheduler.tick()
    assert names(scheduler) == [f"once:{round((T0 + 5) * 1000)}"]
    client = get_redis(app)
    assert client.zscore("redbeat::schedule", "redbeat:once") == -1  # parked, never read
    assert 0 < client.ttl("redbeat:once") <= 3600
    assert json.loads(client.hget("redbeat:once", "meta"))["total_run_count"] == 1


def test_expired_finished_entries_leave_no_member_behind(app):
    # A one-off's hash expires after its ttl, but its parked member is read by no tick:
    # without the leader's sweep the schedule would grow by one member per one-off.
    clock = Clock()
    RedBeatSchedulerEntry("once", "tasks.once", clocked(at(5)), ttl=3600, app=app).save()
    RedBeatSchedulerEntry("off", "tasks.off", 60.0, enabled=False, app=app).save()
    scheduler = leader(app, clock)
    clock.now = T0 + 5
    scheduler.tick()
    client = get_redis(app)
    client.pexpire("redbeat:once", 1)  # the ttl running out, without waiting an hour
    time.sleep(0.05)
    assert client.zscore("redbeat::schedule", "redbeat:once") == -1
    assert "once" not in [info.name for info in manage.list_entries(app)]
    clock.now = T0 + 5 + SWEEP_EVERY
    scheduler.tick()
    assert client.zscore("redbeat::schedule", "redbeat:once") is None
    assert client.zscore("redbeat::schedule", "redbeat:off") > 0  # disabled: kept, scored


def test_one_off_in_the_past_runs_once_when_beat_starts(app):
    RedBeatSchedulerEntry("late", "tasks.once", clocked(at(-600)), app=app).save()
    scheduler = leader(app, Clock())
    scheduler.tick()
    scheduler.tick()
    assert len(scheduler.sent) == 1


def test_one_off_raw_json(app):
    client = get_redis(app)
    client.hset(
        "redbeat:raw-once",
        "definition",
        json.dumps(
            {
                "name": "raw-once",
                "task": "tasks.once",
                "schedule": {
                    "__type__": "clocked",
                    "run_at": {
                        "__type__": "datetime",
                        "year": 2026,
                        "month": 11,
                        "day": 23,
                        "hour": 12,
                        "minute": 0,
                        "second": 3,
                        "microsecond": 0,
                        "timezone": "UTC",
                    },
                },
            }
        ),
    )
    client.zadd("redbeat::schedule", {"redbeat:raw-once": 0})
    clock = Clock(T0 + 10)
    scheduler = leader(app, clock)
    scheduler.tick()
    assert names(scheduler) == [f"raw-once:{round((T0 + 3) * 1000)}"]


def test_start_and_end_time(app):
    clock = Clock()
    RedBeatSchedulerEntry(
        "window",
        "tasks.w",
        10.0,
        start_time=at(100),
        end_time=at(125),
        app=app,
        last_run_at=at(-10),
    ).save()
    scheduler = leader(app, clock)
    for now in (0, 50, 99, 100, 110, 120, 130, 200):
        clock.now = T0 + now
        scheduler.tick()
    assert names(scheduler) == [f"window:{round((T0 + s) * 1000)}" for s in (100, 110, 120)]
    assert get_redis(app).zscore("redbeat::schedule", "redbeat:window") == -1


def test_misfire_grace_skips_a_late_slot_and_records_it(app):
    clock = Clock()
    # slots at -280, -220, -160, -100, -40: the latest is 40 s late
    RedBeatSchedulerEntry(
        "strict", "tasks.s", 60.0, last_run_at=at(-340), misfire_grace_time=30, app=app
    ).save()
    RedBeatSchedulerEntry("lenient", "tasks.l", 60.0, last_run_at=at(-340), app=app).save()
    scheduler = leader(app, clock)
    scheduler.tick()
    assert [task.split(":")[0] for task in names(scheduler)] == ["lenient"]
    record = json.loads(get_redis(app).hget("redbeat:strict", "misfires"))
    assert record["skipped"] == 1 and "coalesced" not in record
    clock.now = T0 + 20
    scheduler.tick()  # back on schedule: the next slot is on time and runs
    assert "strict" in [task.split(":")[0] for task in names(scheduler)]


def test_global_misfire_grace_default(redis_server):
    from conftest import make_app

    app = make_app(redis_server.url, redbeat_misfire_grace_time=10)
    RedBeatSchedulerEntry("late", "tasks.l", 60.0, last_run_at=at(-60 - 30), app=app).save()
    scheduler = leader(app, Clock())
    scheduler.tick()
    assert scheduler.sent == []


def test_without_coalescing_each_missed_slot_runs_up_to_the_bound(app):
    RedBeatSchedulerEntry(
        "each", "tasks.e", 60.0, last_run_at=at(-60 * 10), coalesce=False, max_catch_up=3, app=app
    ).save()
    scheduler = leader(app, Clock())
    scheduler.tick()
    assert names(scheduler) == [f"each:{round((T0 + s) * 1000)}" for s in (-120, -60, 0)]
    entry = RedBeatSchedulerEntry.from_key("redbeat:each", app=app)
    assert entry.total_run_count == 3 and entry.last_run_at == at(0)
    record = json.loads(get_redis(app).hget("redbeat:each", "misfires"))
    assert record["skipped"] == 7  # the older missed slots beyond the bound


def test_jitter_delays_the_send_but_keeps_the_slot_id(app):
    clock = Clock()
    for i in range(20):
        RedBeatSchedulerEntry(
            f"j{i}", "tasks.j", 3600.0, last_run_at=at(-3600), jitter=30, app=app
        ).save()
    scheduler = leader(app, clock)
    sent_at = {}
    for step in range(0, 32):
        clock.now = T0 + step
        before = len(scheduler.sent)
        scheduler.tick()
        for _, task_id in scheduler.sent[before:]:
            sent_at[task_id] = step
    assert len(sent_at) == 20
    assert all(task_id.endswith(f":{round(T0 * 1000)}") for task_id in sent_at)
    assert len(set(sent_at.values())) > 5  # spread over the window, not all at once
    # the same slot gets the same delay on every node (no shared state, no randomness)
    delays = {EntryPolicy(jitter=30).delay("j1", at(0)) for _ in range(3)}
    assert len(delays) == 1 and timedelta(0) <= delays.pop() < timedelta(seconds=30)
    assert EntryPolicy(jitter=30).delay("j1", at(0)) != EntryPolicy(jitter=30).delay("j2", at(0))


def test_entries_without_policy_stay_242_compatible(app):
    RedBeatSchedulerEntry("plain", "tasks.p", 5.0, app=app).save()
    assert not get_redis(app).hexists("redbeat:plain", "policy")
    RedBeatSchedulerEntry("windowed", "tasks.p", 5.0, end_time=at(10), app=app).save()
    stored = json.loads(get_redis(app).hget("redbeat:windowed", "policy"))
    assert list(stored) == ["end_time"] and stored["end_time"]["__type__"] == "datetime"
    definition = json.loads(get_redis(app).hget("redbeat:windowed", "definition"))
    assert set(definition) == {"name", "task", "args", "kwargs", "options", "schedule", "enabled"}


@pytest.mark.parametrize(
    "policy",
    [
        '{"jitter": -1}',
        '{"color": "red"}',
        "[1]",
        '{"coalesce": "yes"}',
        '{"max_catch_up": 0}',
        UNKNOWN_ZONE,
        UNKNOWN_ZONE.replace('"Mars/Olympus"', "1e9"),
    ],
)
def test_bad_policy_is_poison(app, policy):
    """An unknown zone in a start_time (a KeyError, not a ValueError) escaped as is, and
    `redbeat list`, `show` and the web's table failed for every entry, exit 5."""
    with pytest.raises(InvalidEntry):
        RedBeatSchedulerEntry.decode(
            app,
            "redbeat:x",
            json.dumps(
                {"name": "x", "task": "t", "schedule": {"__type__": "interval", "every": 1}}
            ),
            None,
            policy=policy,
        )


def test_a_grace_of_any_size_is_a_grace():
    """Only jitter and ttl are bounded (they are added to times); a grace of 1e12 s, the
    app-wide setting allows it, is a grace that never runs out."""
    huge = EntryPolicy().with_default_grace(1e12)
    assert huge.misfire_grace_time == 1e12 and not huge.too_late(at(0), at(10**8))
    assert EntryPolicy(misfire_grace_time=float("inf")).misfire_grace_time == float("inf")


def test_policy_round_trip():
    policy = EntryPolicy(
        start_time=datetime(2026, 1, 1, tzinfo=timezone.utc),
        end_time=datetime(2027, 1, 1, tzinfo=timezone.utc),
        misfire_grace_time=30,
        coalesce=False,
        max_catch_up=5,
        jitter=2.5,
        ttl=86400,
    )
    assert EntryPolicy.from_json(policy.to_json()) == policy
    assert EntryPolicy().to_json() is None
    assert EntryPolicy.from_json(None) == EntryPolicy()
    assert policy.window(None, policy.end_time + timedelta(seconds=1)) is None


def test_catch_up_of_a_dense_rrule_after_long_downtime(app):
    """Two days of missed secondly slots: one pass over the rule, not one per slot (a
    per-slot walk rescans the rule from its start each time and never finishes)."""
    from redbeat.schedules import rrule

    start = at(-2 * 86400)
    RedBeatSchedulerEntry(
        "dense", "tasks.d", rrule("SECONDLY", dtstart=start), app=app, last_run_at=start
    ).save()
    RedBeatSchedulerEntry(
        "dense-each",
        "tasks.d",
        rrule("SECONDLY", dtstart=start),
        app=app,
        last_run_at=start,
        coalesce=False,
        max_catch_up=2,
    ).save()
    scheduler = leader(app, Clock())
    scheduler.tick()
    assert sorted(names(scheduler)) == sorted(
        [
            f"dense:{round(T0 * 1000)}",
            f"dense-each:{round((T0 - 1) * 1000)}",
            f"dense-each:{round(T0 * 1000)}",
        ]
    )
    assert not get_redis(app).hexists("redbeat:dense", "misfires")  # coalesced, not skipped
    record = json.loads(get_redis(app).hget("redbeat:dense-each", "misfires"))
    assert record["skipped"] == 2 * 86400 - 2  # every missed second but the two run


@pytest.mark.parametrize("meta", ["created", "never ran"])
def test_jitter_neither_pushes_an_entry_back_nor_parks_it_unrun(app, meta):
    """Issue 12, item 4, through the tick: ticks at each score (plus a little lateness)
    leave the score where it is; every 10 s slot is sent once, within its jitter; a
    windowed entry sends its slots inside the window, then is parked. "never ran" is an
    entry stored with a null last_run_at and its first slot's jittered score (a one-off,
    a hand-written entry): its score was read as a new due time and jittered again."""
    from redbeat.entry import to_score
    from redbeat.schedules import rrule

    client = get_redis(app)
    clock = Clock()
    every_10 = rrule("SECONDLY", interval=10, dtstart=at(0))
    for name, rules in (
        ("plain", EntryPolicy(jitter=2.0)),
        ("windowed", EntryPolicy(jitter=2.0, end_time=at(45))),
    ):
        entry = RedBeatSchedulerEntry(
            name, "tasks.j", every_10, app=app, last_run_at=at(0), policy=rules
        )
        entry.save()
        if meta == "never ran":
            client.hset(entry.key, "meta", json.dumps({"last_run_at": None}))
            client.zadd(
                "redbeat::schedule", {entry.key: to_score(at(10) + rules.delay(name, at(10)))}
            )
    scheduler = leader(app, clock)
    sent: dict[str, list[float]] = {"plain": [], "windowed": []}
    while True:
        score = min(
            s for _, s in client.zrange("redbeat::schedule", 0, -1, withscores=True) if s > 0
        )
        if score > T0 + 62:
            break
        before = len(scheduler.sent)
        clock.now = score + 0.05
        scheduler.tick()
        assert client.zscore("redbeat::schedule", "redbeat:plain") >= score  # never earlier
        for name, task_id in scheduler.sent[before:]:
            due = int(task_id.rsplit(":", 1)[1]) / 1000 - T0
            assert 0 <= clock.now - T0 - due <= 2.05  # sent within its jitter
            sent[name].append(due)
    assert sent["plain"] == [10, 20, 30, 40, 50, 60]
    assert sent["windowed"] == [10, 20, 30, 40]
    assert client.zscore("redbeat::schedule", "redbeat:windowed") == -1


def _seconds_after(base: datetime, *offsets: float) -> list[datetime]:
    return [base + timedelta(seconds=offset) for offset in offsets]


BASE = datetime(2027, 6, 1, 9, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("every", "now", "rules", "expected", "dropped"),
    [
        # an interval that does not divide a minute: the runs kept are its own (found by the
        # simulator: the tail was walked from latest - 60 s, off the chain, and stayed off)
        (11.0, 380.3, {"coalesce": False, "max_catch_up": 4}, (341, 352, 363, 374), 31),
        (11.0, 380.3, {}, (374,), 0),
        (7.0, 3 * 3600 + 0.5, {"coalesce": False, "max_catch_up": 2}, (10787, 10794), 1541),
        # a catch-up after the window closed runs the window's last slot, never one past it
        (60.0, 600.0, {"end_time": BASE + timedelta(seconds=250)}, (240,), 0),
        (
            60.0,
            600.0,
            {"end_time": BASE + timedelta(seconds=250), "coalesce": False, "max_catch_up": 2},
            (180, 240),
            3,
        ),
    ],
    ids=[
        "bounded-11s",
        "coalesced-11s",
        "bounded-7s-hours",
        "coalesced-past-end",
        "bounded-past-end",
    ],
)
def test_missed_slots_are_the_entrys_own_runs_inside_its_window(
    every, now, rules, expected, dropped
):
    from celery.schedules import schedule

    policy = EntryPolicy(**rules)
    slots, skipped = policy.missed(
        schedule(timedelta(seconds=every)), BASE, BASE + timedelta(seconds=now)
    )
    assert (slots, skipped) == (_seconds_after(BASE, *expected), dropped)


def test_the_default_grace_makes_one_policy_per_policy_and_grace():
    """A tick asks every due entry's policy for the app's default grace: the answer is
    the policy with that grace, one object per policy and grace, and a policy with its
    own grace keeps it."""
    start = datetime(2027, 1, 1, tzinfo=timezone.utc)
    stored = EntryPolicy(start_time=start, jitter=5.0)
    graced = stored.with_default_grace(30.0)
    assert graced == EntryPolicy(start_time=start, jitter=5.0, misfire_grace_time=30.0)
    assert EntryPolicy(start_time=start, jitter=5.0).with_default_grace(30.0) is graced
    assert stored.with_default_grace(None) is stored
    own = EntryPolicy(misfire_grace_time=10.0)
    assert own.with_default_grace(30.0) is own

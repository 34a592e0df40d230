"""The one rule for an entry's next send (redbeat.nextrun) and what the tick's planner
decides from it, as tables of inputs and expected decisions. No Redis: both are pure."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery
from celery.schedules import crontab, schedule

from redbeat import RedBeatSchedulerEntry
from redbeat.entry import meta_json
from redbeat.nextrun import NextRun, from_score, next_run, to_score
from redbeat.planning import TickSettings, plan_batch
from redbeat.policy import EntryPolicy
from redbeat.schedules import clocked, rrule
from redbeat.store import Row

T = datetime(2027, 5, 4, 12, 0, 0, tzinfo=timezone.utc)  # a fixed "now": never the clock


def t(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def app() -> Celery:
    application = Celery("nextrun-tests", set_as_current=False)
    application.conf.update(timezone="UTC", redbeat_redis_url="redis://unused:1/0")
    return application


APP = app()


def sched(value):
    value.app = APP
    return value


EVERY_10 = sched(schedule(timedelta(seconds=10)))
HOURLY_CRON = sched(crontab(minute=0))
JITTER = EntryPolicy(jitter=2.0)


def slot_and_delay(name: str, policy: EntryPolicy, due: datetime) -> NextRun:
    return NextRun(due, policy.send_time(name, due))


# (case, schedule, policy, last_run_at, stored score, expected (due, send) or None)
CASES = [
    ("interval after its last run", EVERY_10, EntryPolicy(), t(-3), None, (t(7), t(7))),
    ("overdue: the due time stays in the past", EVERY_10, EntryPolicy(), t(-60), None,
     (t(-50), t(-50))),
    ("hand-written, no score: an interval is due now", EVERY_10, EntryPolicy(), None, None,
     (t(0), t(0))),
    ("hand-written, no score: a crontab at its next match", HOURLY_CRON, EntryPolicy(), None,
     None, (t(0), t(0))),
    ("a crontab created exactly on a match waits for the next one", HOURLY_CRON,
     EntryPolicy(), t(0), None, (t(3600), t(3600))),
    ("a crontab created a millisecond after a match", HOURLY_CRON, EntryPolicy(),
     t(0.001), None, (t(3600), t(3600))),
    ("never ran, saved for a time by hand: that time", EVERY_10, EntryPolicy(), None,
     to_score(t(42)), (t(42), t(42))),
    ("a one-off: its time", sched(clocked(t(30))), EntryPolicy(), None, None, (t(30), t(30))),
    ("a one-off that ran: no more runs", sched(clocked(t(30))), EntryPolicy(), t(30), None,
     None),
    ("before start_time: the first run at or after it", EVERY_10,
     EntryPolicy(start_time=t(95)), t(0), None, (t(95), t(95))),
    ("a crontab before start_time: its first match at or after it", HOURLY_CRON,
     EntryPolicy(start_time=t(3600)), t(-1), None, (t(3600), t(3600))),
    ("after end_time: parked", EVERY_10, EntryPolicy(end_time=t(5)), t(0), None, None),
    ("on end_time: still runs", EVERY_10, EntryPolicy(end_time=t(10)), t(0), None,
     (t(10), t(10))),
    ("jitter: the slot keeps its due time", EVERY_10, JITTER, t(0), None,
     tuple(slot_and_delay("e", JITTER, t(10)))),
    ("jitter never sends after end_time", EVERY_10,
     EntryPolicy(jitter=3600, end_time=t(10)), t(0), None, (t(10), t(10))),
]


@pytest.mark.parametrize("case,schedule_,policy,last,score,expected", CASES,
                         ids=[case[0] for case in CASES])
def test_next_run(case, schedule_, policy, last, score, expected):
    run = next_run(schedule_, policy, "e", last, T, score)
    assert (None if run is None else tuple(run)) == expected


def test_jitter_is_a_fixed_fraction_per_entry_and_slot():
    delays = {JITTER.delay(name, t(s)) for name in ("a", "b") for s in (0, 10)}
    assert len(delays) == 4 and all(timedelta(0) <= d < timedelta(seconds=2) for d in delays)
    assert JITTER.delay("a", t(0)) == EntryPolicy(jitter=2.0).delay("a", t(0))


@pytest.mark.parametrize("schedule_,policy", [
    (sched(clocked(t(30))), EntryPolicy(jitter=2.0)),
    (sched(clocked(t(30))), EntryPolicy(jitter=2.0, end_time=t(31))),
    (HOURLY_CRON, EntryPolicy(jitter=600)),
    (HOURLY_CRON, EntryPolicy(jitter=7200)),  # more than the period: the right slot still
    (EVERY_10, EntryPolicy(jitter=2.0)),
])
def test_a_saved_first_score_is_read_back_as_the_same_slot(schedule_, policy):
    """Re-evaluating an entry that never ran, from the score it was saved with, gives
    the same slot and send time (it was pushed back by a jitter on every tick)."""
    saved = next_run(schedule_, policy, "e", None, T)
    assert saved is not None
    again = next_run(schedule_, policy, "e", None, T + timedelta(seconds=5), saved.score)
    assert again is not None
    assert again.score == saved.score
    if not isinstance(schedule_, schedule):  # an interval that never ran has no grid
        assert again.due == saved.due
    assert next_run(schedule_, policy, "e", None, from_score(again.score), again.score) \
        == again


def test_a_never_run_interval_keeps_its_windows_start_as_its_slot():
    """Its first slot is start_time, then the runs from start_time's whole second. Read
    back from its jittered score (a tick before start_time wrote it), the slot was the
    score itself: another task id, and the runs a second later when the jitter crossed
    into the next second."""
    policy = EntryPolicy(jitter=2.0, start_time=t(95.9))
    saved = next_run(EVERY_10, policy, "e", None, T)
    assert saved is not None and saved.due == t(95.9)
    assert saved.send_at.replace(microsecond=0) > t(95)  # the jitter crosses the second
    again = next_run(EVERY_10, policy, "e", None, from_score(saved.score), saved.score)
    assert again == (t(95.9), from_score(saved.score))
    from redbeat.nextrun import upcoming_runs

    assert [run.due for run in upcoming_runs(again, EVERY_10, policy, "e", 3)] == \
        [t(95.9), t(105), t(115)]


# -- the planner: what one tick decides for a due row ---------------------------------


def row(name: str, sched_, last: datetime | None, score: float, **policy) -> Row:
    entry = RedBeatSchedulerEntry(name, "tasks.x", sched_, app=APP, last_run_at=last,
                                  **policy)
    if last is None:
        entry.last_run_at = None
    return Row(entry.key, score, entry.definition_json(), meta_json(entry.last_run_at),
               entry.policy.to_json())


def plan(rows: list[Row], now: datetime, grace: float | None = None):
    result = plan_batch(APP, rows, now, TickSettings("node", misfire_grace_time=grace),
                        RedBeatSchedulerEntry)
    (op,) = result.ops
    return ([int((claim.due - T).total_seconds()) for claim in result.claims],
            op.score if op.score <= 0 else round(op.score - T.timestamp(), 3), op.expire)


# (case, row, now, global grace, expected (claimed slots, new score, expire))
PLANS = [
    ("due on time: claimed, next slot scored", row("a", 10.0, t(-10), T.timestamp()), t(0),
     None, ([0], 10, 0)),
    ("missed slots coalesced into the latest", row("a", 10.0, t(-100), 0), t(5), None,
     ([0], 10, 0)),
    ("catch-up bounded to max_catch_up", row("a", 10.0, t(-100), 0, coalesce=False,
                                            max_catch_up=3), t(5), None, ([-20, -10, 0], 10, 0)),
    ("bounded catch-up stays on the interval's grid",
     row("a", 11.0, t(-1000), 0, coalesce=False, max_catch_up=3), t(0), None,
     ([-32, -21, -10], 1, 0)),
    ("catch-up runs no slot past end_time, then parks",
     row("a", 10.0, t(-100), 0, end_time=t(-45)), t(0), None, ([-50], -1, 0)),
    ("bounded catch-up runs no slot past end_time",
     row("a", 10.0, t(-100), 0, end_time=t(-45), coalesce=False, max_catch_up=2), t(0),
     None, ([-60, -50], -1, 0)),
    ("past the entry's grace: skipped, not sent", row("a", 60.0, t(-100), 0,
                                                      misfire_grace_time=30), t(0), None,
     ([], 20, 0)),
    ("within the grace: sent", row("a", 60.0, t(-80), 0, misfire_grace_time=30), t(0),
     None, ([-20], 40, 0)),
    ("the global grace applies", row("a", 60.0, t(-100), 0), t(0), 30, ([], 20, 0)),
    ("early score corrected, nothing sent", row("a", 3600.0, t(-60), t(-100).timestamp()),
     t(0), None, ([], 3540, 0)),
    ("the last run of a window: parked with its ttl",
     row("a", 10.0, t(-10), 0, end_time=t(5), ttl=60), t(0), None, ([0], -1, 60)),
    ("a one-off runs, then is parked with its ttl",
     row("a", clocked(t(0)), None, T.timestamp(), ttl=30), t(1), None, ([0], -1, 30)),
    ("finished before running: parked with its ttl",
     row("a", 10.0, t(-10), 0, end_time=t(-5), ttl=30), t(0), None, ([], -1, 30)),
    ("disabled: nothing sent, scored at its next time after now (read once per slot)",
     row("a", 10.0, t(-10), 0, enabled=False), t(0), None, ([], 10, 0)),
]


@pytest.mark.parametrize("case,row_,now,grace,expected", PLANS,
                         ids=[case[0] for case in PLANS])
def test_plan(case, row_, now, grace, expected):
    assert plan([row_], now, grace) == expected


def test_a_catch_up_exactly_on_a_run_of_a_fractional_interval_is_one_send():
    """Missed runs of a 0.1 s interval, the tick's now exactly on one: that run is
    claimed, and the next is after now. Counted in float seconds, the tick claimed the
    run before it and scored the one at now, which the next tick sent as well."""
    result = plan_batch(APP, [row("a", 0.1, t(-1), 0)], T, TickSettings("node"),
                        RedBeatSchedulerEntry)
    assert [claim.due for claim in result.claims] == [T]
    assert result.ops[0].score == to_score(t(0.1))


def test_the_first_runs_of_a_1s_interval_have_their_own_task_ids():
    """An interval that never ran is first due at the tick's now, and a slot is named by
    its millisecond: at 12:00:00.9996 that named 12:00:01.000, the next run's too (two
    sends under one id, which a consumer deduplicating by id drops). Cut to the
    millisecond, the first slot is 12:00:00.999 (due at once), then 12:00:01 and
    12:00:02; a window opening at such a moment starts at 12:00:01 (never before it)."""
    current = row("a", 1.0, None, 0)
    task_ids = []
    for now in (t(0.9996), t(1), t(2)):
        result = plan_batch(APP, [current], now, TickSettings("node"), RedBeatSchedulerEntry)
        (op,) = result.ops
        task_ids += [claim.task_id for claim in result.claims]
        meta = dict(op.fields).get("meta", current.meta)
        current = current._replace(score=op.score, meta=meta)
    assert task_ids == [f"a:{round(t(slot).timestamp() * 1000)}" for slot in (0.999, 1, 2)]
    from redbeat.nextrun import upcoming_runs

    every_second, policy = sched(schedule(timedelta(seconds=1))), EntryPolicy(start_time=t(0.9996))
    first = next_run(every_second, policy, "w", t(-5), T)
    assert [run.due for run in upcoming_runs(first, every_second, policy, "w", 2)] == \
        [t(1), t(2)]


def test_a_quarantined_row_is_parked_with_its_reason():
    bad = Row("redbeat:bad", 0.0, '{"name": "bad"}', None, None)
    result = plan_batch(APP, [bad], T, TickSettings("node"), RedBeatSchedulerEntry)
    (op,) = result.ops
    assert (op.kind, op.score) == ("quarantine", -1) and "missing 'task'" in op.fields[0][1]


def test_jitter_does_not_push_a_never_run_entry_back_tick_after_tick():
    """A one-off with jitter, read by tick after tick before its send time: the score
    stays; it is sent once, under its slot's id (issue 12, item 4)."""
    policy = EntryPolicy(jitter=2.0)
    saved = next_run(sched(clocked(t(30))), policy, "once", None, T)
    assert saved is not None
    current = row("once", clocked(t(30)), None, saved.score, jitter=2.0)
    for now in (t(30), t(30.5), saved.send_at - timedelta(milliseconds=1)):
        claims, score, _ = plan([current], now)
        assert (claims, score) == ([], round(saved.score - T.timestamp(), 3))
    assert plan([current], from_score(saved.score)) == ([30], -1, 0)


def test_a_windowed_entry_with_jitter_runs_inside_its_window():
    """Its last slot before end_time is sent (at the latest at end_time), then it is
    parked: never parked as finished without running (issue 12, item 4)."""
    policy = EntryPolicy(jitter=5.0, end_time=t(21))
    sends = []
    last, score = t(0), None
    for _ in range(5):
        run = next_run(EVERY_10, policy, "w", last, T, score)
        if run is None:
            break
        assert run.due <= t(21) and run.send_at <= t(21)
        sends.append(run.due)
        last = run.due
    assert sends == [t(10), t(20)]


def relative(zone: str, seconds: float) -> schedule:
    application = Celery("relative", set_as_current=False)
    application.conf.timezone = zone
    return schedule(timedelta(seconds=seconds), relative=True, app=application)


# relative=True: rounded down to the interval's resolution on the app zone's clock
RELATIVE = [
    ("UTC", 7, "10:00:00", "10:00:07"),
    ("UTC", 7.5, "10:00:07", "10:00:14"),  # cut to whole seconds: every 7 s
    ("UTC", 90, "10:00:00", "10:01:00"),
    ("UTC", 3600, "10:20:00", "11:00:00"),
    ("Asia/Kolkata", 3600, "10:20:00", "10:30:00"),  # Kolkata's hour: :30 UTC
    ("Asia/Kolkata", 3600, "10:30:00", "11:30:00"),
    ("Asia/Kolkata", 86400, "10:20:00", "18:30:00"),  # its midnight
    ("UTC", 0.5, "10:00:00", "10:00:00.500000"),  # rounding would not move: unrounded
]


@pytest.mark.parametrize("zone,every,after,expected", RELATIVE)
def test_relative_interval_next(zone, every, after, expected):
    day = "2027-05-04T"
    run = next_run(relative(zone, every), EntryPolicy(), "r",
                   datetime.fromisoformat(day + after + "+00:00"), T)
    assert run is not None and run.due == datetime.fromisoformat(day + expected + "+00:00")


@pytest.mark.parametrize("every,now,expected", [
    (7, "10:01:05.300000", "10:01:03"),  # the chain from 10:00:00, not now - 60 s
    (7.5, "10:01:05.300000", "10:01:03"),
    (90, "10:17:30", "10:17:00"),
])
def test_relative_catch_up_stays_on_the_chain(every, now, expected):
    from redbeat.nexttime import latest_slot

    day = "2027-05-04T"
    assert latest_slot(relative("UTC", every), datetime.fromisoformat(day + "10:00:00+00:00"),
                       datetime.fromisoformat(day + now + "+00:00")) \
        == datetime.fromisoformat(day + expected + "+00:00")


def test_upcoming_runs_stop_at_the_window_and_carry_their_jitter():
    """What the CLI's show and the web view list: the slots the tick will send."""
    from redbeat.nextrun import upcoming_runs

    policy = EntryPolicy(jitter=2.0, end_time=t(35))
    first = next_run(EVERY_10, policy, "u", t(0), T)
    runs = upcoming_runs(first, EVERY_10, policy, "u", 10)
    assert [run.due for run in runs] == [t(10), t(20), t(30)]
    assert [run.send_at for run in runs] == [policy.send_time("u", run.due) for run in runs]


@pytest.mark.parametrize(("every", "last_run", "expected"), [
    (EVERY_10, -3600, [-3590, 10, 20]),  # an hour down: the overdue slot, then after now
    (EVERY_10, -10, [0, 10, 20]),  # due now: nothing skipped
    (crontab(minute="*/15"), -86400, [-86400 + 900, 900, 1800]),
])
def test_the_runs_listed_after_an_overdue_one_are_after_now(every, last_run, expected):
    """The tick sends an overdue slot with the ones missed since; the next runs follow
    the latest of them. show listed the missed slots after it: times already past."""
    from redbeat.nextrun import upcoming_runs

    first = next_run(every, EntryPolicy(), "o", t(last_run), T)
    runs = upcoming_runs(first, every, EntryPolicy(), "o", 3, T)
    assert [run.due for run in runs] == [t(seconds) for seconds in expected]


@pytest.mark.parametrize("schedule_", [
    crontab(minute="*/7"),
    rrule("MINUTELY", interval=45, dtstart=datetime(2027, 1, 1), timezone="Europe/London"),
], ids=["crontab", "rrule"])
def test_a_burst_on_one_schedule_is_planned_as_each_entry_alone(schedule_):
    """Issue 29: the tick works out a schedule's answers once for every entry on it
    (they share one schedule object); each entry's plan is the one it gets alone, its
    jitter (a hash of its name) and catch-up included."""
    rows = [row(f"e{i}", sched(schedule_), t(-4000 - 600 * (i % 3)), 0,
                jitter=30.0 * (i % 2), coalesce=i % 4 != 0) for i in range(12)]
    together = plan_batch(APP, rows, T, TickSettings("node"), RedBeatSchedulerEntry)
    alone = [plan_batch(app(), [r], T, TickSettings("node"), RedBeatSchedulerEntry)
             for r in rows]
    assert len(together.claims) >= 12 and together.ops == [op for each in alone
                                                           for op in each.ops]
    assert [(c.task_id, c.due) for c in together.claims] == [
        (c.task_id, c.due) for each in alone for c in each.claims]

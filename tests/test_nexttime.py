"""Next-run arithmetic in tables (DST cases are in test_dst.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar

from redbeat import planning
from redbeat.nextrun import next_run
from redbeat.nexttime import (
    ScheduleBoundError,
    clock_now,
    count_slots,
    first_due,
    latest_slot,
    next_after,
    remembering,
    slots_between,
)
from redbeat.policy import EntryPolicy
from redbeat.schedules import clocked, rrule
from redbeat.schedules import crontab as zoned_crontab

UTC = timezone.utc
APP = Celery("nexttime", set_as_current=False)
APP.conf.timezone = "UTC"


def utc(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)


def cron(**fields: object) -> crontab:
    return crontab(app=APP, **fields)


@pytest.mark.parametrize(
    ("schedule_", "after", "expected"),
    [
        (cron(minute="*/15"), utc(2026, 1, 1, 10, 7), utc(2026, 1, 1, 10, 15)),
        (cron(minute="*/15"), utc(2026, 1, 1, 10, 15), utc(2026, 1, 1, 10, 30)),
        (cron(minute=0, hour=0), utc(2026, 1, 31, 23, 59, 59), utc(2026, 2, 1)),
        (cron(minute=0, hour=0, day_of_month=31), utc(2026, 2, 1), utc(2026, 3, 31)),
        (cron(minute=0, hour=12, day_of_month=29, month_of_year=2), utc(2026, 1, 1),
         utc(2028, 2, 29, 12)),
        # Celery's rule: day of month AND weekday (Friday the 13th)
        (cron(minute=0, hour=0, day_of_month=13, day_of_week="fri"), utc(2026, 1, 1),
         utc(2026, 2, 13)),
        (cron(minute=30, hour=4, day_of_month=1, month_of_year="*/3"), utc(2026, 11, 22),
         utc(2027, 1, 1, 4, 30)),
        (cron(minute=5, hour="*/2", day_of_week="mon-fri"), utc(2026, 11, 21, 12),  # Saturday
         utc(2026, 11, 23, 0, 5)),
        (schedule(timedelta(seconds=90)), utc(2026, 1, 1, 0, 0, 10), utc(2026, 1, 1, 0, 1, 40)),
        (schedule(timedelta(hours=1), relative=True), utc(2026, 1, 1, 10, 17, 3),
         utc(2026, 1, 1, 11)),
        (rrule("DAILY", dtstart=utc(2026, 1, 1, 9), count=3), utc(2026, 1, 2, 9),
         utc(2026, 1, 3, 9)),
        (rrule("DAILY", dtstart=utc(2026, 1, 1, 9), count=3), utc(2026, 1, 3, 9), None),
        (rrule("HOURLY", dtstart=utc(2026, 1, 1), until=utc(2026, 1, 1, 5)),
         utc(2026, 1, 1, 4, 30), utc(2026, 1, 1, 5)),
        (rrule("MONTHLY", dtstart=utc(2026, 1, 31, 8), bymonthday=-1), utc(2026, 2, 1),
         utc(2026, 2, 28, 8)),
    ],
)
def test_next_after(schedule_, after, expected):
    assert next_after(schedule_, after) == expected


@pytest.mark.parametrize(
    ("schedule_", "now", "expected"),
    [
        (schedule(timedelta(seconds=30)), utc(2026, 1, 1, 10, 7), utc(2026, 1, 1, 10, 7)),
        (cron(minute=0, hour=3), utc(2026, 1, 1, 10, 7), utc(2026, 1, 2, 3)),
        (cron(minute=7, hour=10), utc(2026, 1, 1, 10, 7), utc(2026, 1, 1, 10, 7)),  # inclusive
        (rrule("DAILY", dtstart=utc(2026, 1, 1, 9)), utc(2026, 1, 5, 9), utc(2026, 1, 5, 9)),
    ],
)
def test_first_due(schedule_, now, expected):
    assert first_due(schedule_, now) == expected


@pytest.mark.parametrize(
    ("schedule_", "due", "now", "expected"),
    [
        (schedule(timedelta(minutes=1)), utc(2026, 1, 1), utc(2026, 1, 1, 5, 0, 30),
         utc(2026, 1, 1, 5)),
        (cron(), utc(2026, 1, 1), utc(2026, 1, 8, 5, 3, 30), utc(2026, 1, 8, 5, 3)),
        (cron(minute=0, hour=3), utc(2026, 1, 1, 3), utc(2026, 3, 1, 2), utc(2026, 2, 28, 3)),
        (rrule("DAILY", dtstart=utc(2025, 1, 1, 9)), utc(2025, 1, 1, 9), utc(2026, 6, 1, 12),
         utc(2026, 6, 1, 9)),
        (cron(minute=0, hour=3), utc(2026, 1, 1, 3), utc(2026, 1, 1, 3, 0, 5), utc(2026, 1, 1, 3)),
        # nothing ran since ``due``: hours later, to the microsecond before the next run,
        # and after a rule's last run
        (cron(minute=0, hour=3), utc(2026, 1, 1, 3), utc(2026, 1, 1, 23), utc(2026, 1, 1, 3)),
        (cron(minute=0, hour=3), utc(2026, 1, 1, 3), utc(2026, 1, 2, 2, 59, 59, 999999),
         utc(2026, 1, 1, 3)),
        (cron(minute=0, hour=3), utc(2026, 1, 1, 3), utc(2026, 1, 2, 3), utc(2026, 1, 2, 3)),
        (rrule("DAILY", dtstart=utc(2026, 1, 1, 9), count=3), utc(2026, 1, 3, 9),
         utc(2027, 1, 1), utc(2026, 1, 3, 9)),
    ],
)
def test_latest_slot_coalesces_to_the_last_missed_run(schedule_, due, now, expected):
    assert latest_slot(schedule_, due, now) == expected


def later(moment: datetime, seconds: float) -> datetime:
    return moment + timedelta(seconds=seconds)


FRACTION = utc(2026, 1, 1, 10).replace(microsecond=700_000)  # 10:00:00.7


# An interval's runs from a slot ``due``: ``due`` itself, then ``due`` cut to the whole
# second (an interval of whole seconds; else ``due`` itself) plus k intervals. Catch-up
# counts and coalesces them by arithmetic; it must find the runs walking them finds.
@pytest.mark.parametrize(("every", "due", "now", "latest", "count"), [
    # ``now`` exactly on a run of a fractional interval: 0.3 // 0.1 is 2.0 in floats
    (0.1, utc(2026, 1, 1), later(utc(2026, 1, 1), 0.3), later(utc(2026, 1, 1), 0.3), 4),
    (0.2, utc(2026, 1, 1), later(utc(2026, 1, 1), 5.6), later(utc(2026, 1, 1), 5.6), 29),
    (0.7, FRACTION, later(FRACTION, 18.9), later(FRACTION, 18.9), 28),
    (59.999, utc(2026, 1, 1), later(utc(2026, 1, 1), 29 * 59.999),
     later(utc(2026, 1, 1), 29 * 59.999), 30),
    # whole seconds from a fractional slot: 10:00:00.7, 10:01, 10:02, 10:03
    (60, FRACTION, utc(2026, 1, 1, 10, 3), utc(2026, 1, 1, 10, 3), 4),
    (60, FRACTION, utc(2026, 1, 1, 10, 0, 59, 999_999), FRACTION, 1),
    (1, utc(2026, 1, 1, 10).replace(microsecond=999_000), utc(2026, 1, 1, 10, 0, 1),
     utc(2026, 1, 1, 10, 0, 1), 2),
])
def test_interval_catch_up_arithmetic_finds_the_runs_walked(every, due, now, latest, count):
    every_ = schedule(timedelta(seconds=every))
    walked = list(slots_between(every_, due, now))
    assert (walked[-1], len(walked)) == (latest, count)
    assert (latest_slot(every_, due, now), count_slots(every_, due, now)) == (latest, count)


def test_no_interval_runs_are_counted_before_the_first():
    """Between the whole second and a fractional first run: none (the cut chain
    would count one)."""
    every_ = schedule(timedelta(minutes=1))
    assert count_slots(every_, FRACTION, FRACTION.replace(microsecond=200_000)) == 0


class EveryNinety(schedule):
    """A schedule written for Celery's beat: every 90 s from its last run, whatever its
    ``run_every`` says."""

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        return last_run_at + timedelta(seconds=90) - self.now()


def test_a_schedule_with_its_own_estimate_is_caught_up_on_its_own_runs():
    """Its runs come from its ``remaining_estimate``: 10:00, 10:01:30, ... 10:09. The
    interval arithmetic put the catch-up run at 10:10, a time it never runs at."""
    now = utc(2026, 1, 1, 10, 10)
    every_ = EveryNinety(timedelta(minutes=1), nowfun=lambda: now, app=APP)
    due = utc(2026, 1, 1, 10)
    assert latest_slot(every_, due, now) == utc(2026, 1, 1, 10, 9)
    assert count_slots(every_, due, now) == 7


@pytest.mark.parametrize("just_after_sunrise", [
    # a London sunrise the simulator saw sent twice: from this moment (the run recorded),
    # ephem's search found the same sunrise again, a tenth of a second later
    datetime(2028, 2, 2, 7, 38, 0, 384646, tzinfo=UTC),
    datetime(2027, 8, 7, 4, 33, 2, tzinfo=UTC),
])
def test_solar_next_run_is_the_next_event_not_the_one_just_run(just_after_sunrise):
    sunrise = solar("sunrise", 51.5, -0.13, app=APP, nowfun=lambda: utc(2027, 1, 1))
    following = next_after(sunrise, just_after_sunrise)
    assert following is not None
    assert timedelta(hours=23) < following - just_after_sunrise < timedelta(hours=25)



# -- issue 24: which wall times run across a transition (docs/semantics.md) ------------


def local(zone: str, *fields: int, fold: int = 0) -> datetime:
    return datetime(*fields, tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)


def runs_from(schedule_, first: datetime, last: datetime) -> list[datetime]:
    """Every run after ``first`` up to ``last``, one next_after at a time (as ticks ask)."""
    found, moment = [], first
    while (moment := next_after(schedule_, moment)) is not None and moment <= last:
        found.append(moment)
    return found


LONDON, NEW_YORK = "Europe/London", "America/New_York"
LORD_HOWE, TROLL = "Australia/Lord_Howe", "Antarctica/Troll"


@pytest.mark.parametrize(("schedule_", "zone", "day", "walls"), [
    # every 45 minutes from Jan 1: 01:30 is in the gap and runs at 02:30 BST, after the
    # real 02:15 BST, which was lost
    (rrule("MINUTELY", interval=45, dtstart=datetime(2027, 1, 1), timezone=LONDON), LONDON,
     (2027, 3, 28), [(0, 0), (0, 45), (2, 15), (2, 30), (3, 0), (3, 45), (4, 30)]),
    # 02:15 in New York's gap runs at 03:15 EDT, after the real 03:00 EDT (lost)
    (rrule("MINUTELY", interval=45, dtstart=datetime(2027, 1, 1), timezone=NEW_YORK),
     NEW_YORK, (2027, 3, 14), [(0, 0), (0, 45), (1, 30), (3, 0), (3, 15), (3, 45), (4, 30)]),
    # Lord Howe skips 02:00-02:30: 02:10 and 02:20 run at 02:40 and 02:50, after the
    # real 02:30 (lost)
    (zoned_crontab(minute="10,20,30", hour=2, timezone=LORD_HOWE), LORD_HOWE, (2027, 10, 3),
     [(2, 30), (2, 40), (2, 50)]),
    # Troll jumps two hours, 01:00 -> 03:00: 02:00, 02:25, 02:50 run at 04:00, 04:25,
    # 04:50, after the real 03:00, 03:25, 03:50 (lost)
    (zoned_crontab(minute="*/25", hour="2-4", timezone=TROLL), TROLL, (2027, 3, 28),
     [(3, 0), (3, 25), (3, 50), (4, 0), (4, 25), (4, 50)]),
], ids=["london-rrule-45", "new-york-rrule-45", "lord-howe-crontab", "troll-crontab"])
def test_real_wall_times_after_a_gap_run_before_the_shifted_ones(schedule_, zone, day, walls):
    """Issue 24, item 1: a real wall time just after a spring-forward gap ran never
    when a wall of the gap, shifted forward, came after it."""
    first = local(zone, *day, 0, 0) - timedelta(seconds=1)
    assert runs_from(schedule_, first, local(zone, *day, 4, 59)) == [
        local(zone, *day, *wall) for wall in walls]
    assert list(slots_between(schedule_, next_after(schedule_, first),
                              local(zone, *day, 4, 59))) == runs_from(
        schedule_, first, local(zone, *day, 4, 59))


def test_a_coalesced_catch_up_across_fall_back_runs_the_latest_slot_once():
    """Issue 24, item 2: every 25 minutes in London, beat down 00:10Z-01:40Z on the
    fall-back night: the latest run is 01:59 BST (00:59Z); 01:34 BST was chosen, and
    01:59 BST sent at the next tick as a second run."""
    every_25 = rrule("MINUTELY", interval=25, dtstart=datetime(2027, 10, 31, 0, 19),
                     timezone=LONDON)  # 01:09 BST, 01:34 BST, 01:59 BST, 02:24 GMT
    due = next_after(every_25, utc(2027, 10, 31, 0, 10))
    assert due == local(LONDON, 2027, 10, 31, 1, 34)
    assert EntryPolicy().missed(every_25, due, utc(2027, 10, 31, 1, 40)) == (
        [local(LONDON, 2027, 10, 31, 1, 59)], 0)


def test_a_catch_up_of_each_slot_across_spring_forward_sends_the_shifted_runs():
    """Issue 24, item 2: every 7 minutes in New York, beat down 06:35Z-07:35Z on the
    spring-forward night, ``coalesce: false``: the walls of the gap (02:06, 02:13, 02:20
    and 02:27, run at 03:06, 03:13, 03:20 and 03:27 EDT) were neither sent nor counted."""
    every_7 = rrule("MINUTELY", interval=7, dtstart=datetime(2027, 1, 1), timezone=NEW_YORK)
    due = next_after(every_7, utc(2027, 3, 14, 6, 35))
    policy = EntryPolicy(coalesce=False, max_catch_up=100)
    sent, skipped = policy.missed(every_7, due, utc(2027, 3, 14, 7, 35))
    walls = [(1, 42), (1, 49), (1, 56), (3, 3), (3, 6), (3, 10), (3, 13), (3, 17), (3, 20),
             (3, 24), (3, 27), (3, 31), (3, 34)]
    assert (sent, skipped) == ([local(NEW_YORK, 2027, 3, 14, *wall) for wall in walls], 0)
    assert count_slots(every_7, due, utc(2027, 3, 14, 7, 35)) == len(walls)
    assert latest_slot(every_7, due, utc(2027, 3, 14, 7, 35)) == local(NEW_YORK, 2027, 3, 14,
                                                                        3, 34)


@pytest.mark.parametrize(("run_at", "policy", "due"), [
    # issue 24, item 3: a one-off before its window runs when the window opens
    (utc(2027, 1, 1, 17), EntryPolicy(start_time=utc(2027, 1, 1, 18)), utc(2027, 1, 1, 18)),
    (utc(2027, 1, 1, 17), EntryPolicy(start_time=utc(2027, 1, 1, 18, 0, 0, 400)),
     utc(2027, 1, 1, 18, 0, 0, 1000)),  # never before the start: up to its millisecond
    (utc(2027, 1, 1, 19), EntryPolicy(start_time=utc(2027, 1, 1, 18)), utc(2027, 1, 1, 19)),
    (utc(2027, 1, 1, 19), EntryPolicy(end_time=utc(2027, 1, 1, 18)), None),
    # a run_at with a sub-millisecond part: named (and sent) by its own millisecond
    (utc(2027, 1, 1, 17, 0, 0, 600), EntryPolicy(), utc(2027, 1, 1, 17)),
    (utc(2027, 1, 1, 17, 0, 0, 1999), EntryPolicy(), utc(2027, 1, 1, 17, 0, 0, 1000)),
])
def test_a_one_off_runs_inside_its_window_at_its_own_millisecond(run_at, policy, due):
    run = next_run(clocked(run_at), policy, "once", None, utc(2027, 1, 1, 12))
    assert (run and run.due) == due
    if run is not None:
        assert (run.send_at, planning.due_ms(run.due)) == (due, str(round(due.timestamp()
                                                                          * 1000)))
        assert run.send_at >= (policy.start_time or run.send_at)


@pytest.mark.parametrize(("schedule_", "after", "expected"), [
    # issue 24, item 4: Feb 29 on a Friday, nine years on (Celery finds 2036-02-29 too)
    (cron(minute=0, hour=0, day_of_month=29, month_of_year=2, day_of_week="fri"),
     utc(2027, 6, 1), utc(2036, 2, 29)),
    # across 2100, which is no leap year: 40 years apart
    (cron(minute=0, hour=0, day_of_month=29, month_of_year=2, day_of_week="mon"),
     utc(2072, 3, 1), utc(2112, 2, 29)),
    (cron(minute=0, hour=0, day_of_month=29, month_of_year=2, day_of_week="fri"),
     utc(9992, 3, 1), None),  # none left before the year 9999 ends
])
def test_a_crontab_whose_next_match_is_years_away_runs_then(schedule_, after, expected):
    assert next_after(schedule_, after) == expected
    assert first_due(schedule_, after) == expected


def test_celery_finds_the_same_far_away_match():
    """The table's Feb 29 on a Friday, asked of Celery's own arithmetic."""
    friday = cron(minute=0, hour=0, day_of_month=29, month_of_year=2, day_of_week="fri")
    now = utc(2027, 6, 1)
    friday.nowfun = lambda: now
    assert now + friday.remaining_estimate(now) == utc(2036, 2, 29)


@pytest.mark.parametrize(("days", "months"), [({30}, {2}), ({30, 31}, {2}), ({31}, {4, 6, 9, 11})])
def test_a_crontab_on_no_date_says_so(days, months):
    """Celery 5.7 refuses such a crontab when it is built; one that reaches the
    arithmetic all the same (a Celery that does not, fields set afterwards) is refused
    there, with the reason, instead of being parked as finished."""
    never = cron(minute=0, hour=0)
    never.day_of_month, never.month_of_year = days, months
    for compute in (next_after, first_due):
        with pytest.raises(ScheduleBoundError, match="no month of month_of_year .* has a "
                                                     "day of day_of_month .*: it never runs"):
            compute(never, utc(2027, 1, 1))


# -- issue 29: a tick's answers, worked out once per schedule ----------------------------


@pytest.mark.parametrize("schedule_", [
    cron(minute="*/5"), zoned_crontab(minute="10,20,30", hour=2, timezone=LORD_HOWE),
    rrule("MINUTELY", interval=45, dtstart=datetime(2027, 1, 1), timezone=LONDON),
], ids=["crontab", "zoned-crontab", "rrule"])
def test_remembered_answers_are_the_answers(schedule_):
    """Inside ``remembering`` (a tick's planning), a question asked again of the same
    schedule object gets the answer it got the first time, which is the answer."""
    moments = [utc(2027, 3, 28, 0, 59), utc(2027, 10, 2, 15, 41), utc(2027, 3, 28, 1, 2)]
    plain = [(next_after(schedule_, m), first_due(schedule_, m),
              latest_slot(schedule_, first_due(schedule_, m), m + timedelta(hours=3)))
             for m in moments]
    with remembering():
        for _ in range(2):
            assert [(next_after(schedule_, m), first_due(schedule_, m),
                     latest_slot(schedule_, first_due(schedule_, m), m + timedelta(hours=3)))
                    for m in moments] == plain


def test_remembered_answers_belong_to_their_schedule_object():
    """Two schedules are two sets of answers, even equal ones at one freed id; and a
    crontab whose field is replaced is read again."""
    moment = utc(2027, 1, 1, 10, 7)
    with remembering():
        assert next_after(cron(minute="*/15"), moment) == utc(2027, 1, 1, 10, 15)
        assert next_after(cron(minute="*/20"), moment) == utc(2027, 1, 1, 10, 20)
    changed = cron(minute="*/15")
    assert next_after(changed, moment) == utc(2027, 1, 1, 10, 15)
    changed.minute = {0, 40}
    assert next_after(changed, moment) == utc(2027, 1, 1, 10, 40)


def test_the_clock_is_the_apps_time_in_its_zone():
    """Read directly (not through Celery's ``app.now``): the same zone, and an instant
    between two readings of Celery's."""
    app = Celery("clock", set_as_current=False)
    app.conf.timezone = "Europe/Paris"
    before = app.now()
    read = clock_now(crontab(app=app), app)
    after = app.now()
    assert read.tzinfo is app.timezone is before.tzinfo
    assert before <= read <= after


class FrozenApp(Celery):
    def now(self) -> datetime:
        return utc(2030, 1, 1)


@pytest.mark.parametrize(("schedule_", "app", "expected"), [
    # the schedule's own clock
    (schedule(timedelta(minutes=1), nowfun=lambda: utc(2031, 1, 1), app=APP), APP,
     utc(2031, 1, 1)),
    # an app that replaces ``now``: a subclass's, or an instance's own
    (crontab(app=FrozenApp("frozen", set_as_current=False)), APP, utc(2030, 1, 1)),
    (None, FrozenApp("frozen", set_as_current=False), utc(2030, 1, 1)),
])
def test_a_replaced_clock_is_asked(schedule_, app, expected):
    assert clock_now(schedule_, app) == expected


def test_an_apps_own_now_is_asked():
    app = Celery("patched", set_as_current=False)
    app.now = lambda: utc(2032, 1, 1)  # type: ignore[method-assign]
    assert clock_now(crontab(app=app), APP) == utc(2032, 1, 1)


def test_a_crontabs_kept_next_run_answers_only_up_to_itself():
    """One crontab object asked again and again (entries saved one after another on it)
    answers each moment as a crontab asked once does: from the moment first asked up
    to the run found, and nowhere else (at the run itself, the run after it)."""
    kept = cron(minute="*/5")
    for moment in [utc(2027, 1, 1, 10, 0, 0, 500), utc(2027, 1, 1, 10, 3),
                   utc(2027, 1, 1, 10, 4, 59, 999999), utc(2027, 1, 1, 10, 5),
                   utc(2027, 1, 1, 10, 1), utc(2027, 1, 1, 10, 9, 59), utc(2027, 1, 2)]:
        assert next_after(kept, moment) == next_after(cron(minute="*/5"), moment)
    assert next_after(kept, utc(2027, 1, 1, 10, 5)) == utc(2027, 1, 1, 10, 10)
    kept.minute = {7}  # a field replaced: the run kept (10:10) is not its
    assert next_after(kept, utc(2027, 1, 1, 10, 5)) == utc(2027, 1, 1, 10, 7)

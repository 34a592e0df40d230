"""Next-run arithmetic in tables (DST cases are in test_dst.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar

from redbeat.nexttime import count_slots, first_due, latest_slot, next_after, slots_between
from redbeat.schedules import rrule

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

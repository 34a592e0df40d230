"""Property tests: every schedule type survives encode -> decode with the same next run
times over a year, including the shapes redbeat adds (zoned crontab, zoned rrule,
weekday n, clocked)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from celery import Celery
from celery.schedules import crontab as celery_crontab
from celery.schedules import schedule
from dateutil.rrule import weekday
from hypothesis import given, settings
from hypothesis import strategies as st

from redbeat.decoder import dumps, loads
from redbeat.nexttime import next_after
from redbeat.schedules import clocked, crontab, rrule

APP = Celery("properties", set_as_current=False)
APP.conf.timezone = "UTC"
ZONES = st.sampled_from(["UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe",
                         "Asia/Kolkata"])
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def runs(value, count=12, after=START):
    found, moment = [], after
    for _ in range(count):
        moment = next_after(value, moment)
        if moment is None:
            break
        found.append(moment)
    return found


def same_year(original, decoded):
    """Equal next runs from a dozen starting points spread over a year."""
    for day in range(0, 365, 30):
        origin = START + timedelta(days=day, hours=day % 24)
        assert runs(decoded, 3, origin) == runs(original, 3, origin)


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=1, max_value=10**6), st.booleans())
def test_interval(every, relative):
    value = schedule(every, relative=relative)
    same_year(value, loads(dumps(value)))


cron_field = st.one_of(st.just("*"), st.integers(0, 23).map(str),
                       st.integers(1, 12).map(lambda n: f"*/{n}"))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 59), cron_field, st.sampled_from(["*", "mon-fri", "sun", "1,3,5"]),
       st.sampled_from(["*", "1", "15", "28"]), st.one_of(st.none(), ZONES))
def test_crontab(minute, hour, day_of_week, day_of_month, zone):
    if zone is None:
        value = celery_crontab(minute=minute, hour=hour, day_of_week=day_of_week,
                               day_of_month=day_of_month, app=APP)
    else:
        value = crontab(minute=minute, hour=hour, day_of_week=day_of_week,
                        day_of_month=day_of_month, timezone=zone)
    decoded = loads(dumps(value))
    decoded.app = APP
    same_year(value, decoded)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY"]),
       st.integers(1, 4), st.one_of(st.none(), ZONES), st.one_of(st.none(), st.integers(1, 30)),
       st.lists(st.integers(0, 6), max_size=3, unique=True),
       st.one_of(st.none(), st.integers(-3, 3).filter(bool)),
       st.lists(st.integers(0, 23), max_size=2, unique=True))
def test_rrule(freq, interval, zone, count, weekdays, n, hours):
    byweekday = [weekday(day, n if freq in ("MONTHLY", "YEARLY") else None)
                 for day in weekdays] or None
    byhour = (hours or None) if freq != "HOURLY" else None  # dateutil refuses most combos
    value = rrule(freq, dtstart=datetime(2025, 12, 30, 9, 15), interval=interval,
                  timezone=zone, count=count, byweekday=byweekday, byhour=byhour)
    decoded = loads(dumps(value))
    assert decoded == value
    same_year(value, decoded)
    if zone not in (None, "UTC"):
        assert decoded.zone == ZoneInfo(zone)


@settings(max_examples=40, deadline=None)
@given(st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1),
                    timezones=ZONES.map(ZoneInfo)))
def test_clocked(run_at):
    value = clocked(run_at)
    decoded = loads(dumps(value))
    assert decoded == value
    assert runs(decoded) == runs(value)

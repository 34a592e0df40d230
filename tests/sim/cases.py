"""The entries the simulator saves, each with the oracle's account of its runs.

Each case pairs a schedule built through the public API (what a user would save) with
the independent computation of its runs (tests/sim/oracle.py). Names are stable: the
fast profile marks known mismatches by them.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from celery import schedules as celery_schedules
from dateutil.rrule import FR, MO, TU, WE

from redbeat.schedules import clocked, crontab, rrule

from .driver import Case
from .oracle import (
    Cron,
    cron_runs,
    interval_runs,
    one_off_runs,
    relative_interval_runs,
    rrule_runs,
    solar_runs,
    window,
)

ZONES = ("UTC", "Europe/London", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe")
#: Zones whose transitions are not a whole hour on the hour (issue 24): Lord Howe moves
#: 30 minutes at 02:00, Troll two hours (01:00 -> 03:00 UTC+2 in spring).
ODD_ZONES = ("Australia/Lord_Howe", "Antarctica/Troll")


def interval(name: str, seconds: float, **policy: Any) -> Case:
    every = timedelta(seconds=seconds)
    return Case(name, lambda app: celery_schedules.schedule(every, app=app),
                lambda span: interval_runs(span.created, every, span.end), policy)


def relative(name: str, seconds: float) -> Case:
    every = timedelta(seconds=seconds)
    return Case(name, lambda app: celery_schedules.schedule(every, relative=True, app=app),
                lambda span: relative_interval_runs(span.created, every, span.end,
                                                    span.zones(span.app_zone)))


def app_cron(name: str, cron: Cron, **policy: Any) -> Case:
    """A crontab in the app's zone (Celery's own class, as most users write it)."""
    start, end = policy.get("start_time"), policy.get("end_time")
    return Case(
        name,
        lambda app: celery_schedules.crontab(cron.minute, cron.hour, cron.day_of_week,
                                             cron.day_of_month, cron.month_of_year, app=app),
        lambda span: window(cron_runs(cron, span.zones(span.app_zone), span.created,
                                      span.end), start, end),
        policy,
    )


def zoned_cron(name: str, cron: Cron, zone: str, **policy: Any) -> Case:
    """A crontab with its own zone (redbeat's ``crontab(..., timezone=)``)."""
    return Case(
        name,
        lambda app: crontab(cron.minute, cron.hour, cron.day_of_week, cron.day_of_month,
                            cron.month_of_year, timezone=zone),
        lambda span: cron_runs(cron, span.zones(zone), span.created, span.end),
        policy,
    )


def zoned_rrule(name: str, freq: str, dtstart: datetime, zone: str,
                policy: dict[str, Any] | None = None, **rules: Any) -> Case:
    """An rrule in a zone; ``dtstart`` and ``until`` are wall times there."""
    return Case(
        name,
        lambda app: rrule(freq, dtstart=dtstart, timezone=zone, **rules),
        lambda span: rrule_runs(freq, dtstart, span.zones(zone), span.created, span.end,
                                **rules),
        policy or {},
    )


def windowed_interval(name: str, seconds: float, start_time: datetime, end_time: datetime,
                      **policy: Any) -> Case:
    """An interval whose window opens after its creation: its first run is at
    ``start_time``, then every ``seconds`` (DELIBERATE window-anchor), until ``end_time``."""
    every = timedelta(seconds=seconds)
    return Case(name, lambda app: celery_schedules.schedule(every, app=app),
                lambda span: window([start_time, *interval_runs(start_time, every, span.end)],
                                    None, end_time),
                {"start_time": start_time, "end_time": end_time, **policy})


def one_off(name: str, run_at: datetime, **policy: Any) -> Case:
    return Case(name, lambda app: clocked(run_at),
                lambda span: [run for run in one_off_runs(run_at, policy.get("start_time"),
                                                          policy.get("end_time"))
                              if run <= span.end],
                policy, never_ran=True)


def created_on_a_match(name: str, cron: Cron, created: datetime) -> Case:
    """A crontab saved without ``last_run_at`` by a clock that reads exactly one of its
    matching minutes: it counts as run then, so its first run is the next match."""
    return Case(
        name,
        lambda app: celery_schedules.crontab(cron.minute, cron.hour, cron.day_of_week,
                                             cron.day_of_month, cron.month_of_year, app=app,
                                             nowfun=lambda: created),
        lambda span: cron_runs(cron, span.zones(span.app_zone), span.created, span.end),
        never_ran=True,
    )


def solar(name: str, event: str, lat: float, lon: float) -> Case:
    return Case(name, lambda app: celery_schedules.solar(event, lat, lon, app=app),
                lambda span: solar_runs(event, lat, lon, span.created, span.end),
                tolerance=1.0)


def wall(start: datetime, zone: str, day: int, hour: int, minute: int = 0) -> datetime:
    """A naive wall time ``day`` days after the scenario's start, in ``zone``'s calendar
    (rrule dtstarts are walls)."""
    from zoneinfo import ZoneInfo

    local = start.astimezone(ZoneInfo(zone)).date() + timedelta(days=day)
    return datetime(local.year, local.month, local.day, hour, minute)


#: The hour whose wall times a spring-forward transition skips, per zone (Lord Howe skips
#: only 02:00-02:30); a zone without one gets an hour that always exists.
GAP_HOUR = {"Europe/London": 1, "America/New_York": 2, "Australia/Lord_Howe": 2}


def calendar_cases(start: datetime, zone: str, other: str) -> list[Case]:
    """Entries for a span of weeks to years: the app zone ``zone``, and ``other`` for
    entries that carry their own zone."""
    nine = Cron(minute=15, hour=9, day_of_week="mon-fri")
    return [
        interval("every-hour", 3600),
        interval("every-7h", 7 * 3600),
        relative("relative-hour", 3600),
        relative("relative-day", 86400),
        app_cron("cron-gap-hours", Cron(minute="0,30", hour="1,2")),
        app_cron("cron-step-1to3", Cron(minute="*/20", hour="1-3")),
        app_cron("cron-hourly-30", Cron(minute=30)),
        app_cron("cron-weekdays", nine),
        app_cron("cron-day-31", Cron(minute=0, hour=12, day_of_month=31)),
        app_cron("cron-month-ends", Cron(minute=59, hour=23, day_of_month="28-31")),
        app_cron("cron-feb-29", Cron(minute=30, hour=2, day_of_month=29, month_of_year=2)),
        app_cron("cron-sunday-list", Cron(minute="5,35", hour="0-4", day_of_week="sun")),
        zoned_cron("zoned-cron-gap", Cron(minute="0,20,40", hour=GAP_HOUR.get(other, 2)),
                   other),
        zoned_cron("zoned-cron-hourly", Cron(minute=45), other),
        zoned_rrule("rrule-hourly-3", "HOURLY", wall(start, other, 0, 0, 10), other,
                    interval=3),
        zoned_rrule("rrule-daily-0230", "DAILY", wall(start, other, 0, 2, 30), other),
        zoned_rrule("rrule-weekly-mwf", "WEEKLY", wall(start, other, 0, 1, 30), other,
                    byweekday=(MO, WE, FR)),
        zoned_rrule("rrule-monthly-last-day", "MONTHLY", wall(start, other, 0, 23, 0), other,
                    bymonthday=-1),
        zoned_rrule("rrule-monthly-first-mon", "MONTHLY", wall(start, other, 0, 8, 0),
                    other, byweekday=MO(+1)),
        zoned_rrule("rrule-monthly-last-fri", "MONTHLY", wall(start, other, 0, 17, 0),
                    other, byweekday=FR(-1)),
        zoned_rrule("rrule-yearly", "YEARLY", wall(start, other, 3, 6, 0), other),
        zoned_rrule("rrule-count", "DAILY", wall(start, other, 1, 2, 0), other, count=12),
        zoned_rrule("rrule-until", "DAILY", wall(start, other, 2, 4, 0), other,
                    until=wall(start, other, 40, 4, 0), byweekday=(TU,)),
        zoned_rrule("rrule-app-zone", "DAILY", wall(start, zone, 0, 1, 45), zone),
        one_off("clocked", start + timedelta(days=9, minutes=17)),
        one_off("clocked-grace", start + timedelta(days=17, minutes=3),
                misfire_grace_time=300),
        solar("solar-sunrise-london", "sunrise", 51.5, -0.13),
        solar("solar-sunset-new-york", "sunset", 40.7, -74.0),
        app_cron("window-cron", Cron(minute=5),
                 start_time=start + timedelta(days=3, minutes=2),
                 end_time=start + timedelta(days=25, hours=7)),
        app_cron("grace-cron", Cron(minute=0), misfire_grace_time=600),
        app_cron("catch-up-3", Cron(minute="*/30"), coalesce=False, max_catch_up=3),
        app_cron("catch-up-grace", Cron(minute="10,40"), coalesce=False, max_catch_up=5,
                 misfire_grace_time=3600),
        interval("grace-interval", 5400, misfire_grace_time=120),
        app_cron("jitter-cron", Cron(minute=0, hour="*/2"), jitter=90.0),
        static(app_cron("grace-cron", Cron(minute=0), misfire_grace_time=600)),
        static(app_cron("catch-up-3", Cron(minute="*/30"), coalesce=False, max_catch_up=3)),
        static(app_cron("window-cron", Cron(minute=5),
                        start_time=start + timedelta(days=3, minutes=2),
                        end_time=start + timedelta(days=25, hours=7))),
        static(app_cron("jitter-cron", Cron(minute=0, hour="*/2"), jitter=90.0)),
    ]


def static(case: Case) -> Case:
    """The same entry configured in ``beat_schedule``, its policy keys beside the task."""
    return replace(case, name=f"static-{case.name}", static=True)


def seconds_cases(start: datetime) -> list[Case]:
    """Entries for a span of hours: sub-minute intervals, jitter and windows on them."""
    return [
        interval("every-2.5s", 2.5),
        interval("every-7s", 7),
        relative("relative-7s", 7),
        relative("relative-90s", 90),
        interval("catch-up-11s", 11, coalesce=False, max_catch_up=4),
        interval("grace-13s", 13, misfire_grace_time=30),
        interval("jitter-10s", 10, jitter=2.0),
        windowed_interval("window-9s", 9, start + timedelta(minutes=10, seconds=0.5),
                          start + timedelta(minutes=25)),
        windowed_interval("window-jitter-8s", 8, start + timedelta(minutes=12),
                          start + timedelta(minutes=20), jitter=3.0),
        one_off("clocked-jitter", start + timedelta(minutes=4, seconds=3), jitter=20.0),
        created_on_a_match("cron-created-on-match", Cron(minute="*/5"), start),
        static(interval("jitter-10s", 10, jitter=2.0)),
        static(interval("grace-13s", 13, misfire_grace_time=30)),
    ]


def transition_cases(start: datetime, zone: str) -> list[Case]:
    """Entries for a day around one transition of the app zone ``zone`` (issue 24):
    minute grids that are not hour-periodic, crontabs whose hours hold a gap, catch-ups
    of each slot and coalesced ones (the scenario puts a downtime across the
    transition), and windows and sub-millisecond times on one-offs."""
    new_year = datetime(start.year, 1, 1)
    each = {"coalesce": False, "max_catch_up": 100}
    return [
        zoned_rrule("rrule-every-45", "MINUTELY", new_year, zone, interval=45),
        zoned_rrule("rrule-every-25", "MINUTELY", new_year, zone, interval=25),
        zoned_rrule("rrule-every-11-hours-0-5", "MINUTELY", new_year, zone, interval=11,
                    byhour=[0, 1, 2, 3, 4, 5]),
        zoned_rrule("catch-up-each-rrule-7", "MINUTELY", new_year, zone, each, interval=7),
        zoned_rrule("catch-up-each-rrule-hourly-50", "HOURLY",
                    wall(start, zone, -3, 0, 50), zone, each, byminute=[10, 50]),
        app_cron("cron-10-20-30-hour-2", Cron(minute="10,20,30", hour=2)),
        app_cron("cron-25-hours-1-4", Cron(minute="*/25", hour="1-4")),
        app_cron("cron-every-13", Cron(minute="*/13")),
        app_cron("cron-hourly-7-37", Cron(minute="7,37")),
        app_cron("catch-up-each-cron-25", Cron(minute="*/25", hour="0-5"), **each),
        one_off("one-off-before-window", start + timedelta(hours=3),
                start_time=start + timedelta(hours=5, microseconds=300)),
        one_off("one-off-after-window", start + timedelta(hours=6),
                end_time=start + timedelta(hours=5)),
        one_off("one-off-sub-millisecond", start + timedelta(hours=7, microseconds=600)),
    ]


def far_future_cases(start: datetime, zone: str) -> list[Case]:
    """Entries whose next run is years away (issue 24, item 4): Feb 29 on a Friday is
    nine years from 2027 (Celery also finds 2036-02-29)."""
    leap_friday = Cron(minute=0, hour=0, day_of_month=29, month_of_year=2,
                       day_of_week="fri")
    return [
        app_cron("cron-feb-29-friday", leap_friday),
        zoned_cron("zoned-cron-feb-29-friday", leap_friday, zone),
        app_cron("cron-feb-29", Cron(minute=30, hour=2, day_of_month=29, month_of_year=2)),
        zoned_rrule("rrule-every-3-years", "YEARLY", wall(start, zone, 10, 9, 0), zone,
                    interval=3),
        one_off("one-off-in-6-years", start + timedelta(days=6 * 365, minutes=7)),
    ]

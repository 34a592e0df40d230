"""When does a schedule run next? Pure functions of the schedule and a moment.

The scheduler never asks a schedule "are you due now?" (Celery's ``is_due`` reads the
wall clock); it asks "what is the first run after this moment?", so every answer is
testable with a fixed clock and the score stored in Redis is the real next run time.

All moments are aware datetimes; results are in UTC.

Daylight-saving rule for calendar schedules (crontab, rrule), applied in the
schedule's zone:
- a wall time that does not exist (spring forward, 02:30 when clocks jump 02:00 ->
  03:00) runs once, shifted forward by the length of the gap (03:30), as Python's
  ``fold=0`` reading of that wall time gives;
- a wall time that happens twice (fall back) runs once, at its first occurrence,
  unless the crontab runs every hour (hour ``*``), in which case it runs at both,
  since both are real hours apart: an hourly job stays hourly in real time.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from functools import singledispatch
from typing import Any

from celery import schedules as celery_schedules
from celery.utils.time import delta_resolution

from .schedules import clocked, rrule

UTC = timezone.utc
#: A crontab that matches no day within eight years (Feb 29 on a given weekday
#: repeats every 28 years, but no sane rule needs more than this) never runs.
CRON_SEARCH_DAYS = 366 * 8
#: Catch-up stops walking slot by slot after this many steps.
MAX_CATCH_UP_STEPS = 10_000


def utc(moment: datetime) -> datetime:
    zone = moment.tzinfo
    if zone is UTC:
        return moment  # most calls, on the tick's hot path
    if zone is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def celery_next(schedule: Any, after: datetime) -> datetime | None:
    """The next run as Celery's ``remaining_estimate`` puts it, measured from the real
    clock: still right, only not replayable in tests."""
    remaining = schedule.remaining_estimate(after)
    if remaining is None:
        return None
    now = utc(schedule.maybe_make_aware(schedule.now()))
    # from the clock cut to the millisecond, as scores are: the result is then exactly
    # the score stored, not up to a millisecond before it
    return now.replace(microsecond=now.microsecond // 1000 * 1000) + remaining


def overrides_estimate(schedule: Any, base: Any) -> bool:
    """Whether ``schedule`` is a subclass that redefines ``remaining_estimate`` (a
    schedule written for Celery's beat): it is asked through that, not through this
    module's arithmetic for its base type."""
    method = type(schedule).remaining_estimate
    return method is not base.remaining_estimate and not getattr(method, "redbeat", False)


@singledispatch
def next_after(schedule: Any, after: datetime) -> datetime | None:
    """The first run strictly after ``after``; None when the schedule has ended.
    Schedules we do not know are asked through Celery's API (:func:`celery_next`)."""
    return celery_next(schedule, after)


@singledispatch
def first_due(schedule: Any, now: datetime) -> datetime | None:
    """When an entry that has never run is first due: the first run at or after ``now``.

    An interval is due at once (as in celery-redbeat 2.4.2); a calendar schedule waits
    for its next matching time rather than firing on creation.
    """
    return next_after(schedule, now - timedelta(microseconds=1))


@next_after.register
def _interval_next(schedule: celery_schedules.schedule, after: datetime) -> datetime | None:
    if overrides_estimate(schedule, celery_schedules.schedule):
        return celery_next(schedule, after)
    upcoming = utc(after) + schedule.run_every
    if schedule.relative:
        upcoming = delta_resolution(upcoming, schedule.run_every).replace(microsecond=0)
    return upcoming


@first_due.register
def _interval_first(schedule: celery_schedules.schedule, now: datetime) -> datetime | None:
    if overrides_estimate(schedule, celery_schedules.schedule):
        return celery_next(schedule, now - timedelta(microseconds=1))
    return utc(now)


@singledispatch
def slots_between(schedule: Any, first: datetime, last: datetime,
                  limit: int = MAX_CATCH_UP_STEPS) -> Iterator[datetime]:
    """The runs from ``first`` (itself a run) to ``last``, inclusive, oldest first; at
    most ``limit``. One pass: walking an rrule with ``next_after`` again and again would
    rescan it from its start every time."""
    slot: datetime | None = first
    for _ in range(limit):
        if slot is None or slot > last:
            return
        yield slot
        slot = next_after(schedule, slot)


@singledispatch
def latest_slot(schedule: Any, due: datetime, now: datetime) -> datetime:
    """The last run time at or before ``now``, starting from ``due`` (<= ``now``).

    Used to coalesce the slots missed while no scheduler ran into one catch-up run.
    """
    slot = due
    # Jump close to ``now`` first so a minutely crontab after a week of downtime
    # is not walked minute by minute.
    for window in (60, 3600, 86400, 32 * 86400, 400 * 86400):
        probe = now - timedelta(seconds=window)
        if probe <= slot:
            break
        candidate = next_after(schedule, probe)
        if candidate is not None and slot < candidate <= now:
            slot = candidate
            break
    latest = slot
    for latest in slots_between(schedule, slot, now):  # noqa: B007 - the last is wanted
        pass
    return latest


@latest_slot.register
def _interval_latest(schedule: celery_schedules.schedule, due: datetime,
                     now: datetime) -> datetime:
    every = schedule.run_every.total_seconds()
    if schedule.relative or every <= 0:
        return latest_slot.dispatch(object)(schedule, due, now)
    return due + timedelta(seconds=every * int((now - due).total_seconds() // every))


# -- rrule ---------------------------------------------------------------------------


@next_after.register
def _rrule_next(schedule: rrule, after: datetime) -> datetime | None:
    upcoming = schedule.rrule.after(utc(after).astimezone(schedule.zone), inc=False)
    return None if upcoming is None else utc(upcoming)


@first_due.register
def _rrule_first(schedule: rrule, now: datetime) -> datetime | None:
    upcoming = schedule.rrule.after(utc(now).astimezone(schedule.zone), inc=True)
    return None if upcoming is None else utc(upcoming)


@latest_slot.register
def _rrule_latest(schedule: rrule, due: datetime, now: datetime) -> datetime:
    latest = schedule.rrule.before(utc(now).astimezone(schedule.zone), inc=True)
    return due if latest is None or utc(latest) < due else utc(latest)


@slots_between.register
def _rrule_slots(schedule: rrule, first: datetime, last: datetime,
                 limit: int = MAX_CATCH_UP_STEPS) -> Iterator[datetime]:
    for moment in schedule.rrule.xafter(utc(first).astimezone(schedule.zone), count=limit,
                                        inc=True):
        if utc(moment) > last:
            return
        yield utc(moment)


# -- crontab -------------------------------------------------------------------------


def _instants(wall: datetime, zone: Any, both_folds: bool) -> tuple[datetime, ...]:
    """The UTC instants at which a local wall time happens (see the module rule)."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first < second and both_folds:
        return (first, second)
    return (first,)


def _day_matches(cron: celery_schedules.crontab, day: date) -> bool:
    # Celery's rule: month, day of month and weekday must all match (not cron's OR).
    return (
        day.month in cron.month_of_year
        and day.day in cron.day_of_month
        and day.isoweekday() % 7 in cron.day_of_week
    )


def _earliest_wall(after: datetime, zone: Any) -> datetime:
    """The earliest local wall time whose run could still come after ``after``.

    Normally ``after``'s own wall time; inside a repeated (fall-back) hour on its first
    pass, the second pass of earlier wall times is still ahead, so step back by the
    size of the shift.
    """
    local = after.astimezone(zone)
    wall = local.replace(tzinfo=None, second=0, microsecond=0)
    other = local.replace(fold=1 - local.fold)
    shift = (local.utcoffset() or timedelta()) - (other.utcoffset() or timedelta())
    if local.fold == 0 and shift > timedelta():
        return wall - shift
    return wall


def cron_next(
    cron: celery_schedules.crontab, after: datetime, zone: Any, inclusive: bool = False
) -> datetime | None:
    """The first crontab run after (or at, if ``inclusive``) ``after``, in ``zone``."""
    after = utc(after)
    earliest = _earliest_wall(after, zone)
    hours, minutes = sorted(cron.hour), sorted(cron.minute)
    both_folds = len(hours) == 24
    day = earliest.date()
    for _ in range(CRON_SEARCH_DAYS):
        if _day_matches(cron, day):
            found = _first_in_day(day, hours, minutes, earliest, zone, both_folds, after, inclusive)
            if found is not None:
                return found
        day += timedelta(days=1)
    return None


def _first_in_day(
    day: date, hours: list[int], minutes: list[int], earliest: datetime, zone: Any,
    both_folds: bool, after: datetime, inclusive: bool,
) -> datetime | None:
    first_day = day == earliest.date()
    best: datetime | None = None
    for hour in hours[bisect_left(hours, earliest.hour) if first_day else 0:]:
        first_hour = first_day and hour == earliest.hour
        for minute in minutes[bisect_left(minutes, earliest.minute) if first_hour else 0:]:
            instants = _instants(datetime(day.year, day.month, day.day, hour, minute), zone,
                                 both_folds)
            # Walls come in order and their first instants never go back, so once one
            # starts after the best found, nothing later in the day can beat it.
            if best is not None and instants[0] >= best:
                return best
            for instant in instants:
                if (instant > after or (inclusive and instant == after)) and (
                    best is None or instant < best
                ):
                    best = instant
    return best


@next_after.register
def _crontab_next(schedule: celery_schedules.crontab, after: datetime) -> datetime | None:
    if overrides_estimate(schedule, celery_schedules.crontab):
        return celery_next(schedule, after)
    return cron_next(schedule, after, schedule.tz)


@first_due.register
def _crontab_first(schedule: celery_schedules.crontab, now: datetime) -> datetime | None:
    if overrides_estimate(schedule, celery_schedules.crontab):
        return celery_next(schedule, now - timedelta(microseconds=1))
    return cron_next(schedule, now, schedule.tz, inclusive=True)


# -- clocked (one-off) ---------------------------------------------------------------


@next_after.register
def _clocked_next(schedule: clocked, after: datetime) -> datetime | None:
    run_at = utc(schedule.run_at)
    return run_at if run_at > utc(after) else None


@first_due.register
def _clocked_first(schedule: clocked, now: datetime) -> datetime | None:
    return utc(schedule.run_at)  # even if it passed while nobody ran: it runs once

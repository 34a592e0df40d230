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

import calendar
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from functools import singledispatch
from typing import Any

from celery import schedules as celery_schedules
from celery.utils.time import remaining
from dateutil import rrule as dateutil_rrule

from .schedules import (
    BY_PARTS,
    DAILY,
    HOURLY,
    MAX_RRULE_STEPS,
    MINUTELY,
    MONTHLY,
    SECONDLY,
    WEEKLY,
    YEARLY,
    clocked,
    rrule,
    zone_name,
)

UTC = timezone.utc
#: A crontab that matches no day within eight years (Feb 29 on a given weekday
#: repeats every 28 years, but no sane rule needs more than this) never runs.
CRON_SEARCH_DAYS = 366 * 8
#: The largest change of a zone's UTC offset at one transition (real ones are at most
#: two hours): how far back a spring-forward gap can still hold wall times to run.
MAX_DST_SHIFT = timedelta(hours=3)
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
    return to_millisecond(now) + remaining


def celery_first(schedule: Any, now: datetime) -> datetime | None:
    """Celery's first run at or after ``now`` (asked from just before it: Celery's
    answer is the next run after the moment it is given)."""
    return celery_next(schedule, now - timedelta(microseconds=1))


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

    Only entries written by hand (no meta, or a null ``last_run_at``) and one-offs get
    here: an entry created through the API counts as having run at its creation. An
    interval is then due at once; a calendar schedule at its next matching time.
    """
    return next_after(schedule, now - timedelta(microseconds=1))


@next_after.register
def _interval_next(schedule: celery_schedules.schedule, after: datetime) -> datetime | None:
    if overrides_estimate(schedule, celery_schedules.schedule):
        return celery_next(schedule, after)
    if schedule.relative:
        return _relative_next(schedule, utc(after))
    return chain_base(schedule, utc(after)) + schedule.run_every


def chain_base(schedule: celery_schedules.schedule, moment: datetime) -> datetime:
    """Where an interval's chain of runs is counted from: ``moment`` cut to the whole
    second when the interval is a whole number of seconds, else ``moment`` itself.

    So the runs of such an interval fall on whole seconds, the precision 2.4.2 scores
    in: an entry saved at 10:00:00.7 to run every minute runs at 10:01:00, 10:02:00,
    ..., and a 2.4.2 node and this one, reading the same ``last_run_at``, agree on the
    second it is due. The run after ``moment`` is ``chain_base + every``: always after
    ``moment``, since the interval is at least a second. A fractional interval (7.5 s)
    keeps exact arithmetic: cutting each run would shorten every step.
    """
    every = schedule.run_every
    if every >= timedelta(seconds=1) and every % timedelta(seconds=1) == timedelta(0):
        return moment.replace(microsecond=0)
    return moment


def _relative_next(schedule: celery_schedules.schedule, after: datetime) -> datetime:
    """A ``relative=True`` interval: ``after`` plus the interval, rounded down to the
    interval's resolution (day, hour, minute or second) on the clock of the app's zone,
    as Celery's own arithmetic (``celery.utils.time.remaining``) rounds it: an hourly
    one runs on the hour of Asia/Kolkata's clock (:30 UTC), a daily one at its
    midnight. Never at or before ``after`` (a rounding that falls back, as for an
    interval under a second, leaves the interval unrounded)."""
    local = after.astimezone(schedule.tz)
    upcoming = after + remaining(local, schedule.run_every, now=after, relative=True)
    return upcoming if upcoming > after else after + schedule.run_every


def _relative_step(schedule: celery_schedules.schedule) -> float | None:
    """The fixed distance between the runs of a ``relative=True`` interval under an
    hour, in seconds: its length cut to its resolution (a 7.5 s interval runs every
    7 s, a 90 s one every minute), the same in every zone (offsets are whole minutes).
    None when the runs are not evenly spaced: an hour or more (daylight saving moves
    the local hours and days), or under a second."""
    every = schedule.run_every.total_seconds()
    unit = 60 if every >= 60 else 1
    step = every // unit * unit
    return step if 1 <= step and every < 3600 else None


def _on_grid(moment: datetime, step: float) -> bool:
    """Whether ``moment`` is a whole second (step under a minute) or minute."""
    unit = 60 if step >= 60 else 1
    return moment.microsecond == 0 and (unit == 1 or moment.second == 0)


@first_due.register
def _interval_first(schedule: celery_schedules.schedule, now: datetime) -> datetime | None:
    """``now``, cut to the millisecond: a slot is named by its millisecond (its task
    id), and a first run at 10:00:00.9996 named 10:00:01.000 shared that id with the run
    after it of a 1 s interval, two sends under one id. Cut, not rounded up: a run due
    at once is due at the very ``now`` it is asked at (a window's start_time is rounded
    up by the caller, so nothing runs before it)."""
    if overrides_estimate(schedule, celery_schedules.schedule):
        return celery_first(schedule, now)
    return to_millisecond(utc(now))


def to_millisecond(moment: datetime) -> datetime:
    """``moment`` cut to the millisecond, the precision of scores and slot ids: a time
    computed from it is exactly the score that is stored."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def up_to_millisecond(moment: datetime) -> datetime:
    """``moment`` rounded up to the millisecond that names a slot (never before it)."""
    cut = to_millisecond(moment)
    return cut if cut == moment else cut + timedelta(milliseconds=1)


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


@singledispatch
def count_slots(schedule: Any, first: datetime, last: datetime,
                limit: int = MAX_CATCH_UP_STEPS) -> int:
    """How many runs from ``first`` (itself a run) to ``last``, inclusive: walked, so at
    most ``limit``, unless the schedule's runs can be counted by arithmetic."""
    return sum(1 for _ in slots_between(schedule, first, last, limit))


@count_slots.register
def _interval_count(schedule: celery_schedules.schedule, first: datetime, last: datetime,
                    limit: int = MAX_CATCH_UP_STEPS) -> int:
    if overrides_estimate(schedule, celery_schedules.schedule):  # its runs are its own
        return count_slots.dispatch(object)(schedule, first, last, limit)
    every = schedule.run_every
    if schedule.relative:
        step = _relative_step(schedule)
        if step is None or not _on_grid(first, step):
            return count_slots.dispatch(object)(schedule, first, last, limit)
        every = timedelta(seconds=step)
    if every <= timedelta(0):
        return count_slots.dispatch(object)(schedule, first, last, limit)
    if last < first:
        return 0
    return (last - chain_base(schedule, first)) // every + 1


@latest_slot.register
def _interval_latest(schedule: celery_schedules.schedule, due: datetime,
                     now: datetime) -> datetime:
    """By arithmetic on the interval's own chain of runs from ``due`` (a relative one's
    too, when evenly spaced: probing near ``now`` would land off its chain); walked
    from ``due`` for a relative one of an hour or more (at most MAX_CATCH_UP_STEPS
    runs: over a year of hourly runs). In whole microseconds, as the walk adds them:
    in float seconds 0.3 // 0.1 is 2, and a tick exactly on a run of a 0.1 s interval
    coalesced to the run before it, then sent the one at ``now`` as well. A subclass
    with its own ``remaining_estimate`` is asked through it (``run_every`` may not be
    its step)."""
    if overrides_estimate(schedule, celery_schedules.schedule):
        return latest_slot.dispatch(object)(schedule, due, now)
    every = schedule.run_every
    if schedule.relative:
        step = _relative_step(schedule)
        if step is not None and _on_grid(due, step):
            every = timedelta(seconds=step)
        elif every >= timedelta(seconds=1):
            latest = due
            for latest in slots_between(schedule, due, now):  # noqa: B007 - the last
                pass
            return latest
        else:
            return latest_slot.dispatch(object)(schedule, due, now)
    if every <= timedelta(0):
        return latest_slot.dispatch(object)(schedule, due, now)
    base = chain_base(schedule, due)  # ``due`` itself, or the runs after it are cut
    steps = (now - base) // every
    return due if steps <= 0 else base + every * steps


# -- rrule ---------------------------------------------------------------------------
#
# dateutil answers "the first run after t" by iterating the rule from its dtstart, so a
# rule costs its age (a year-old minutely rule: half a million steps; a secondly rule
# from year 1 never returns). Here a rule is *resumed*: a copy of it starts at the
# beginning of the period that holds t. Periods are dtstart-aligned (second, minute,
# hour, day, week from wkst, month, year, times the interval), so from the start of any
# later period the copy produces exactly the original's runs, once the defaults dateutil
# takes from dtstart (the time of day, the weekday, the day of month) are spelled out.
# ``count`` needs the number of runs before that period: ``k`` for a rule with one run
# per period, else a walk from the nearest position already counted (a rule with
# BY-parts and a count above MAX_RRULE_STEPS is refused when built).
#
# dateutil skips a day its day parts (BYMONTH, BYWEEKDAY...) exclude cheaply, except at
# hourly and finer frequencies with BYHOUR/BYMINUTE, where it then steps through every
# second or minute of the next day (a secondly rule on Feb 29 at 23:00 costs it about
# a second per month skipped). Those rules are resumed without their day parts, and a
# daily rule made of the day parts alone says which days count.
#
# Every computation is bounded: at most MAX_RRULE_STEPS runs passed over that are not
# the answer, MAX_RRULE_MONTHS calendar months scanned in a row without a run (dateutil
# would go on up to year 9999: seconds of work for a rule such as February 30th), and
# MAX_RRULE_MISSES allowed days in a row on which an hourly or finer rule's clock
# never lands. Past any bound, ScheduleBoundError, a ValueError: saving such an entry
# fails, and the tick quarantines it with the message.

#: Calendar months an rrule computation scans in a row without finding a run: a hundred
#: years at monthly and finer frequencies (a yearly rule scans a year at a time).
MAX_RRULE_MONTHS = 1_200
#: Days in a row that an hourly or finer rule's day parts allow but its interval and
#: clock parts leave without a run (a rule whose grid never meets its day parts).
MAX_RRULE_MISSES = 32
_FIXED_SECONDS = {SECONDLY: 1, MINUTELY: 60, HOURLY: 3600, DAILY: 86400, WEEKLY: 7 * 86400}
#: Day parts that stop dateutil from taking a default day from dtstart.
_DAY_DEFAULT_BLOCKERS = frozenset({"byweekno", "byyearday", "bymonthday", "byweekday",
                                   "byeaster"})
_DAY_PARTS = _DAY_DEFAULT_BLOCKERS | {"bymonth"}
#: A count walk leaves a position behind every this many runs.
_CHECKPOINT_EVERY = 1024


class ScheduleBoundError(ValueError):
    """A schedule that found no run within the documented bound of work (see above)."""


class _ScanLimit(Exception):
    """Raised from inside dateutil's iteration: too many months without a run."""


class _ScanningRule(dateutil_rrule.rrule):
    """dateutil's rrule counting the calendar months its iteration scans.

    dateutil rebuilds its calendar masks for every month (or longer period) it moves
    into, and reads ``_byeaster`` each time: counting those reads bounds the days it
    skips without a run, which nothing else in dateutil does. tests/test_nexttime_bounds.py
    checks that a rule matching no day still stops, should a dateutil release change this.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.scanned = 0
        super().__init__(*args, **kwargs)

    @property
    def _byeaster(self) -> Any:
        self.scanned += 1
        if self.scanned > MAX_RRULE_MONTHS:
            raise _ScanLimit
        return self.__dict__["byeaster_value"]

    @_byeaster.setter
    def _byeaster(self, value: Any) -> None:
        self.__dict__["byeaster_value"] = value


def _seconds(wall: datetime) -> int:
    """Whole seconds of a naive wall time since 0001-01-01 (day 1)."""
    return wall.toordinal() * 86400 + wall.hour * 3600 + wall.minute * 60 + wall.second


def _wall(moment: datetime, zone: Any) -> datetime:
    """``moment``'s wall time in ``zone``, naive. dateutil compares runs with a moment in
    the rule's own zone by wall time (same tzinfo: Python ignores offsets and fold), so
    these functions compare wall times too, and give dateutil's answers exactly."""
    return utc(moment).astimezone(zone).replace(tzinfo=None)


def _spelled_out(schedule: rrule, wall: datetime) -> dict[str, Any]:
    """The rule's BY-parts with the values dateutil would take from dtstart written out,
    so that a copy starting elsewhere keeps them."""
    rules = {name: value for name, value in schedule.rules.items()
             if value is not None and name in BY_PARTS}
    freq = schedule.freq
    if not rules.keys() & _DAY_DEFAULT_BLOCKERS:
        if freq == YEARLY:
            rules.setdefault("bymonth", wall.month)
            rules["bymonthday"] = wall.day
        elif freq == MONTHLY:
            rules["bymonthday"] = wall.day
        elif freq == WEEKLY:
            rules["byweekday"] = wall.weekday()
    for name, finer_than in (("byhour", HOURLY), ("byminute", MINUTELY), ("bysecond", SECONDLY)):
        if freq < finer_than:
            rules.setdefault(name, getattr(wall, name[2:]))
    return rules


def _scan(rule: _ScanningRule, moment: datetime) -> Iterator[datetime]:
    """The runs of a scanning rule; ScheduleBoundError after too many empty months."""
    runs = iter(rule)
    while True:
        try:
            run = next(runs)
        except StopIteration:
            return
        except _ScanLimit:
            raise ScheduleBoundError(
                f"rrule: no run found within {MAX_RRULE_MONTHS} months of calendar after "
                f"{moment.isoformat()}") from None
        rule.scanned = 0
        yield run


class _Resumable:
    """What resuming one rrule needs, worked out once per schedule object.

    Period ``k`` starts at dtstart for ``k == 0`` (dateutil's first period starts
    there: a weekly one is a partial week) and at the k-th dtstart-aligned period
    boundary after it otherwise.
    """

    def __init__(self, schedule: rrule) -> None:
        self.schedule = schedule
        self.freq, self.interval, self.until = schedule.freq, schedule.interval, schedule.until
        self.dtstart = schedule.dtstart.replace(microsecond=0)  # as dateutil keeps it
        self.zone = self.dtstart.tzinfo
        self.count: int | None = schedule.rules["count"]
        self.simple = schedule.one_per_period
        wkst = schedule.rules["wkst"]
        self.wkst = (calendar.firstweekday() if wkst is None
                     else wkst if isinstance(wkst, int) else wkst.weekday)
        wall = self.dtstart.replace(tzinfo=None)
        rules = _spelled_out(schedule, wall)
        fine = self.freq >= HOURLY
        #: hourly and finer: the day parts, checked by a daily rule of their own
        self.day_parts = {n: v for n, v in rules.items() if fine and n in _DAY_PARTS}
        self.clock_parts = {n: v for n, v in rules.items() if n not in self.day_parts}
        if self.freq in _FIXED_SECONDS:
            self.step = _FIXED_SECONDS[self.freq] * self.interval
            self.anchor = self._fixed_anchor(wall)
        else:
            self.step = self.interval * (12 if self.freq == YEARLY else 1)  # in months
            self.anchor = self._months(wall)
        #: (k, runs before period k), sorted: where count walks have been
        self.checkpoints: list[tuple[int, int]] = [(0, 0)]

    def _fixed_anchor(self, wall: datetime) -> int:
        """The start of dtstart's period, in seconds (see :func:`_seconds`)."""
        if self.freq == WEEKLY:
            return (wall.toordinal() - (wall.weekday() - self.wkst) % 7) * 86400
        seconds = _seconds(wall)
        return seconds - seconds % _FIXED_SECONDS[self.freq]

    def _months(self, wall: datetime) -> int:
        return wall.year * 12 + (wall.month - 1 if self.freq == MONTHLY else 0)

    def index(self, wall: datetime) -> int:
        """The period holding the naive wall time ``wall`` (0 up to dtstart's period)."""
        position = _seconds(wall) if self.freq in _FIXED_SECONDS else self._months(wall)
        return max(0, (position - self.anchor) // self.step)

    def start(self, k: int) -> datetime:
        """When period ``k`` starts (aware, in the rule's zone)."""
        if k == 0:
            return self.dtstart
        if self.freq in _FIXED_SECONDS:
            day, second = divmod(self.anchor + k * self.step, 86400)
            wall = datetime.fromordinal(day) + timedelta(seconds=second)
        else:
            year, month = divmod(self.anchor + k * self.step, 12)
            wall = datetime(year, month + 1, 1)
        return wall.replace(tzinfo=self.zone)

    def rule(self, k: int) -> _ScanningRule:
        """The rule's copy from period ``k`` on, without count (see :func:`_runs`) and,
        at hourly and finer frequencies, without its day parts (see :func:`_raw`)."""
        return _ScanningRule(self.freq, dtstart=self.start(k), interval=self.interval,
                             wkst=self.wkst, until=self.until, **self.clock_parts)

    def days(self, day: date) -> _ScanningRule:
        """The days the day parts allow, from ``day`` on, as midnights."""
        midnight = datetime(day.year, day.month, day.day, tzinfo=self.zone)
        return _ScanningRule(DAILY, dtstart=midnight, wkst=self.wkst, until=self.until,
                             byhour=0, byminute=0, bysecond=0, **self.day_parts)

    def runs_before(self, k: int, moment: datetime) -> int:
        """How many runs the rule has before period ``k`` (counted up to ``count``)."""
        if k == 0 or self.simple:
            return k
        assert self.count is not None  # only asked for rules with a count
        done, number = self.checkpoints[bisect_right(self.checkpoints, (k, self.count)) - 1]
        if done == k:
            return number
        stop, previous, kept = self.start(k).replace(tzinfo=None), done, number
        for run in _raw(self, done, moment):
            wall = run.replace(tzinfo=None)
            if number >= self.count or wall >= stop:
                break
            period = self.index(wall)
            if period != previous and number - kept >= _CHECKPOINT_EVERY:
                self._keep(period, number)  # the first run of its period: exact
                kept = number
            previous = period
            number += 1  # at most count (<= MAX_RRULE_STEPS) times: refused otherwise
        self._keep(k, number)
        return number

    def _keep(self, k: int, number: int) -> None:
        position = bisect_right(self.checkpoints, (k, number))
        if self.checkpoints[position - 1][0] != k:
            self.checkpoints.insert(position, (k, number))


def _plan(schedule: rrule) -> _Resumable:
    plan = schedule.__dict__.get("_resumable")
    if plan is None:
        plan = schedule.__dict__["_resumable"] = _Resumable(schedule)
    return plan


def _raw(plan: _Resumable, k: int, moment: datetime) -> Iterator[datetime]:
    """The rule's runs from period ``k`` on, without count. An hourly or finer rule with
    day parts runs its copy without them, kept to the days a daily rule of the day parts
    gives, and jumps over the days it excludes."""
    if not plan.day_parts:
        yield from _scan(plan.rule(k), moment)
        return
    days = _scan(plan.days(plan.start(k).date()), moment)
    day, misses = next(days, None), 0
    while day is not None:
        k = max(k, plan.index(day.replace(tzinfo=None)))
        for run in _scan(plan.rule(k), moment):
            if run.date() < day.date():
                continue  # the period straddles midnight: its runs on the day before
            while day is not None and day.date() < run.date():
                day = next(days, None)
            if day is None or day.date() != run.date():
                break  # on a day the day parts exclude: jump to the next allowed one
            misses = 0
            yield run
        else:
            return
        misses += 1
        if misses > MAX_RRULE_MISSES:
            raise ScheduleBoundError(
                f"rrule: no run found on the {MAX_RRULE_MISSES} days after "
                f"{moment.isoformat()} that its day parts allow")


def _runs(plan: _Resumable, k: int, moment: datetime) -> Iterator[datetime]:
    """The rule's runs from period ``k`` on, oldest first, aware in its zone: exactly
    the original's, ``count`` included. ``moment`` is for the error messages."""
    if plan.count is None:
        yield from _raw(plan, k, moment)
        return
    number = plan.runs_before(k, moment)
    for run in _raw(plan, k, moment):
        if number >= plan.count:
            return
        number += 1
        yield run


def _passed(steps: int, moment: datetime) -> int:
    """One more run passed over; ScheduleBoundError past MAX_RRULE_STEPS."""
    if steps >= MAX_RRULE_STEPS:
        raise ScheduleBoundError(
            f"rrule: no run found within {MAX_RRULE_STEPS} steps after {moment.isoformat()}")
    return steps + 1


def _rrule_search(schedule: rrule, moment: datetime, inclusive: bool) -> datetime | None:
    plan = _plan(schedule)
    wall = _wall(moment, plan.zone)
    shift = spring_shift(moment, plan.zone)
    floor = wall - shift
    best: datetime | None = None
    steps = 0
    for run in _runs(plan, plan.index(floor), moment):
        run_wall = run.replace(tzinfo=None)
        instant = utc(run)
        ahead = run_wall > wall or inclusive and run_wall == wall
        if ahead and not shift:
            return instant
        # a wall time of the gap, which runs (shifted) after moment
        shifted = run_wall >= floor and (instant > moment or inclusive and instant == moment)
        if (ahead or shifted) and (best is None or instant < best):
            best = instant
        if best is not None and run_wall > wall + shift:
            return best  # later walls run later than the shifted ones of the gap
        steps = _passed(steps, moment)
    return best


@next_after.register
def _rrule_next(schedule: rrule, after: datetime) -> datetime | None:
    return _rrule_search(schedule, after, inclusive=False)


@first_due.register
def _rrule_first(schedule: rrule, now: datetime) -> datetime | None:
    return _rrule_search(schedule, now, inclusive=True)


@latest_slot.register
def _rrule_latest(schedule: rrule, due: datetime, now: datetime) -> datetime:
    """The last run at or before ``now`` (dateutil's ``before(now, inc=True)``) and not
    before ``due``: the latest period from ``due``'s to ``now``'s with a run at or
    before ``now``, found by galloping back from ``now`` and bisecting (a few dozen
    probes, however long the gap), then walked."""
    plan = _plan(schedule)
    wall = _wall(now, plan.zone)
    newest, oldest = plan.index(wall), plan.index(_wall(due, plan.zone))

    def has_run(k: int) -> bool:  # a run from period k's start to now
        first = next(_runs(plan, k, now), None)
        return first is not None and first.replace(tzinfo=None) <= wall

    empty, back = newest + 1, 0  # the oldest period known to hold no run up to now
    while True:
        k = max(newest - back, oldest)
        if k > newest or has_run(k):
            break
        if k == oldest:
            return due
        empty, back = k, 2 * back + 1
    while empty - k > 1:  # k has a run up to now, empty has none
        middle = (k + empty) // 2
        k, empty = (middle, empty) if has_run(middle) else (k, middle)
    latest: datetime | None = None
    steps = 0
    for run in _runs(plan, k, now):  # all in period k: the next one holds none
        if run.replace(tzinfo=None) > wall:
            break
        if utc(run) <= now and (latest is None or utc(run) > latest):
            latest = utc(run)  # not a wall time of a gap, shifted past now
        steps = _passed(steps, now)
    return due if latest is None or latest < due else latest


@slots_between.register
def _rrule_slots(schedule: rrule, first: datetime, last: datetime,
                 limit: int = MAX_CATCH_UP_STEPS) -> Iterator[datetime]:
    plan = _plan(schedule)
    wall = _wall(first, plan.zone)
    skipped = sent = 0
    previous = None
    for run in _runs(plan, plan.index(wall), first):
        if run.replace(tzinfo=None) < wall or previous is not None and utc(run) <= previous:
            # before first; or a real wall time a shifted one of a gap already ran at
            skipped = _passed(skipped, first)
            continue
        if sent >= limit or utc(run) > last:
            return
        sent += 1
        previous = utc(run)
        yield previous


@count_slots.register
def _rrule_count(schedule: rrule, first: datetime, last: datetime,
                 limit: int = MAX_CATCH_UP_STEPS) -> int:
    """By arithmetic for a rule with one run per fixed-length period in a zone without
    daylight saving (runs are wall times: across a transition they are walked)."""
    zone = schedule.zone
    fixed = zone is UTC or isinstance(zone, timezone) or zone_name(zone) in ("UTC", "Etc/UTC")
    if not (fixed and schedule.one_per_period and schedule.freq in _FIXED_SECONDS):
        return count_slots.dispatch(object)(schedule, first, last, limit)
    step = _FIXED_SECONDS[schedule.freq] * schedule.interval
    return max(0, int((utc(last) - utc(first)).total_seconds() // step) + 1)


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

    Normally ``after``'s own wall time, but two kinds of earlier wall times can still
    run after it: inside a repeated (fall-back) hour on its first pass, the second pass
    of earlier wall times; and just after a spring-forward gap, the wall times inside
    the gap, which run shifted forward by its length (02:20 in New York's gap runs at
    03:20 EDT, after 03:00 EDT). Step back by the size of the shift.
    """
    local = after.astimezone(zone)
    wall = local.replace(tzinfo=None, second=0, microsecond=0)
    offset = local.utcoffset() or timedelta()
    other = local.replace(fold=1 - local.fold)
    shift = offset - (other.utcoffset() or timedelta())
    if local.fold == 0 and shift > timedelta():
        return wall - shift
    return wall - spring_shift(after, zone)


def spring_shift(moment: datetime, zone: Any) -> timedelta:
    """How far clocks in ``zone`` went forward within MAX_DST_SHIFT before ``moment``
    (zero almost always): the wall times that far back may be those of a gap, which run
    shifted forward, after ``moment``."""
    try:
        offset = utc(moment).astimezone(zone).utcoffset() or timedelta()
        earlier = (utc(moment) - MAX_DST_SHIFT).astimezone(zone).utcoffset() or timedelta()
    except OverflowError:  # hours from year 1 (or 9999): no transition there
        return timedelta()
    return max(offset - earlier, timedelta())


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
        return celery_first(schedule, now)
    return cron_next(schedule, now, schedule.tz, inclusive=True)


# -- clocked (one-off) ---------------------------------------------------------------


@next_after.register
def _clocked_next(schedule: clocked, after: datetime) -> datetime | None:
    run_at = utc(schedule.run_at)
    return run_at if run_at > utc(after) else None


@first_due.register
def _clocked_first(schedule: clocked, now: datetime) -> datetime | None:
    return utc(schedule.run_at)  # even if it passed while nobody ran: it runs once


# -- solar ---------------------------------------------------------------------------

#: ephem's time for a rise or set moves by about a tenth of a second with where its
#: search starts, so asked from a moment just after an event (the run just recorded:
#: Celery's answer is measured from the real clock) it can give that same event back,
#: and the entry ran twice. Found this close after the moment asked, an event is that
#: one again; the next event of the same kind is hours away.
SOLAR_SAME_EVENT = timedelta(seconds=5)


@next_after.register
def _solar_next(schedule: celery_schedules.solar, after: datetime) -> datetime | None:
    found = celery_next(schedule, after)
    if overrides_estimate(schedule, celery_schedules.solar) or found is None:
        return found
    if found - utc(after) < SOLAR_SAME_EVENT:
        return celery_next(schedule, utc(after) + SOLAR_SAME_EVENT)
    return found


@first_due.register
def _solar_first(schedule: celery_schedules.solar, now: datetime) -> datetime | None:
    return celery_first(schedule, now)  # an event at now counts

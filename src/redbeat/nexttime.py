"""When does a schedule run next? Pure functions of the schedule and a moment.

The scheduler never asks a schedule "are you due now?" (Celery's ``is_due`` reads the
wall clock); it asks "what is the first run after this moment?", so every answer is
testable with a fixed clock and the score stored in Redis is the real next run time.

All moments are aware datetimes; results are in UTC.

Daylight-saving rule for calendar schedules (crontab, rrule), in the schedule's zone.
A schedule names wall times (a crontab's matching minutes, an rrule's runs as dateutil
gives them, in naive local time); its runs are the instants those wall times are
placed at, in time order, an instant once:

- a wall time that happens once runs then;
- a wall time that does not exist (spring forward: 02:30 when clocks jump 02:00 ->
  03:00) runs once, shifted forward by the length of the gap (03:30), as Python's
  ``fold=0`` reading of it gives, even when that comes after real wall times that
  follow the gap (London every 45 minutes: 01:30 runs at 02:30 BST, after 02:15 BST);
- a wall time that happens twice (fall back) runs once, at its first occurrence,
  unless the crontab runs every hour (hour ``*``), in which case it runs at both,
  since both are real hours apart: an hourly job stays hourly in real time;
- two wall times placed at one instant (New York's 02:00, shifted, and 03:00 EDT) are
  one run.

:func:`_placed` is the one walk that applies it; the next run, the first run, the runs
between two moments and the latest run before a moment (catch-up) of every calendar
schedule all come from it.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import MAXYEAR, date, datetime, timedelta, timezone
from functools import singledispatch
from heapq import heappop, heappush
from itertools import islice, takewhile
from typing import Any, NamedTuple, TypeVar

from celery import Celery
from celery import schedules as celery_schedules
from celery.utils.time import remaining
from dateutil import rrule as dateutil_rrule

from . import compat
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


def clock_now(schedule: Any, app: Any) -> datetime:
    """The time by an entry's clock, what Celery's ``ScheduleEntry.default_now`` reads:
    the schedule's (its ``nowfun``, else its app's ``now``), the app's without one.

    Where neither is replaced, the time is read in the app's zone directly. Celery's
    ``app.now`` reads it in UTC, checks that for a DST ambiguity UTC never has and then
    converts it to the app's zone: the same instant in the same zone, at several times
    the cost, and an entry reads its clock twice per save (its ``last_run_at`` when
    built, and its score)."""
    if schedule:
        if getattr(schedule, "nowfun", None) is not None or \
                getattr(type(schedule), "now", None) is not celery_schedules.BaseSchedule.now:
            return schedule.now()
        app = schedule.app
    if getattr(type(app), "now", None) is not Celery.now or "now" in vars(app):
        return app.now()
    return datetime.now(app.timezone)


def overrides_estimate(schedule: Any, base: Any) -> bool:
    """Whether ``schedule`` is a subclass that redefines ``remaining_estimate`` (a
    schedule written for Celery's beat): it is asked through that, not through this
    module's arithmetic for its base type."""
    return compat.asks_estimate(schedule, base)


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


# -- a tick's answers ------------------------------------------------------------------

_T = TypeVar("_T")
#: The answers of the tick planning now (see :func:`remembering`); None outside one.
_ANSWERS: ContextVar[dict[tuple[Any, ...], tuple[Any, Any]] | None] = ContextVar(
    "redbeat_nexttime_answers", default=None)


@contextmanager
def remembering() -> Iterator[None]:
    """Within it, each question to a calendar schedule (its next run after a moment, its
    first at one, its latest between two) is worked out once per schedule object: a
    tick plans a thousand entries on ``* * * * *`` that last ran at one slot for the
    price of one (the tick's definition cache gives equal schedules one object). Only
    for the span of one tick's planning, which changes no schedule: an answer is a
    function of the schedule and the moments asked about alone."""
    token = _ANSWERS.set({})
    try:
        yield
    finally:
        _ANSWERS.reset(token)


def _remembered(question: str, schedule: Any, moments: tuple[datetime, ...],
                compute: Callable[[], _T]) -> _T:
    answers = _ANSWERS.get()
    if answers is None:
        return compute()
    key = (question, id(schedule), *moments)
    known = answers.get(key)
    if known is not None and known[0] is schedule:  # not a new object at a freed id
        return known[1]  # type: ignore[no-any-return]
    answer = compute()
    answers[key] = (schedule, answer)
    return answer


# -- calendar schedules: from wall times to runs --------------------------------------


def fixed_offset(zone: Any) -> bool:
    """Whether ``zone`` never changes its UTC offset (UTC, a fixed offset): no gaps and
    no repeated hours, so a wall time is one instant."""
    return zone is UTC or isinstance(zone, timezone) or zone_name(zone) in ("UTC", "Etc/UTC")


def _placed(walls: Iterable[datetime], zone: Any, both_folds: bool) -> Iterator[datetime]:
    """The runs of a calendar schedule, oldest first, each once, from its wall times
    (naive, in ``zone``, in wall order): the one walk of the module's rule, shared by
    the next run and every catch-up of crontabs and rrules.

    Wall order is not time order across a spring-forward gap: a wall of the gap runs
    shifted forward, after real walls that follow it (London, every 45 minutes: 01:30
    runs at 02:30 BST, after 02:15 BST). So each wall's *floor* is worked out: the
    earlier of its two readings (fold 0 and fold 1), before which neither its runs nor
    those of any later wall can come: its own instant outside a gap, inside one an
    instant before the transition (the shifted walls of a gap and the real walls after
    it all run after the transition). Runs wait in a heap until the floor passes them:
    across a gap or a repeated hour (both occurrences), for at most the length of the
    shift; everywhere else each is passed on as soon as its wall is read.
    """
    fixed = fixed_offset(zone)
    waiting: list[datetime] = []
    last: datetime | None = None
    for wall in walls:
        first = wall.replace(tzinfo=zone).astimezone(UTC)
        floor = first
        if not fixed:
            second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            floor = min(first, second)
            if both_folds and second > first:
                heappush(waiting, second)
        if not waiting and first == floor:  # in order, nothing held: most walls
            if last is None or first > last:
                last = first
                yield first
            continue
        heappush(waiting, first)
        while waiting and waiting[0] <= floor:
            run = heappop(waiting)
            if last is None or run > last:  # one run for walls placed at one instant
                last = run
                yield run
    while waiting:
        run = heappop(waiting)
        if last is None or run > last:
            last = run
            yield run


def _up_to(runs: Iterator[datetime], last: datetime, limit: int) -> Iterator[datetime]:
    """``runs`` (oldest first) up to ``last`` inclusive, ``limit`` at most."""
    return islice(takewhile(lambda run: run <= last, runs), limit)


#: The span :func:`_calendar_latest` narrows the last run down to before it walks the
#: runs in it: sixty runs of a secondly rrule at most.
LATEST_WALK = timedelta(minutes=1)
_JUST_BEFORE = timedelta(microseconds=1)


def _calendar_latest(schedule: Any, due: datetime, now: datetime) -> datetime:
    """The last run at or before ``now`` and not before ``due`` (itself a run), of a
    schedule whose runs are fixed times (crontab, rrule): the shortest span back from
    ``now`` that holds a run, doubled from a minute, is bisected down to LATEST_WALK
    and its runs walked. A few dozen next-run computations, however long beat was
    down, and exact: each probe asks for the first run at or after a moment, which the
    one walk places in time order (so across a gap or a repeated hour too)."""

    def holds_run(start: datetime) -> bool:  # a run from ``start`` to ``now``
        found = next_after(schedule, start - _JUST_BEFORE)
        return found is not None and found <= now

    # Most often nothing ran since ``due`` (a tick later than its slot, a daily entry
    # ticked hours after its slot): one question, which the tick asks again for the run that
    # follows (remembered), in place of the doubling and bisection (about 20 questions).
    following = next_after(schedule, due)
    if following is None or following > now:
        return due
    low, high, width = due, now, LATEST_WALK
    while now - low > width:
        probe = now - width
        if holds_run(probe):
            low = probe
            break
        high, width = probe, width * 2
    while high - low > LATEST_WALK:  # a run from low to now; none from high to now
        middle = low + (high - low) / 2
        low, high = (middle, high) if holds_run(middle) else (low, middle)
    first = due if low == due else next_after(schedule, low - _JUST_BEFORE)
    latest = due
    for latest in slots_between(schedule, first, now):  # noqa: B007 - the last is wanted
        pass
    return latest


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


def _rrule_runs(schedule: rrule, moment: datetime, inclusive: bool) -> Iterator[datetime]:
    """The rule's runs after ``moment`` (or at it, if ``inclusive``), oldest first: its
    wall times from the period holding the earliest one that can still run after
    ``moment`` (a wall of a spring-forward gap just before it runs shifted, after it),
    placed by :func:`_placed`."""
    moment = utc(moment)
    plan = _plan(schedule)
    earliest = _wall(moment, plan.zone) - spring_shift(moment, plan.zone)
    walls = (run.replace(tzinfo=None) for run in _runs(plan, plan.index(earliest), moment))
    runs = _placed(walls, plan.zone, both_folds=False)
    steps = 0
    for run in runs:
        if run > moment or inclusive and run == moment:
            yield run
            yield from runs
            return
        steps = _passed(steps, moment)


@next_after.register
def _rrule_next(schedule: rrule, after: datetime) -> datetime | None:
    return _remembered("next", schedule, (after,),
                       lambda: next(_rrule_runs(schedule, after, inclusive=False), None))


@first_due.register
def _rrule_first(schedule: rrule, now: datetime) -> datetime | None:
    return _remembered("first", schedule, (now,),
                       lambda: next(_rrule_runs(schedule, now, inclusive=True), None))


@latest_slot.register
def _rrule_latest(schedule: rrule, due: datetime, now: datetime) -> datetime:
    return _remembered("latest", schedule, (due, now),
                       lambda: _calendar_latest(schedule, due, now))


@slots_between.register
def _rrule_slots(schedule: rrule, first: datetime, last: datetime,
                 limit: int = MAX_CATCH_UP_STEPS) -> Iterator[datetime]:
    return _up_to(_rrule_runs(schedule, first, inclusive=True), last, limit)


@count_slots.register
def _rrule_count(schedule: rrule, first: datetime, last: datetime,
                 limit: int = MAX_CATCH_UP_STEPS) -> int:
    """By arithmetic for a rule with one run per fixed-length period in a zone without
    daylight saving (runs are wall times: across a transition they are walked)."""
    if not (fixed_offset(schedule.zone) and schedule.one_per_period
            and schedule.freq in _FIXED_SECONDS):
        return count_slots.dispatch(object)(schedule, first, last, limit)
    step = _FIXED_SECONDS[schedule.freq] * schedule.interval
    return max(0, int((utc(last) - utc(first)).total_seconds() // step) + 1)


# -- crontab -------------------------------------------------------------------------

#: The most days a month has, by month (February's 29th exists in leap years).
_MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class _CronFields(NamedTuple):
    """A crontab's fields as the walk reads them, sorted once per crontab object."""

    sources: tuple[Any, ...]  # the crontab's own sets these were read from
    minutes: list[int]
    hours: list[int]
    days: list[int]
    months: list[int]
    weekdays: Any  # a set: 0 is Sunday


def _cron_fields(cron: celery_schedules.crontab) -> _CronFields:
    """The fields of ``cron``, kept on it (read again should a field be replaced)."""
    sources = (cron.minute, cron.hour, cron.day_of_month, cron.month_of_year,
               cron.day_of_week)
    fields = cron.__dict__.get("_redbeat_fields")
    if fields is None or any(a is not b for a, b in zip(fields.sources, sources,
                                                        strict=True)):
        fields = cron.__dict__["_redbeat_fields"] = _CronFields(
            sources, sorted(cron.minute), sorted(cron.hour), sorted(cron.day_of_month),
            sorted(cron.month_of_year), cron.day_of_week)
    return fields


def _cron_days(fields: _CronFields, first: date) -> Iterator[date]:
    """The days from ``first`` on that match month, day of month *and* weekday (Celery's
    rule, not cron's "day of month or weekday"), oldest first, up to the year 9999.

    Each date of the calendar falls on every weekday within the 400 years after which
    the Gregorian calendar repeats itself (Feb 29 on a Friday: 2036 after 2008, and 40
    years apart across 2100, which is no leap year), so a crontab whose months have one
    of its days runs within that span, however rare: such a crontab is found, not
    given up on. One whose months have none of its days (February 30th) never runs:
    ScheduleBoundError, so it is refused on save and quarantined when written raw.
    """
    months, days = fields.months, fields.days
    if not any(days[0] <= _MONTH_DAYS[month] for month in months):
        raise ScheduleBoundError(
            f"crontab: no month of month_of_year {months} has a day of day_of_month "
            f"{days}: it never runs")
    weekdays = fields.weekdays
    for year in range(first.year, MAXYEAR + 1):
        this_year = year == first.year
        for month in months[bisect_left(months, first.month) if this_year else 0:]:
            length = calendar.monthrange(year, month)[1]
            this_month = this_year and month == first.month
            for number in days[bisect_left(days, first.day) if this_month else 0:]:
                if number > length:
                    break
                day = date(year, month, number)
                if day.isoweekday() % 7 in weekdays:
                    yield day


def _cron_walls(fields: _CronFields, earliest: datetime) -> Iterator[datetime]:
    """The crontab's wall times from ``earliest`` (naive, whole minutes) on, in order."""
    hours, minutes = fields.hours, fields.minutes
    for day in _cron_days(fields, earliest.date()):
        first_day = day == earliest.date()
        for hour in hours[bisect_left(hours, earliest.hour) if first_day else 0:]:
            first_hour = first_day and hour == earliest.hour
            for minute in minutes[bisect_left(minutes, earliest.minute) if first_hour else 0:]:
                yield datetime(day.year, day.month, day.day, hour, minute)


def _cron_runs(cron: celery_schedules.crontab, zone: Any, after: datetime,
               inclusive: bool) -> Iterator[datetime]:
    """The crontab's runs in ``zone`` after ``after`` (or at it, if ``inclusive``),
    oldest first: its wall times from the earliest that can still run after ``after``,
    placed by :func:`_placed` (at both occurrences of a repeated hour when the hour
    field is ``*``)."""
    after = utc(after)
    fields = _cron_fields(cron)
    runs = _placed(_cron_walls(fields, _earliest_wall(after, zone)), zone,
                   both_folds=len(fields.hours) == 24)
    for run in runs:
        if run > after or inclusive and run == after:
            yield run
            yield from runs
            return


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
    return next(_cron_runs(cron, zone, after, inclusive), None)


@next_after.register
def _crontab_next(schedule: celery_schedules.crontab, after: datetime) -> datetime | None:
    if overrides_estimate(schedule, celery_schedules.crontab):
        return celery_next(schedule, after)
    return _remembered("next", schedule, (after,), lambda: _kept_next(schedule, after))


def _kept_next(cron: celery_schedules.crontab, after: datetime) -> datetime | None:
    """:func:`cron_next` in the crontab's zone, kept on the crontab with the moment it
    was asked for: no run falls between that moment and the answer, so the answer is
    also the next run after any moment from the one asked up to it. Entries saved one
    after another on one crontab object (each counts as having run when built) ask for
    it from moments a few hundred microseconds apart, and walking the calendar was a
    third of such a save's own work. Kept with the fields and zone it was worked out in
    (worked out again should either be replaced)."""
    after, fields, zone = utc(after), _cron_fields(cron), cron.tz
    kept = cron.__dict__.get("_redbeat_next")
    if kept is not None and kept[0] is fields and kept[1] is zone and \
            kept[2] <= after < kept[3]:
        return kept[3]
    run = cron_next(cron, after, zone)
    if run is not None:
        cron.__dict__["_redbeat_next"] = (fields, zone, after, run)
    return run


@first_due.register
def _crontab_first(schedule: celery_schedules.crontab, now: datetime) -> datetime | None:
    if overrides_estimate(schedule, celery_schedules.crontab):
        return celery_first(schedule, now)
    return _remembered("first", schedule, (now,),
                       lambda: cron_next(schedule, now, schedule.tz, inclusive=True))


@slots_between.register
def _crontab_slots(schedule: celery_schedules.crontab, first: datetime, last: datetime,
                   limit: int = MAX_CATCH_UP_STEPS) -> Iterator[datetime]:
    if overrides_estimate(schedule, celery_schedules.crontab):
        return slots_between.dispatch(object)(schedule, first, last, limit)
    return _up_to(_cron_runs(schedule, schedule.tz, first, inclusive=True), last, limit)


@latest_slot.register
def _crontab_latest(schedule: celery_schedules.crontab, due: datetime,
                    now: datetime) -> datetime:
    if overrides_estimate(schedule, celery_schedules.crontab):
        return latest_slot.dispatch(object)(schedule, due, now)
    return _remembered("latest", schedule, (due, now),
                       lambda: _calendar_latest(schedule, due, now))


# -- clocked (one-off) ---------------------------------------------------------------


def _clocked_run(schedule: clocked) -> datetime:
    """A one-off's only slot: its time cut to the millisecond that names it (its task
    id, its score), as an interval's first run is. Rounded up, a ``run_at`` with a
    sub-millisecond part was named, and sent, a millisecond after it."""
    return to_millisecond(utc(schedule.run_at))


@next_after.register
def _clocked_next(schedule: clocked, after: datetime) -> datetime | None:
    run_at = _clocked_run(schedule)
    return run_at if run_at > utc(after) else None


@first_due.register
def _clocked_first(schedule: clocked, now: datetime) -> datetime | None:
    return _clocked_run(schedule)  # even if it passed while nobody ran: it runs once


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

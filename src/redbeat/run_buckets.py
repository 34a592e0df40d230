"""Every run of an entry in a time window, counted per bucket (pure): what the web
view's timeline draws.

The schedule's sorted set holds one run per entry, its next; the runs after it come
from the package's one next-send rule (``redbeat.nextrun.following_run``: the window,
the end time and the per-slot jitter applied), so the timeline counts what the tick
will send. Three rules keep the cost small and bounded:

- a plain interval without jitter runs at ``first + k * every`` up to its end time: an
  arithmetic progression, added to the counts in a constant number of steps when the
  bucket width is a multiple of the interval (every 10 s: 6 per minute) or the
  interval a multiple of the width (hourly: one bar in 60), and otherwise one step per
  bucket or per run, whichever is fewer;
- any other schedule is walked run by run, at most ``cap`` runs per entry, and once
  for all the entries with the same schedule, next slot and policy without jitter
  (a thousand identical crontabs have the same runs);
- walking stops after a budget of runs for the whole window (:class:`RunCounter`).

Times are integer microseconds from the epoch. A score is a send time rounded *up* to
the millisecond, so a send time ``t`` (µs) scores in ``[low, high)`` (whole ms) exactly
when ``t + SCORE_SHIFT`` is in ``[low, high)``: the progression is shifted once instead
of rounding every run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import schedules as celery_schedules

from . import decoder
from .nextrun import NextRun, following_run, placed
from .nexttime import next_after, overrides_estimate, utc
from .policy import EntryPolicy

SECOND = 1_000_000
#: A send time ``t`` (µs) has the score ceil(t / 1000) ms: in [low, high) iff
#: t + 999 is (low and high whole milliseconds).
SCORE_SHIFT = 999
#: Runs walked at most per entry (a day of a minutely crontab).
RUN_CAP = 1440
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros(moment: datetime) -> int:
    """An aware moment as integer µs from the epoch (exact, unlike a float timestamp)."""
    delta = utc(moment) - EPOCH
    return (delta.days * 86400 + delta.seconds) * SECOND + delta.microseconds


def score_micros(score: float) -> int:
    """A stored score (epoch seconds, whole ms) in µs, already rounded."""
    return round(score * 1000) * 1000


@dataclass
class Tally:
    """Runs per bucket of ``count`` buckets of ``width`` µs from ``start`` µs.

    Single runs go straight into ``counts``; progressions whose step divides the width
    go into a difference array (a constant per bucket over a range), and those whose
    step is a multiple of the width into one difference array per stride (one run
    every ``k`` buckets), resolved once by :meth:`totals`."""

    start: int
    width: int
    count: int
    counts: list[int] = field(init=False)
    _ranges: list[int] = field(init=False)
    _strides: dict[int, list[int]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.counts = [0] * self.count
        self._ranges = [0] * (self.count + 1)

    @property
    def end(self) -> int:
        return self.start + self.width * self.count

    def bucket(self, moment: int) -> int | None:
        if not self.start <= moment < self.end:
            return None
        return (moment - self.start) // self.width

    def add(self, moment: int, weight: int = 1) -> bool:
        """One run at ``moment`` (already score-shifted), ``weight`` times; whether it
        fell inside."""
        at = self.bucket(moment)
        if at is None:
            return False
        self.counts[at] += weight
        return True

    def add_every(self, first: int, step: int, last: int) -> int:
        """The runs ``first + k * step`` (k >= 0) up to ``last`` inclusive (all
        score-shifted), in a bounded number of steps whatever their number; returns how
        many fell inside."""
        last = min(last, self.end - 1)
        if step <= 0:
            return 0
        if first < self.start:  # move to the first run inside
            first += -(-(self.start - first) // step) * step
        if first > last:
            return 0
        runs = (last - first) // step + 1
        final = first + (runs - 1) * step
        low, high = (first - self.start) // self.width, (final - self.start) // self.width

        def upto(moment: int) -> int:  # runs at or before moment
            return 0 if moment < first else min((moment - first) // step + 1, runs)

        if self.width % step == 0:
            if low == high:
                self.counts[low] += runs
                return runs
            self.counts[low] += upto(self.start + (low + 1) * self.width - 1)
            self.counts[high] += runs - upto(self.start + high * self.width - 1)
            self._ranges[low + 1] += self.width // step
            self._ranges[high] -= self.width // step
        elif step % self.width == 0:
            stride = step // self.width
            marks = self._strides.setdefault(stride, [0] * (self.count + stride))
            marks[low] += 1
            marks[low + runs * stride] -= 1
        elif runs <= high - low + 1:
            for moment in range(first, final + 1, step):
                self.counts[(moment - self.start) // self.width] += 1
        else:
            for at in range(low, high + 1):
                bucket_start = self.start + at * self.width
                self.counts[at] += upto(bucket_start + self.width - 1) - upto(bucket_start - 1)
        return runs

    def totals(self) -> list[int]:
        totals = list(self.counts)
        level = 0
        for at in range(self.count):
            level += self._ranges[at]
            totals[at] += level
        for stride, marks in self._strides.items():
            running = [0] * stride
            for at in range(self.count):
                running[at % stride] += marks[at]
                totals[at] += running[at % stride]
        return totals


def plain_step(schedule: Any, policy: EntryPolicy) -> int | None:
    """The interval in µs when the runs after a slot are ``slot + k * every`` and sent
    at their due time: a Celery interval (not ``relative``, not a subclass with its own
    arithmetic) without jitter. None otherwise."""
    if policy.jitter or not isinstance(schedule, celery_schedules.schedule):
        return None
    if schedule.relative or overrides_estimate(schedule, celery_schedules.schedule):
        return None
    step = schedule.run_every // timedelta(microseconds=1)
    return step if step > 0 else None


@dataclass(frozen=True)
class Expansion:
    """What adding one entry's runs cost: runs counted, and whether it stopped at the cap
    with runs left in the window."""

    runs: int
    capped: bool


def add_runs(tally: Tally, first: NextRun, score: float, schedule: Any,
             policy: EntryPolicy, name: str, cap: int = RUN_CAP) -> Expansion:
    """Add an entry's runs in the tally's window: the first at its stored ``score``
    (where the tick reads it), the following ones by the next-send rule from the first
    slot (``first.due``)."""
    counted = int(tally.add(score_micros(score)))
    following = following_run(schedule, policy, name, first.due)
    if following is None:
        return Expansion(counted, False)
    step = plain_step(schedule, policy)
    if step is not None:
        return Expansion(counted + _add_progression(tally, following, step, policy), False)
    walked = walk(tally, following, schedule, policy, name, cap - counted)
    return Expansion(counted + walked.runs, walked.capped)


def _add_progression(tally: Tally, following: NextRun, step: int,
                     policy: EntryPolicy) -> int:
    end = None if policy.end_time is None else micros(policy.end_time) + SCORE_SHIFT
    last = tally.end - 1 if end is None else min(end, tally.end - 1)
    return tally.add_every(micros(following.due) + SCORE_SHIFT, step, last)


def walk(tally: Tally, run: NextRun | None, schedule: Any, policy: EntryPolicy, name: str,
         cap: int, weight: int = 1) -> Expansion:
    """Add ``run`` and the runs after it due before the window's end, ``cap`` at most,
    each ``weight`` times."""
    counted = 0
    while run is not None and micros(run.due) < tally.end:
        if counted >= cap:
            return Expansion(counted, True)
        counted += tally.add(micros(run.send_at) + SCORE_SHIFT, weight)
        run = following_run(schedule, policy, name, run.due)
    return Expansion(counted, False)


@dataclass
class RunCounter:
    """The runs of many entries in one window, at a bounded cost.

    An interval costs a few steps (:meth:`Tally.add_every`). A schedule that has to be
    walked is walked once for every entry with the same schedule, first slot and policy
    without jitter (a thousand identical crontabs: their runs are the same), then added
    with that weight; an entry with jitter is walked on its own. Walking stops after
    ``walk_budget`` runs in all: past that, an entry counts its first run only, and is
    counted in ``capped`` with those that reached the per-entry ``cap``."""

    tally: Tally
    cap: int = RUN_CAP
    walk_budget: int = 100_000
    walked: int = 0
    capped: int = 0
    _groups: dict[tuple[str, datetime, EntryPolicy], tuple[NextRun, Any, str, int]] = field(
        default_factory=dict)

    def add(self, first: NextRun, score: float, schedule: Any, policy: EntryPolicy,
            name: str) -> None:
        following = following_run(schedule, policy, name, first.due)  # may raise:
        self.tally.add(score_micros(score))  # then the caller counts the first once
        if following is None or micros(following.due) >= self.tally.end:
            return
        step = plain_step(schedule, policy)
        if step is not None:
            _add_progression(self.tally, following, step, policy)
            return
        key = None if policy.jitter else _schedule_key(schedule)
        if key is None:
            self._walk(following, schedule, policy, name, 1)
            return
        group = (key, following.due, policy)
        known = self._groups.get(group)
        weight = known[3] + 1 if known else 1
        self._groups[group] = (following, schedule, name, weight)

    def _walk(self, run: NextRun, schedule: Any, policy: EntryPolicy, name: str,
              weight: int) -> None:
        room = min(self.cap - 1, self.walk_budget - self.walked)
        walked = walk(self.tally, run, schedule, policy, name, max(room, 0), weight)
        self.walked += walked.runs
        if walked.capped:
            self.capped += weight

    def totals(self) -> list[int]:
        """The counts per bucket (walks the grouped entries first, once)."""
        for (_, _, policy), (run, schedule, name, weight) in self._groups.items():
            self._walk(run, schedule, policy, name, weight)
        self._groups.clear()
        return self.tally.totals()


def _schedule_key(schedule: Any) -> str | None:
    """The schedule as text (its type and fields), to tell identical ones apart; None
    for one the codec cannot write."""
    try:
        return f"{type(schedule).__module__}.{type(schedule).__qualname__}:" + \
            decoder.dumps(schedule)
    except (TypeError, ValueError, RecursionError):
        return None


def runs_between(first: NextRun, score: float, schedule: Any, policy: EntryPolicy,
                 name: str, low: float, high: float, cap: int = RUN_CAP) -> bool:
    """Whether the entry has a run scored in ``[low, high)`` (epoch seconds, whole ms):
    its stored ``score``, or a following run. An interval is decided by arithmetic, a
    calendar schedule (crontab, rrule, solar, ...) by its first slot after
    ``low - jitter`` (its runs do not depend on the previous one), so the answer costs
    the same however far ``low`` is; only what is left (a ``relative`` interval) is
    walked, ``cap`` runs at most."""
    low_us, high_us = score_micros(low), score_micros(high)
    if low_us <= score_micros(score) < high_us:
        return True
    window = Tally(low_us, high_us - low_us, 1)
    if isinstance(schedule, celery_schedules.schedule):  # its runs follow from the first
        add_runs(window, first, score, schedule, policy, name, cap)
        return window.totals()[0] > 0
    since = datetime.fromtimestamp(low, tz=timezone.utc) - timedelta(
        seconds=policy.jitter, microseconds=1)
    slot = next_after(schedule, max(since, first.due))
    run = placed(schedule, policy, name, slot) if slot is not None else None
    return walk(window, run, schedule, policy, name, cap).runs > 0


__all__ = ["RUN_CAP", "SECOND", "Expansion", "RunCounter", "Tally", "add_runs", "micros",
           "plain_step", "runs_between", "score_micros", "walk"]

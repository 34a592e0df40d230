"""What the simulated beat must have sent, worked out without any of redbeat's code.

Nothing here imports ``redbeat``: the runs of a schedule come from a walk of wall-clock
days with the daylight-saving rules of docs/semantics.md written out as offset
arithmetic, from dateutil's ``rrule`` iterated directly, from ``ephem`` for solar events,
and from plain arithmetic for intervals. Which of
those runs a beat sends follows from the moments it ticked: :func:`expected_dispatches`.

Where redbeat differs from Celery's own beat on purpose, the oracle follows redbeat's
documented rule and names the difference (:data:`DELIBERATE`), pointing at the table in
docs/semantics.md ("Differences from Celery the oracle names").

What it borrows, and why that is safe:

- From Celery, one thing: its crontab *field parser* (:meth:`Cron.fields` builds a
  ``celery.schedules.crontab`` only to read the sets ``minute``, ``hour``,
  ``day_of_week``, ``day_of_month`` and ``month_of_year`` it expands "*/25" or
  "mon-fri" into). Users hand redbeat Celery's crontab objects, already parsed, so
  Celery's parser is the definition of what a field means, not a part of redbeat under
  test; nothing of Celery's *time* arithmetic is used (when a set of minutes runs, in
  which zone, across which transition is all worked out here), and
  tests/test_simulator.py checks that where no transition is involved this walk gives
  exactly the runs Celery's own ``remaining_estimate`` steps through.
- From dateutil, the iteration of an rrule in naive wall time: what an RFC 5545 rule
  means is dateutil's (redbeat's rrule is dateutil's, resumed); placing its wall times
  on instants, which is where redbeat does its own work, is done here.
- From zoneinfo, the UTC offsets of the zone database (as :class:`Zone` samples them:
  where the offsets change, and so the gaps and repeated hours, is found by scanning,
  not by ``fold`` arithmetic); from ephem, the solar events.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from celery import schedules as celery_schedules
from dateutil import rrule as dateutil_rrule

UTC = timezone.utc
DOC = "docs/semantics.md, 'Differences from Celery the oracle names'"

#: The places where this oracle follows redbeat's documented rule instead of Celery's
#: arithmetic, by name; each is a row of the table in docs/semantics.md.
DELIBERATE = {
    "dst-walls": f"{DOC}: crontab DST gaps and folds follow the documented rule",
    "no-drift": f"{DOC}: an interval's next run follows from the slot, not the tick",
    "coalesced-catch-up": f"{DOC}: missed slots run once, as the latest slot (or bounded)",
    "window-anchor": f"{DOC}: an interval whose window opens runs at start_time",
    "whole-seconds": f"{DOC}: a whole-second interval's runs fall on whole seconds",
    "relative-fold": f"{DOC}: relative=True adds a duration, rounds on the zone's clock",
}


# -- zones: offsets and transitions, found by scanning -------------------------------


class Zone:
    """One IANA zone over a span: its UTC offsets and the instants they change at,
    found by sampling ``utcoffset`` every 15 minutes and bisecting to the second."""

    STEP = timedelta(minutes=15)

    def __init__(self, name: str, start: datetime, end: datetime) -> None:
        self.name = name
        self.tz = ZoneInfo(name)
        self.transitions: list[tuple[datetime, timedelta, timedelta]] = []
        moment = (start - timedelta(days=2)).replace(tzinfo=None, second=0, microsecond=0)
        stop = (end + timedelta(days=2)).replace(tzinfo=None)
        before = self.offset_at(moment)
        self.offsets = {before}
        while moment < stop:
            after = self.offset_at(moment + self.STEP)
            if after != before:
                low, high = 0, int(self.STEP.total_seconds())  # seconds past moment
                while high - low > 1:
                    middle = (low + high) // 2
                    if self.offset_at(moment + timedelta(seconds=middle)) == before:
                        low = middle
                    else:
                        high = middle
                self.transitions.append((moment + timedelta(seconds=high), before, after))
                self.offsets.add(after)
                before = after
            moment += self.STEP

    def offset_at(self, naive_utc: datetime) -> timedelta:
        offset = naive_utc.replace(tzinfo=UTC).astimezone(self.tz).utcoffset()
        assert offset is not None
        return offset

    def occurrences(self, wall: datetime) -> list[datetime]:
        """The UTC instants (naive) at which the clocks show ``wall``; none in a gap."""
        return sorted({wall - offset for offset in self.offsets
                       if self.offset_at(wall - offset) == offset})

    def instants(self, wall: datetime, both_folds: bool) -> list[datetime]:
        """The documented rule: a wall time in a gap runs once, shifted forward by the
        length of the gap; a repeated one runs at its first occurrence, or at both when
        ``both_folds`` (a crontab whose hour field is ``*``)."""
        found = self.occurrences(wall)
        if not found:
            for instant, before, after in self.transitions:
                if instant + before <= wall < instant + after:
                    # the same distance past the transition as the wall is past the gap
                    return [instant + (wall - (instant + before))]
            raise AssertionError(f"{wall} is in no gap of {self.name}")
        return found if both_folds else found[:1]

    def local(self, moment: datetime) -> datetime:
        """The naive wall time of an aware instant."""
        return moment.astimezone(self.tz).replace(tzinfo=None)


def aware(naive_utc: datetime) -> datetime:
    return naive_utc.replace(tzinfo=UTC)


# -- the runs of each kind of schedule ------------------------------------------------


def interval_runs(created: datetime, every: timedelta, end: datetime) -> list[datetime]:
    """A fixed grid from the creation: ``created + k * every`` (DELIBERATE no-drift),
    counted from the creation's whole second when ``every`` is whole seconds
    (DELIBERATE whole-seconds)."""
    whole = every >= timedelta(seconds=1) and every % timedelta(seconds=1) == timedelta(0)
    origin = created.replace(microsecond=0) if whole else created
    runs, k = [], 1
    while origin + k * every <= end:
        runs.append(origin + k * every)
        k += 1
    return runs


def relative_interval_runs(created: datetime, every: timedelta, end: datetime,
                           zone: Zone) -> list[datetime]:
    """``relative=True``: each run is the previous one plus ``every`` (a duration),
    rounded down as Celery's ``delta_resolution`` does (to the day, hour or minute for an
    interval of at least that size; else to the second) on the app zone's clock: a
    chain, also across downtime. Rounded as an instant, so inside a repeated hour it
    stays in that pass, and a rounding that would not pass the previous run (a day
    interval from midnight on a 25-hour day) takes the next boundary instead
    (DELIBERATE relative-fold)."""
    size = every.total_seconds()
    runs, previous = [], created
    while True:
        moment = _round_down(previous + every, size, zone, previous)
        if moment > end:
            return runs
        runs.append(moment)
        previous = moment


def _round_down(moment: datetime, size: float, zone: Zone, previous: datetime) -> datetime:
    """The latest boundary (midnight, hour, minute or second of the zone's clock, placed
    by the DST rules) at or before ``moment`` and after ``previous``, else the first
    boundary after ``previous``."""
    wall = zone.local(moment)
    if size >= 86400:
        floor, unit = datetime(wall.year, wall.month, wall.day), timedelta(days=1)
    elif size >= 3600:
        floor, unit = wall.replace(minute=0, second=0, microsecond=0), timedelta(hours=1)
    elif size >= 60:
        floor, unit = wall.replace(second=0, microsecond=0), timedelta(minutes=1)
    else:
        floor, unit = wall.replace(microsecond=0), timedelta(seconds=1)
    placed = [aware(instant) for instant in zone.instants(floor, both_folds=True)]
    inside = [instant for instant in placed if previous < instant <= moment]
    if inside:
        return max(inside)
    later = floor + unit
    while True:
        placed = [aware(instant) for instant in zone.instants(later, both_folds=True)]
        after = [instant for instant in placed if instant > previous]
        if after:
            return min(after)
        later += unit


@dataclass(frozen=True)
class Cron:
    minute: str | int = "*"
    hour: str | int = "*"
    day_of_week: str | int = "*"
    day_of_month: str | int = "*"
    month_of_year: str | int = "*"

    def fields(self) -> celery_schedules.crontab:
        """Celery's own parser expands the fields into sets of numbers."""
        return celery_schedules.crontab(self.minute, self.hour, self.day_of_week,
                                        self.day_of_month, self.month_of_year)


def cron_runs(cron: Cron, zone: Zone, after: datetime, end: datetime) -> list[datetime]:
    """Walk every local day of the span; on a day matching month, day of month *and*
    weekday (Celery's rule), every matching wall minute becomes its instants."""
    fields = cron.fields()
    hours, minutes = sorted(fields.hour), sorted(fields.minute)
    both_folds = len(hours) == 24
    found: set[datetime] = set()
    day: date = zone.local(after).date() - timedelta(days=1)
    last_day = zone.local(end).date() + timedelta(days=1)
    while day <= last_day:
        if (day.month in fields.month_of_year and day.day in fields.day_of_month
                and day.isoweekday() % 7 in fields.day_of_week):
            for hour in hours:
                for minute in minutes:
                    wall = datetime(day.year, day.month, day.day, hour, minute)
                    found.update(zone.instants(wall, both_folds))
        day += timedelta(days=1)
    low, high = after.replace(tzinfo=None), end.replace(tzinfo=None)
    return [aware(instant) for instant in sorted(found) if low < instant <= high]


def rrule_runs(freq: str, dtstart: datetime, zone: Zone, after: datetime, end: datetime,
               **rules: object) -> list[datetime]:
    """dateutil's own iteration of the rule in naive wall time (``dtstart``/``until``
    are walls in the zone), each wall then placed by the DST rule (first occurrence)."""
    rule = dateutil_rrule.rrule(getattr(dateutil_rrule, freq), dtstart=dtstart, **rules)
    low, high = after.replace(tzinfo=None), end.replace(tzinfo=None)
    # a wall a day before ``after`` runs before it, whatever the zone did (shifts are
    # hours): only the walls from there on are placed
    first_wall = zone.local(after) - timedelta(days=1)
    last_wall = zone.local(end) + timedelta(days=1)
    found: set[datetime] = set()
    for wall in rule:
        if wall > last_wall:
            break
        if wall >= first_wall:
            found.update(zone.instants(wall, both_folds=False))
    return [aware(instant) for instant in sorted(found) if low < instant <= high]


def solar_runs(event: str, lat: float, lon: float, after: datetime,
               end: datetime) -> list[datetime]:
    """ephem directly: each event after the previous one (sunrise and sunset at the
    upper limb with refraction, as the almanacs and Celery's solar define them)."""
    import ephem

    methods = {"sunrise": ("next_rising", "-0:34", False),
               "sunset": ("next_setting", "-0:34", False),
               "solar_noon": ("next_transit", "0", False),
               "dawn_civil": ("next_rising", "-6", True),
               "dusk_civil": ("next_setting", "-6", True)}
    method, horizon, center = methods[event]
    observer = ephem.Observer()
    observer.lat, observer.lon, observer.elev = str(lat), str(lon), 0
    observer.horizon, observer.pressure = horizon, 0
    runs, moment = [], after
    while True:
        start = ephem.Date(moment.replace(tzinfo=None))
        if method == "next_transit":
            found = observer.next_transit(ephem.Sun(), start=start)
        elif center:
            found = getattr(observer, method)(ephem.Sun(), start=start, use_center=True)
        else:
            found = getattr(observer, method)(ephem.Sun(), start=start)
        moment = aware(found.datetime())
        if moment > end:
            return runs
        runs.append(moment)
        moment += timedelta(minutes=1)


def one_off_runs(run_at: datetime, start: datetime | None,
                 end: datetime | None) -> list[datetime]:
    """A one-off's one slot: its time to the millisecond that names it (cut: a slot is
    named by its millisecond, and a one-off is not sent after its time); before the
    window's start, when the window opens (rounded up to its millisecond: never before
    it); none after the window's end."""
    slot = run_at.replace(microsecond=run_at.microsecond // 1000 * 1000)
    if start is not None and slot < start:
        slot = start + timedelta(microseconds=-start.microsecond % 1000)
    return [] if end is not None and slot > end else [slot]


def window(runs: Sequence[datetime], start: datetime | None,
           end: datetime | None) -> list[datetime]:
    """Only the runs inside the active window (both ends included)."""
    return [run for run in runs
            if (start is None or run >= start) and (end is None or run <= end)]


# -- what a beat that ticked at these moments must have sent --------------------------


@dataclass(frozen=True)
class Rules:
    """An entry's catch-up rules (DELIBERATE coalesced-catch-up)."""

    coalesce: bool = True
    max_catch_up: int = 10
    grace: float | None = None


def expected_dispatches(runs: Sequence[datetime], ticks: Iterable[float],
                        rules: Rules = Rules()) -> list[tuple[float, datetime]]:
    """(tick, slot) for every slot sent: at each tick, the slots come due since the last
    one sent run once (the latest), or each up to ``max_catch_up`` (the latest ones);
    a slot sent later than ``grace`` seconds after it was due is skipped instead."""
    stamps = [run.timestamp() for run in runs]
    sent: list[tuple[float, datetime]] = []
    position = 0
    for tick in ticks:
        if position >= len(runs) or stamps[position] > tick:
            continue
        through = bisect_right(stamps, tick)
        due = range(position, through)
        chosen = due[-1:] if rules.coalesce else due[-rules.max_catch_up:]
        sent += [(tick, runs[i]) for i in chosen
                 if rules.grace is None or tick - stamps[i] <= rules.grace]
        position = through
    return sent


def jitter_problems(runs: Sequence[datetime], sent: Sequence[tuple[float, datetime]],
                    jitter: float, lateness: float, up: Sequence[tuple[float, float]],
                    end: float) -> list[str]:
    """A jittered entry: every slot that fell while beat was up (with room for its
    jitter and the tick's lateness) is sent once, no earlier than due and at most
    ``jitter + lateness`` later; nothing else is sent."""
    problems: list[str] = []
    by_slot: dict[float, list[float]] = {}
    for tick, slot in sent:
        by_slot.setdefault(slot.timestamp(), []).append(tick)
    known = {run.timestamp() for run in runs}
    for slot, ticks in sorted(by_slot.items()):
        if slot not in known:
            problems.append(f"extra: sent slot {aware_str(slot)} that is no run")
        if len(ticks) > 1:
            problems.append(f"duplicate: slot {aware_str(slot)} sent {len(ticks)} times")
        if ticks[0] < slot:
            problems.append(f"early: slot {aware_str(slot)} sent at {aware_str(ticks[0])}")
    starts = [a for a, _ in up]
    for run in runs:
        slot = run.timestamp()
        latest = slot + jitter + lateness
        if latest > end:
            break
        i = bisect_left(starts, slot + 1e-9) - 1
        if i < 0 or up[i][1] < latest:
            continue  # beat was down around this slot: a catch-up, not a jitter question
        ticks = by_slot.get(slot)
        if not ticks:
            problems.append(f"missing: slot {aware_str(slot)} never sent")
        elif ticks[0] > latest:
            problems.append(f"late: slot {aware_str(slot)} sent {ticks[0] - slot:.3f} s late "
                            f"(jitter {jitter} + lateness {lateness})")
    return problems


def aware_str(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, tz=UTC).isoformat()

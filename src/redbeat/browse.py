"""Pages of entries in a chosen order, each read in a bounded number of round trips
whatever the schedule's size: the one listing engine, behind the web view, ``redbeat
list`` and Python (:func:`read_page` for one page, :func:`iter_matches` for every match
from a position on).

An order is a sorted set Redis keeps ordered: the schedule itself for "next run", and a
short-lived copy of its members for "name" and "last run" (rebuilt at most every
``VIEW_REFRESH`` seconds, never per page). The order is cut into segments of ranks
(the schedule's scheduled band, then its parked band), and a page is read from a
position in them: a rank window costs O(log N + page) in Redis. Filters the order
cannot answer (a state, a task, a name) read members a chunk at a time and keep those
that pass, stopping at a full page or after ``BUDGET`` members, and say where to resume:
a page never reads the whole schedule, however rare its matches. A position is a place
in the order, not a count of matches, so a page is resumed from where the last stopped.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone, tzinfo
from fnmatch import fnmatchcase
from typing import Any

from celery import Celery

from . import labels as label_rules
from .entry import InvalidEntry, RedBeatSchedulerEntry, parse_meta
from .keys import KeyLayout
from .manage import EntryInfo, entry_info
from .nextrun import NextRun, from_score, next_run
from .run_buckets import (
    SECOND,
    RunCounter,
    Tally,
    plain_step,
    runs_between,
    score_micros,
)
from .runtime import store_for
from .settings import ensure_conf
from .store import ScheduleStore

ORDERS = {"next": "next run", "name": "name", "last": "last run"}
#: The states a listing filters on (``EntryInfo.shown_state``); ``unscheduled`` (a
#: member gone from the schedule while a name or last-run order still holds it) is
#: filtered on by the CLI only.
STATES = ("enabled", "disabled", "quarantined", "finished", "failing")
ALL_STATES = (*STATES, "unscheduled")
PAGE_SIZE = 50
#: Members read per round trip while a filter looks for matches, and how many a page
#: examines at most before it stops and offers to go on: a state or task filter reads
#: each member's entry; a name filter alone is matched inside Redis (view_match.lua,
#: a few milliseconds per 10,000 names), so it goes much further.
CHUNK, BUDGET = 250, 5_000
NAME_CHUNK, NAME_BUDGET = 10_000, 200_000
#: Seconds a name or last-run order lives in Redis, and the age at which it is rebuilt.
VIEW_LIFETIME, VIEW_REFRESH = 300, 30


@dataclass(frozen=True)
class Query:
    order: str = "next"
    state: str = ""
    #: substrings of the name (case-insensitive for ASCII letters: matched in Redis) and
    #: of the task (case-insensitive)
    name: str = ""
    task: str = ""
    #: glob patterns (fnmatch, case-sensitive), the CLI's ``--pattern`` (matched on the
    #: names before any entry is read) and ``--task``
    pattern: str = ""
    task_pattern: str = ""
    #: only entries carrying every one of these labels (redbeat.labels)
    labels: tuple[str, ...] = ()
    #: only entries whose next run is in [due_from, due_to) (a bar of the timeline)
    due_from: float | None = None
    due_to: float | None = None
    #: with a due band: the entries with any run in it (by the next-send rule), not
    #: only those next due there; read from the start of the current minute on
    runs: bool = False
    #: position in the order to read from (what a previous page returned)
    start: int = 0
    size: int = PAGE_SIZE

    @property
    def filtered(self) -> bool:
        return bool(self.state or self.name or self.task or self.pattern or self.task_pattern
                    or self.labels or self.runs_band)

    @property
    def runs_band(self) -> bool:
        return self.runs and self.due_from is not None and self.due_to is not None

    @property
    def reads_entries(self) -> bool:
        """Whether the filter needs each member's entry (not only its name)."""
        return bool(self.state or self.task or self.task_pattern or self.labels
                    or self.runs_band)

    @property
    def chunk_and_budget(self) -> tuple[int, int]:
        if self.reads_entries or not self.filtered:
            return CHUNK, BUDGET
        return NAME_CHUNK, NAME_BUDGET

    def passes(self, info: EntryInfo) -> bool:
        """Whether the entry passes the filters read from its hash (the name filters
        were applied before it was read)."""
        if self.state and info.shown_state != self.state:
            return False
        if self.labels and not label_rules.selected(info.labels, self.labels):
            return False
        if self.task or self.task_pattern:
            task = info.entry.task if info.entry is not None else None
            if task is None:
                return False
            if self.task and self.task.casefold() not in str(task).casefold():
                return False
            if self.task_pattern and not fnmatchcase(str(task), self.task_pattern):
                return False
        return True


@dataclass(frozen=True)
class Segment:
    """Ranks ``low`` .. ``high - 1`` of the sorted set ``index``, read backwards when
    ``reverse`` (newest first, without ZREVRANGE, which the documented ACL lacks)."""

    index: str
    low: int
    high: int
    reverse: bool = False

    @property
    def size(self) -> int:
        return max(self.high - self.low, 0)

    def ranks(self, offset: int, count: int) -> tuple[int, int]:
        """The inclusive rank range of ``count`` members from ``offset`` in this segment's
        reading direction (to be reversed after the read when ``reverse``)."""
        count = min(count, self.size - offset)
        if self.reverse:
            return self.high - offset - count, self.high - offset - 1
        return self.low + offset, self.low + offset + count - 1


def segments(query: Query, keys: KeyLayout, total: int, parked: int,
             band: tuple[int, int] | None = None) -> list[Segment]:
    """Where the query's entries are, in its order (pure). ``total`` is the size of the
    order's set, ``parked`` how many schedule members score below 0 (finished and
    quarantined entries, and entries disabled by earlier releases, sort first in the
    schedule; "next run" shows them last), ``band`` the schedule ranks of a due-time range."""
    if band is not None:
        return [Segment(keys.schedule, *band)]
    if query.state == "failing":
        return [Segment(keys.failing, 0, total, reverse=True)]  # newest failure first
    if query.order == "name":
        return [Segment(keys.view_by_name, 0, total)]
    if query.order == "last":
        return [Segment(keys.view_by_last_run, 0, total, reverse=True)]
    scheduled, held_back = Segment(keys.schedule, parked, total), Segment(keys.schedule, 0,
                                                                          parked)
    # where each state can be: finished and enabled by definition (a score below 0, or
    # not); quarantined mostly parked, but an entry broken by another client waits with
    # its score until the leader parks it; disabled ones keep a due score (as in 2.4.2),
    # except those parked by earlier releases: read second
    if query.state == "finished":
        return [held_back]
    if query.state == "enabled":
        return [scheduled]
    if query.state in ("disabled", "quarantined"):
        return [held_back, scheduled]
    return [scheduled, held_back]


def locate(parts: Sequence[Segment], position: int) -> tuple[Segment, int] | None:
    """The segment holding ``position`` and the offset in it; None past the end."""
    for part in parts:
        if position < part.size:
            return part, position
        position -= part.size
    return None


@dataclass
class Page:
    query: Query
    rows: list[EntryInfo]
    #: members in the order (all pages), and where the next page starts (None: last page)
    total: int
    next_start: int | None
    #: members this page examined, and whether it stopped at the budget before a full page
    examined: int = 0
    budget_spent: bool = False
    #: seconds since the order was built (None: the schedule itself, always current)
    view_age: float | None = None
    notes: list[str] = field(default_factory=list)
    #: for each row, the position just after it in the order (where to resume)
    ends: list[int] = field(default_factory=list)


def last_run_score(key: str, meta: str | None) -> float:
    """An entry's place in the last-run order: when it last ran, 0 when it never did
    (or its meta cannot be read: that is shown on its own page)."""
    try:
        last_run_at, count = parse_meta(key, meta)
    except (InvalidEntry, ValueError):
        return 0.0
    return last_run_at.timestamp() if count and last_run_at is not None else 0.0


def _fresh_view(store: ScheduleStore, order: str) -> float:
    """Build the name or last-run order when it is missing or older than VIEW_REFRESH;
    returns its age."""
    index = store.keys.view_by_name if order == "name" else store.keys.view_by_last_run
    age = store.view_age(index, VIEW_LIFETIME)
    if age is not None and age <= VIEW_REFRESH:
        return age
    if order == "name":
        store.build_name_view(VIEW_LIFETIME)
    else:
        store.build_last_run_view(last_run_score, VIEW_LIFETIME)
    return 0.0


def _plan(store: ScheduleStore, query: Query,
          now: float) -> tuple[list[Segment], float | None]:
    keys = store.keys
    if query.runs_band and query.due_from is not None and query.due_to is not None:
        # an entry next due at any time from this minute on may run in the band again
        low = min(query.due_from, now - now % 60)
        return segments(query, keys, 0, 0, band=store.band_ranks(low, query.due_to)), None
    if query.due_from is not None or query.due_to is not None:
        low = query.due_from if query.due_from is not None else 0.0
        high = query.due_to if query.due_to is not None else float("inf")
        return segments(query, keys, 0, 0, band=store.band_ranks(low, high)), None
    age = None
    if query.state == "failing":
        index = keys.failing
    elif query.order in ("name", "last"):
        age = _fresh_view(store, query.order)
        index = keys.view_by_name if query.order == "name" else keys.view_by_last_run
    else:
        index = keys.schedule
    total, parked = store.view_counts(index, 0.0)
    return segments(query, keys, total, parked), age


def read_page(app: Celery, query: Query, now: float | None = None) -> Page:
    """One page of entries for ``query`` (see the module's docstring for the cost)."""
    store = store_for(app)
    keys = ensure_conf(app).keys
    now = time.time() if now is None else now
    parts, age = _plan(store, query, now)
    total = sum(part.size for part in parts)
    page = Page(query, [], total, None, view_age=age)
    position = max(query.start, 0)
    chunk, budget = query.chunk_and_budget
    while len(page.rows) < query.size and position < total:
        if page.examined >= budget:
            page.budget_spent = True
            break
        found = locate(parts, position)
        if found is None:
            break
        part, offset = found
        want = chunk if query.filtered else query.size - len(page.rows)
        low, high = part.ranks(offset, want)
        candidates = _candidates(store, query, part, low, high, position - offset)
        position = _take(app, store, keys, query, page, candidates, position,
                         high - low + 1, now)
    page.next_start = position if position < total else None
    return page


def iter_matches(app: Celery, query: Query, now: float | None = None
                 ) -> Iterator[tuple[EntryInfo, int]]:
    """Every entry matching ``query`` from its ``start`` on, in its order, each with the
    position just after it (where a listing that stops there resumes): pages of
    ``query.size`` read one after another, a page that stopped at its budget resumed,
    so memory is bounded by one page whatever the number of matches."""
    while True:
        page = read_page(app, query, now)
        yield from zip(page.rows, page.ends, strict=True)
        if page.next_start is None:
            return
        query = replace(query, start=page.next_start)


def _candidates(store: ScheduleStore, query: Query, part: Segment, low: int, high: int,
                base: int) -> list[tuple[int, str]]:
    """The members of ranks ``low`` .. ``high`` of ``part`` worth reading, with their
    positions in the order (``base``: the position of the segment's first member): all
    of them, or, with a name filter, only those whose name matches, found in Redis."""
    if query.name:
        ranked = store.match_names(part.index, low, high, query.name)
    else:
        ranked = [(rank, member) for rank, (member, _) in enumerate(
            store.window(part.index, low, high), low)]
    if query.pattern:
        ranked = [(rank, member) for rank, member in ranked
                  if fnmatchcase(store.keys.name_of(member), query.pattern)]
    at = (lambda rank: base + part.high - 1 - rank) if part.reverse else (
        lambda rank: base + rank - part.low)
    return sorted((at(rank), member) for rank, member in ranked)


def _take(app: Celery, store: ScheduleStore, keys: KeyLayout, query: Query, page: Page,
          candidates: list[tuple[int, str]], position: int, window: int,
          now: float) -> int:
    """Add the candidates that pass the query to the page, up to a full page; returns
    the position after the last member examined (the window's end, unless the page
    filled before it)."""
    candidates = [(at, key) for at, key in candidates if keys.is_entry_key(key)]
    fetched = store.view_rows([key for _, key in candidates])
    for (at, key), (fields, score, static) in zip(candidates, fetched, strict=True):
        if not fields:
            continue  # deleted since the order was read, or a finished entry that expired
        name = keys.name_of(key)
        info = entry_info(app, key, score, fields, {name} if static else set())
        if query.passes(info) and (not query.runs_band or has_run(
                info, query.due_from or 0.0, query.due_to or 0.0, now)):
            page.rows.append(info)
            page.ends.append(at + 1)
            if len(page.rows) == query.size:
                page.examined += at - position + 1
                return at + 1
    page.examined += window
    return position + window


# -- one entry -------------------------------------------------------------------------


def evaluation_zone(entry: RedBeatSchedulerEntry) -> tzinfo:
    """The zone the entry's schedule is evaluated in: its own (a zoned crontab or
    rrule), else the app's."""
    schedule = entry.schedule
    for attribute in ("zone", "tz"):
        try:
            zone = getattr(schedule, attribute, None)
        except Exception:  # a schedule without an app to ask
            zone = None
        if isinstance(zone, tzinfo):
            return zone
    return entry.app.timezone if entry.app is not None else timezone.utc


def next_runs(entry: RedBeatSchedulerEntry, count: int = 10,
              score: float | None = None) -> tuple[list[datetime], str]:
    """The next ``count`` run times in the entry's zone, and why the list is short when
    it is (no more runs, or a schedule whose next run cannot be computed); ``score`` is
    the stored one (see ``RedBeatSchedulerEntry.upcoming``)."""
    zone = evaluation_zone(entry)
    runs: list[datetime] = []
    try:
        runs = [run.due.astimezone(zone) for run in entry.upcoming(count, score)]
    except (OverflowError, ValueError) as exc:
        return runs, f"cannot be computed: {exc}"
    return runs, "" if len(runs) == count else "no more runs"


# -- the timeline ----------------------------------------------------------------------
#: Entries whose runs one computation expands (past it, an entry counts once, at its
#: next run), members read per round trip, and how long the figures are kept in Redis
#: and served before they are computed again.
TIMELINE_BUDGET, TIMELINE_CHUNK = 20_000, 1_000
TIMELINE_LIFETIME, TIMELINE_REFRESH = 300, 30


#: An entry that runs at least this often (a plain interval of at most a minute) is the
#: schedule's steady load: counted apart, so it does not drown the other entries' runs.
FREQUENT_STEP = 60 * SECOND


@dataclass(frozen=True)
class Bucket:
    start: float
    end: float
    #: every run due in the bucket, and those of them from frequent entries
    count: int
    steady: int = 0

    @property
    def bursts(self) -> int:
        """The runs that are not the steady load: what the chart's bars show."""
        return self.count - self.steady


@dataclass
class Timeline:
    """Runs due per bucket, and how they were counted."""

    buckets: list[Bucket]
    computed_at: float
    #: entries whose every run in the window was counted
    expanded: int = 0
    #: entries past the budget, counted once, at their next run
    counted_once: int = 0
    #: entries that stopped at the per-entry cap of runs (RUN_CAP)
    capped: int = 0
    #: entries that could not be decoded, counted once at their score
    unreadable: int = 0
    #: seconds the computation took, and seconds since it ran (when read back)
    seconds: float = 0.0
    age: float = 0.0
    #: entries that run every minute or more often (FREQUENT_STEP), a few of their names
    frequent: int = 0
    frequent_names: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return bool(self.counted_once or self.capped)

    def to_json(self) -> str:
        return json.dumps({
            "start": self.buckets[0].start if self.buckets else 0.0,
            "width": self.buckets[0].end - self.buckets[0].start if self.buckets else 60.0,
            "counts": [bucket.count for bucket in self.buckets],
            "steady": [bucket.steady for bucket in self.buckets],
            "computed_at": self.computed_at, "expanded": self.expanded,
            "counted_once": self.counted_once, "capped": self.capped,
            "unreadable": self.unreadable, "seconds": self.seconds,
            "frequent": self.frequent, "frequent_names": self.frequent_names})

    @classmethod
    def from_json(cls, text: str, age: float) -> Timeline:
        """Raises ValueError (KeyError, TypeError) for a text this module did not write
        (another process keeps it: a page must not fail on what it left there)."""
        try:
            data = json.loads(text)
        except RecursionError as exc:
            raise ValueError("nested too deep") from exc
        start, width = float(data["start"]), float(data["width"])
        if not (math.isfinite(start) and 0 < width <= 3600 and start > 0
                and len(data["counts"]) <= 2 * 24 * 60):
            raise ValueError(f"not a timeline: start {start}, width {width}")
        steady = data.get("steady") or [0] * len(data["counts"])  # an older release's
        buckets = [Bucket(start + width * at, start + width * (at + 1), int(count),
                          int(steady[at]))
                   for at, count in enumerate(data["counts"])]
        return cls(buckets, float(data["computed_at"]), int(data["expanded"]),
                   int(data["counted_once"]), int(data["capped"]), int(data["unreadable"]),
                   float(data["seconds"]), age, int(data.get("frequent", 0)),
                   [str(name) for name in data.get("frequent_names", [])][:5])


def first_run(entry: RedBeatSchedulerEntry, score: float, now: float) -> NextRun | None:
    """The slot the stored ``score`` stands for, by the one next-send rule."""
    return next_run(entry.schedule, entry.policy, entry.name, entry.last_run_at,
                    from_score(now), score)


def compute_timeline(app: Celery, now: float, minutes: int = 24 * 60, width: int = 60,
                     budget: int | None = None, chunk: int = TIMELINE_CHUNK) -> Timeline:
    """Every run due in each ``width``-second bucket from the start of the current
    minute on (redbeat.run_buckets): the entries next due in the window are read in
    score order, ``chunk`` per round trip, and the first ``budget`` of them expanded;
    the rest count once, at their next run (one round trip of a ZCOUNT per bucket)."""
    started = time.perf_counter()
    budget = TIMELINE_BUDGET if budget is None else budget
    store = store_for(app)
    keys = ensure_conf(app).keys
    first = int(now // width) * width
    end = first + width * minutes
    runs = RunCounter(Tally(first * SECOND, width * SECOND, minutes))
    steady = RunCounter(Tally(first * SECOND, width * SECOND, minutes))
    firsts = Tally(first * SECOND, width * SECOND, minutes)
    timeline = Timeline([], now)
    cursor, skip, more = float(first), 0, True
    while more and timeline.expanded < budget:
        want = min(chunk, budget - timeline.expanded)
        rows = store.band_entries(cursor, float(end), skip, want)
        more = len(rows) == want
        for key, score, definition, meta, policy in rows:
            timeline.expanded += 1
            firsts.add(score_micros(score))
            if keys.is_entry_key(key):
                _expand(app, timeline, (runs, steady), key, score,
                        (definition, meta, policy), now)
        if rows:
            last = rows[-1][1]
            same = sum(1 for row in rows if row[1] == last)
            skip, cursor = (skip + same if last == cursor else same), last
    steady_counts = steady.totals()
    counts = [own + frequent for own, frequent in zip(runs.totals(), steady_counts,
                                                      strict=True)]
    timeline.capped = runs.capped + steady.capped
    if more:  # the budget ran out: the rest count once, at their next run
        edges = [float(first + width * at) for at in range(minutes + 1)]
        everyone = store.due_counts(edges)
        mine = firsts.totals()
        for at in range(minutes):
            rest = max(everyone[at] - mine[at], 0)
            counts[at] += rest
            timeline.counted_once += rest
    timeline.buckets = [Bucket(first + width * at, first + width * (at + 1), count,
                               steady_counts[at]) for at, count in enumerate(counts)]
    timeline.seconds = time.perf_counter() - started
    return timeline


def _expand(app: Celery, timeline: Timeline, counters: tuple[RunCounter, RunCounter],
            key: str, score: float, fields: tuple[str | None, str | None, str | None],
            now: float) -> None:
    """Count one entry's runs, in the steady counter when it runs every minute or more
    often; one it cannot decode, or whose schedule fails to say when it runs, counts
    once, at its score (the page says how many)."""
    runs, steady = counters
    definition, meta, policy = fields
    try:
        entry = RedBeatSchedulerEntry.decode(app, key, definition, meta, policy=policy)
        slot = first_run(entry, score, now)
        if slot is not None:
            step = plain_step(entry.schedule, entry.policy)
            if step is not None and step <= FREQUENT_STEP:
                runs = steady
                timeline.frequent += 1
                if len(timeline.frequent_names) < 5:
                    timeline.frequent_names.append(entry.name)
            runs.add(slot, score, entry.schedule, entry.policy, entry.name)
            return
    except Exception:  # InvalidEntry, or a schedule class of the app's own that fails
        timeline.unreadable += 1
    runs.tally.add(score_micros(score))


def timeline(app: Celery, now: float) -> Timeline:
    """The timeline from the start of the current minute, as last computed when that
    is at most TIMELINE_REFRESH seconds ago (kept in Redis, shared by every web
    process), else computed now and kept."""
    store = store_for(app)
    key = ensure_conf(app).keys.view_timeline
    text, ttl = store.read_cached(key)
    if text is not None and ttl > 0:
        age = TIMELINE_LIFETIME - ttl / 1000
        if age <= TIMELINE_REFRESH:
            try:
                return Timeline.from_json(text, age)
            except (ValueError, KeyError, TypeError, OverflowError):
                pass  # not what this module writes: computed again below
    computed = compute_timeline(app, now)
    store.write_cached(key, computed.to_json(), TIMELINE_LIFETIME)
    return computed


def has_run(info: EntryInfo, low: float, high: float, now: float) -> bool:
    """Whether the entry has a run scored in ``[low, high)``: its next, or one after it
    by the next-send rule (an entry that cannot be decoded: its next only)."""
    score = info.score
    if score is None or score <= 0:
        return False
    entry = info.entry
    try:
        slot = first_run(entry, score, now) if entry is not None else None
        if entry is not None and slot is not None:
            return runs_between(slot, score, entry.schedule, entry.policy, entry.name,
                                low, high)
    except Exception:  # a schedule class of the app's own that fails
        pass
    return low <= score < high


# -- held slots ------------------------------------------------------------------------


@dataclass(frozen=True)
class HeldSlot:
    task_id: str
    name: str | None
    due: datetime | None
    reason: str


def held_slots(app: Celery, limit: int = 20) -> tuple[int, list[HeldSlot]]:
    """How many slots are held (claimed or asked for, not yet confirmed sent) and up to
    ``limit`` of them, read loosely: a record that is not what redbeat writes is still
    listed, with what could be read."""
    keys = ensure_conf(app).keys
    size, sample = store_for(app).held_sample(limit)
    slots = []
    for task_id, message in sorted(sample.items()):
        record: Any
        try:
            record = json.loads(message)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict):
            record = {}
        key, due = record.get("key"), record.get("due")
        try:
            moment = (datetime.fromtimestamp(float(due), tz=timezone.utc)
                      if due is not None else None)
        except (TypeError, ValueError, OverflowError, OSError):
            moment = None
        slots.append(HeldSlot(task_id, keys.name_of(key) if isinstance(key, str) else None,
                              moment, str(record.get("reason", "?"))))
    return size, slots


def minute_label(moment: float, zone: tzinfo) -> str:
    return datetime.fromtimestamp(moment, tz=zone).strftime("%H:%M")


__all__ = ["ALL_STATES", "BUDGET", "NAME_BUDGET", "ORDERS", "PAGE_SIZE", "STATES",
           "TIMELINE_BUDGET", "Bucket", "HeldSlot", "Page", "Query", "Segment", "Timeline",
           "compute_timeline", "evaluation_zone", "has_run", "held_slots", "iter_matches",
           "last_run_score", "locate", "next_runs", "read_page", "segments", "timeline"]

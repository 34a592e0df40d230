"""Pages of entries in a chosen order, each read in a bounded number of round trips
whatever the schedule's size: what the web view shows.

An order is a sorted set Redis keeps ordered: the schedule itself for "next run", and a
short-lived copy of its members for "name" and "last run" (rebuilt at most every
``VIEW_REFRESH`` seconds, never per page). The order is cut into segments of ranks
(the schedule's scheduled band, then its parked band), and a page is read from a
position in them: a rank window costs O(log N + page) in Redis. Filters the order
cannot answer (a state, a task, a name) read members a chunk at a time and keep those
that pass, stopping at a full page or after ``BUDGET`` members, and say where to resume:
a page never reads the whole schedule, however rare its matches.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Any

from celery import Celery

from .entry import InvalidEntry, RedBeatSchedulerEntry, parse_meta, store_for
from .keys import KeyLayout
from .manage import EntryInfo, entry_info
from .settings import ensure_conf
from .store import ScheduleStore

ORDERS = {"next": "next run", "name": "name", "last": "last run"}
STATES = ("enabled", "disabled", "quarantined", "finished", "failing")
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
    #: only entries whose next run is in [due_from, due_to) (a bar of the timeline)
    due_from: float | None = None
    due_to: float | None = None
    #: position in the order to read from (what a previous page returned)
    start: int = 0
    size: int = PAGE_SIZE

    @property
    def filtered(self) -> bool:
        return bool(self.state or self.name or self.task)

    @property
    def reads_entries(self) -> bool:
        """Whether the filter needs each member's entry (not only its name)."""
        return bool(self.state or self.task)

    @property
    def chunk_and_budget(self) -> tuple[int, int]:
        if self.reads_entries or not self.filtered:
            return CHUNK, BUDGET
        return NAME_CHUNK, NAME_BUDGET

    def passes(self, info: EntryInfo) -> bool:
        if self.state and info.shown_state != self.state:
            return False
        if self.task:
            task = info.entry.task if info.entry is not None else None
            return task is not None and self.task.casefold() in str(task).casefold()
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
    order's set, ``parked`` how many schedule members score below 0 (disabled, finished
    and quarantined entries sort first in the schedule; "next run" shows them last),
    ``band`` the schedule ranks of a due-time range."""
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
    if query.state in ("disabled", "quarantined", "finished"):
        return [held_back]
    if query.state == "enabled":
        return [scheduled]
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


def _plan(store: ScheduleStore, query: Query) -> tuple[list[Segment], float | None]:
    keys = store.keys
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


def read_page(app: Celery, query: Query) -> Page:
    """One page of entries for ``query`` (see the module's docstring for the cost)."""
    store = store_for(app)
    keys = ensure_conf(app).keys
    parts, age = _plan(store, query)
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
                         high - low + 1)
    page.next_start = position if position < total else None
    return page


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
    at = (lambda rank: base + part.high - 1 - rank) if part.reverse else (
        lambda rank: base + rank - part.low)
    return sorted((at(rank), member) for rank, member in ranked)


def _take(app: Celery, store: ScheduleStore, keys: KeyLayout, query: Query, page: Page,
          candidates: list[tuple[int, str]], position: int, window: int) -> int:
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
        if query.passes(info):
            page.rows.append(info)
            if len(page.rows) == query.size:
                page.examined += at - position + 1
                return at + 1
    page.examined += window
    return position + window


# -- one entry -------------------------------------------------------------------------


def zone_of(entry: RedBeatSchedulerEntry) -> tzinfo:
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


def next_runs(entry: RedBeatSchedulerEntry, count: int = 10) -> tuple[list[datetime], str]:
    """The next ``count`` run times in the entry's zone, and why the list is short when
    it is (no more runs, or a schedule whose next run cannot be computed)."""
    zone = zone_of(entry)
    runs: list[datetime] = []
    try:
        runs = [run.due.astimezone(zone) for run in entry.upcoming(count)]
    except (OverflowError, ValueError) as exc:
        return runs, f"cannot be computed: {exc}"
    return runs, "" if len(runs) == count else "no more runs"


# -- the timeline ----------------------------------------------------------------------


@dataclass(frozen=True)
class Bucket:
    start: float
    end: float
    count: int


def timeline(app: Celery, now: float, minutes: int = 24 * 60,
             width: float = 60.0) -> list[Bucket]:
    """How many entries are next due in each ``width``-second bucket from the start of
    the current minute on; one round trip. An entry counts once, at its next run: the
    schedule holds each entry's next run only."""
    first = now - now % width
    edges = [first + width * step for step in range(minutes + 1)]
    counts = store_for(app).due_counts(edges)
    return [Bucket(low, high, count)
            for low, high, count in zip(edges[:-1], edges[1:], counts, strict=True)]


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


__all__ = ["BUDGET", "NAME_BUDGET", "ORDERS", "PAGE_SIZE", "STATES", "Bucket", "HeldSlot",
           "Page", "Query", "Segment", "held_slots", "last_run_score", "locate",
           "next_runs", "read_page", "segments", "timeline", "zone_of"]

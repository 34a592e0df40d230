"""Per-entry scheduling policy: active window, misfires, catch-up, jitter, retention.

celery-redbeat 2.4.2 passes every key of ``definition`` and ``meta`` to a constructor, so
an unknown key there breaks it. The policy therefore lives in its own hash field,
``policy``, written only for entries that use it; entries without one are exactly as
2.4.2 writes them. Shape (every key optional):

    {"start_time": <datetime>, "end_time": <datetime>, "misfire_grace_time": <seconds>,
     "coalesce": true, "max_catch_up": 10, "jitter": <seconds>, "ttl": <seconds>}

Datetimes are tagged (``{"__type__": "datetime", ...}``) as everywhere else.

Three keys wait for the entry's runs, as the workers report them (docs/outcomes.md):
``"relative_to": "execution"`` (an interval counted from the end of the previous run),
``"overlap": "skip" | "buffer_one"`` (no run starts while the previous one is still
going) and ``"lost_after"`` (seconds a silent run holds the entry; default
``redbeat_lost_after``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import deque
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from . import decoder
from .nexttime import count_slots, first_due, latest_slot, slots_between, up_to_millisecond, utc

MAX_CATCH_UP_LIMIT = 1000
NO_DELAY = timedelta()
#: Missed runs counted at most (for the misfires record) after a very long downtime,
#: when they have to be walked (intervals and simple rrules are counted by arithmetic):
#: a crontab walks about 10 µs a run, so the count costs a tick at most about a second.
COUNT_LIMIT = 100_000
#: The most seconds a jitter or ttl may be (about 100 years). A larger one is
#: no policy anybody means, and it breaks the arithmetic: a jittered send time past
#: year 9999, or an EXPIRE Redis refuses, which failed the whole tick's commit.
MAX_SECONDS = 100 * 365 * 86400
RELATIVE_TO = ("schedule", "execution")
OVERLAP = ("allow", "skip", "buffer_one")


@dataclass(frozen=True)
class EntryPolicy:
    start_time: datetime | None = None
    end_time: datetime | None = None
    #: A slot sent later than this many seconds after its due time is skipped instead.
    misfire_grace_time: float | None = None
    #: Several missed slots run once (the latest); False runs each, up to max_catch_up.
    coalesce: bool = True
    max_catch_up: int = 10
    #: Send each slot up to this many seconds late, the same delay for the same slot on
    #: every node, so a thousand identical crontabs do not hit the broker at once.
    jitter: float = 0.0
    #: Seconds a finished entry (a one-off that ran, an ended window) is kept.
    ttl: float | None = None
    #: "schedule": runs follow the schedule's slots; "execution" (intervals only): the
    #: next run is an interval after the previous run finished.
    relative_to: str = "schedule"
    #: A slot due while the previous run is still going: "allow" (sent anyway), "skip"
    #: (counted as a misfire, reason "overlap"), "buffer_one" (the latest one waits
    #: and is sent when the previous run ends; the others are skipped).
    overlap: str = "allow"
    #: Seconds a run may stay silent before it counts as lost and releases the entry
    #: (None: ``redbeat_lost_after``).
    lost_after: float | None = None

    def __post_init__(self) -> None:
        # A grace is only compared with a lateness: any size will do (the app-wide
        # redbeat_misfire_grace_time is one too); a jitter or ttl is added to a time.
        for name, most in (
            ("misfire_grace_time", math.inf),
            ("jitter", MAX_SECONDS),
            ("ttl", MAX_SECONDS),
            ("lost_after", MAX_SECONDS),
        ):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= most
            ):  # NaN too
                raise ValueError(
                    f"policy {name!r} must be a number of seconds >= 0"
                    + (f", at most {most}" if most < math.inf else "")
                )
        for name, allowed in (("relative_to", RELATIVE_TO), ("overlap", OVERLAP)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"policy {name!r} must be one of: {', '.join(allowed)}")
        if self.lost_after == 0:
            raise ValueError("policy 'lost_after' must be more than 0 seconds")
        if not isinstance(self.coalesce, bool):
            raise ValueError("policy 'coalesce' must be true or false")
        if (
            isinstance(self.max_catch_up, bool)
            or not isinstance(self.max_catch_up, int)
            or not 1 <= self.max_catch_up <= MAX_CATCH_UP_LIMIT
        ):
            raise ValueError(f"policy 'max_catch_up' must be 1..{MAX_CATCH_UP_LIMIT}")
        for name in ("start_time", "end_time"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, datetime):
                raise ValueError(f"policy {name!r} must be a datetime")
        if self.start_time and self.end_time and utc(self.end_time) <= utc(self.start_time):
            raise ValueError("policy 'end_time' must be after 'start_time'")

    def to_json(self) -> str | None:
        """The ``policy`` field, or None when every value is the default."""
        if self == DEFAULT:
            return None  # most entries: every save asks
        changed = {
            name: value for name, value in asdict(self).items() if value != getattr(DEFAULT, name)
        }
        return decoder.dumps(changed) if changed else None

    @classmethod
    def from_json(cls, text: str | None) -> EntryPolicy:
        """The policy a ``policy`` field holds. Parsed once per distinct text: the tick
        decodes every due entry's field, and a policy is frozen, so one object serves
        every entry and tick that stores the same text (a bad text raises every time)."""
        if not text:
            return DEFAULT
        return _parse_policy(text) if cls is EntryPolicy else cls._parse(text)

    @classmethod
    def _parse(cls, text: str) -> EntryPolicy:
        try:
            values = decoder.loads(text)
        except ValueError as exc:
            raise ValueError(f"policy: {exc}") from exc
        if not isinstance(values, dict):
            raise ValueError("policy must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"policy has unknown keys: {', '.join(sorted(unknown))}")
        return cls(**values)

    @property
    def waits_for_runs(self) -> bool:
        """Whether a tick needs the entry's latest run (its ``run`` field) to decide."""
        return self.overlap != "allow" or self.relative_to == "execution"

    def with_default_grace(self, grace: float | None) -> EntryPolicy:
        if self.misfire_grace_time is not None or grace is None:
            return self
        return _with_grace(self, grace)

    # -- decisions -----------------------------------------------------------------------

    def window(self, schedule: Any, due: datetime | None) -> datetime | None:
        """``due`` moved into the active window: not before start_time; None after end.

        A due time before the start moves to the schedule's first run at or after it; a
        one-off's time has no run after it (it runs once, at once when it has passed):
        it runs when the window opens, as a one-off missed while no beat ran does."""
        if due is not None and self.start_time is not None and due < utc(self.start_time):
            # from the millisecond that names a slot, rounded up: never before start
            start = up_to_millisecond(utc(self.start_time))
            due = first_due(schedule, start)
            if due is not None and due < start:
                due = start
        if due is None or self.end_time is not None and due > utc(self.end_time):
            return None
        return due

    def delay(self, name: str, due: datetime) -> timedelta:
        """The jitter of one slot: a fixed fraction of ``jitter`` from the slot's id."""
        if not self.jitter:
            return NO_DELAY
        digest = hashlib.sha1(f"{name}:{round(due.timestamp() * 1000)}".encode()).digest()
        fraction = int.from_bytes(digest[:8], "big") / 2**64
        return timedelta(seconds=self.jitter * fraction)

    def send_time(self, name: str, due: datetime) -> datetime:
        """When the slot due at ``due`` is sent: after its jitter, but never after
        ``end_time`` (a slot inside the window is sent inside it)."""
        send_at = due + self.delay(name, due)
        if self.end_time is not None and send_at > utc(self.end_time):
            return max(due, utc(self.end_time))
        return send_at

    def missed(self, schedule: Any, due: datetime, now: datetime) -> tuple[list[datetime], int]:
        """The slots to run now (oldest first), and how many older ones will never run.

        Coalescing runs only the latest slot, in place of all the missed ones (they are
        not counted as skipped); otherwise the latest ``max_catch_up`` run and the older
        ones are skipped. Slots after ``end_time`` are none of them: a catch-up after
        the window closed runs the window's last slot."""
        if self.end_time is not None:
            now = min(now, utc(self.end_time))
        latest = latest_slot(schedule, due, now)
        if self.coalesce or latest == due:
            return [latest], 0
        total = _count(schedule, due, latest)
        # Walk only the tail: widen a window back from the latest run until it holds
        # max_catch_up runs (or reaches the first missed one).
        for window in (60, 3600, 86400, 32 * 86400, 400 * 86400, None):
            start = due if window is None else max(due, latest - timedelta(seconds=window))
            # the entry's own run at or before the window's start: an interval's runs
            # are a chain from ``due``, which a run "at or after start" would leave
            first = due if start == due else latest_slot(schedule, due, start)
            kept: deque[datetime] = deque(
                slots_between(schedule, first, latest, limit=COUNT_LIMIT), maxlen=self.max_catch_up
            )
            if len(kept) == self.max_catch_up or start == due:
                return list(kept), total - len(kept)
        return [latest], total - 1

    def too_late(self, slot: datetime, now: datetime) -> bool:
        grace = self.misfire_grace_time
        return grace is not None and (now - slot).total_seconds() > grace


def _count(schedule: Any, first: datetime, last: datetime) -> int:
    """Slots from ``first`` to ``last`` inclusive (bounded; for the misfire record)."""
    return count_slots(schedule, first, last, COUNT_LIMIT)


DEFAULT = EntryPolicy()


@lru_cache(maxsize=4096)
def _parse_policy(text: str) -> EntryPolicy:
    return EntryPolicy._parse(text)


@lru_cache(maxsize=4096)
def _with_grace(policy: EntryPolicy, grace: float) -> EntryPolicy:
    """``policy`` with the app's default grace (``redbeat_misfire_grace_time``), one
    object per policy and grace: the tick asks for every due entry, and the copy through
    ``asdict`` it made each time (a deep copy) cost about 100 us an entry."""
    return replace(policy, misfire_grace_time=grace)


def misfire_record(
    previous: str | None, skipped: int, last_skipped: datetime | None, reason: str = "late"
) -> str | None:
    """The ``misfires`` field after this tick: how many slots were skipped and the last
    one; slots skipped for another reason than "late" (past the misfire grace time or
    the catch-up bound) are also counted under their reason ("overlap": the previous
    run was still going), and the last reason is kept once there was another; None
    when nothing was skipped."""
    if not skipped:
        return None
    try:
        record = json.loads(previous) if previous else {}
    except ValueError:
        record = {}
    if not isinstance(record, dict):
        record = {}
    record["skipped"] = int(record.get("skipped", 0)) + skipped
    if reason != "late":  # "skipped" counts every reason; the others are also counted apart
        try:
            record[reason] = int(record.get(reason, 0)) + skipped
        except (TypeError, ValueError):
            record[reason] = skipped
    if reason != "late" or "last_reason" in record:
        record["last_reason"] = reason
    if last_skipped is not None:
        record["last_skipped"] = last_skipped.isoformat()
    return json.dumps(record)

"""An entry's hash fields as text, both ways: ``definition`` and ``meta`` read
strictly, ``meta`` written.

Pure (no Redis, no app): the planner decodes the rows a tick read with these, and
``RedBeatSchedulerEntry`` (which also saves and loads through the store) is built from
them. Reading is strict: whatever the scheduler could not run is an
:class:`InvalidEntry` with a reason an operator can act on, never a crash of the tick.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import fields
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from celery.schedules import BaseSchedule, ParseException

from . import decoder, legacy
from .nexttime import utc
from .policy import EntryPolicy

UTC_ZONE = ZoneInfo("UTC")
POLICY_FIELDS = tuple(f.name for f in fields(EntryPolicy))


class InvalidEntry(ValueError):
    """A stored entry that cannot be scheduled, with the reason."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


def as_utc_zone(moment: datetime) -> datetime:
    """UTC with the zone named "UTC", which is how 2.4.2 writes ``last_run_at``."""
    return utc(moment).astimezone(UTC_ZONE)


#: The meta the scheduler writes after every dispatch, and 2.4.2 too: read and written
#: by these patterns on the tick's hot path, by the JSON codec otherwise. Both give
#: exactly the same text and values (tests/test_entry.py checks them against each other).
UTC_META = re.compile(
    r'\{"last_run_at": \{"__type__": "datetime", "year": (\d+), "month": (\d+), '
    r'"day": (\d+), "hour": (\d+), "minute": (\d+), "second": (\d+), '
    r'"microsecond": (\d+), "timezone": "UTC"\}(?:, "total_run_count": (\d+))?\}\Z'
)


@lru_cache(maxsize=4096)
def utc_meta_text(moment: datetime, total_run_count: int | None) -> str:
    """The fast path's meta text (an f-string: twice as fast as str.format here); no
    count when ``total_run_count`` is None (what a save writes, as 2.4.2's does). Kept
    by moment and count: a burst's entries share their slot (and mostly their count),
    and an aware datetime's fields cost a zone lookup each."""
    m = utc(moment)
    count = "" if total_run_count is None else f', "total_run_count": {int(total_run_count)}'
    return (
        f'{{"last_run_at": {{"__type__": "datetime", "year": {m.year}, "month": {m.month}, '
        f'"day": {m.day}, "hour": {m.hour}, "minute": {m.minute}, "second": {m.second}, '
        f'"microsecond": {m.microsecond}, "timezone": "UTC"}}{count}}}'
    )


def meta_json(last_run_at: datetime | None, total_run_count: int | None = None) -> str:
    if last_run_at is not None:
        return utc_meta_text(last_run_at, total_run_count)
    meta: dict[str, Any] = {
        "last_run_at": None if last_run_at is None else decoder.tagged(as_utc_zone(last_run_at))
    }
    if total_run_count is not None:
        meta["total_run_count"] = total_run_count
    return json.dumps(meta)


#: RecursionError: JSON nested deeper than the interpreter's recursion limit.
DECODE_ERRORS = (ValueError, TypeError, KeyError, OverflowError, ParseException, RecursionError)


def _load_json(
    key: str, field: str, text: str | None, load: Callable[[str], Any] = decoder.loads
) -> Any:
    if text is None:
        return None
    try:
        return load(text)
    except DECODE_ERRORS as exc:
        # ValueError covers malformed JSON and bad values inside tagged types
        raise InvalidEntry(key, f"{field}: {type(exc).__name__}: {exc}") from exc


def _expect(key: str, field: str, value: Any, types: tuple[type, ...], what: str) -> Any:
    if not isinstance(value, types) or isinstance(value, bool) and bool not in types:
        raise InvalidEntry(key, f"field '{field}' must be {what}, not {type(value).__name__}")
    return value


class Definition(NamedTuple):
    """A validated ``definition``: everything about an entry except its run history."""

    name: str
    task: str
    schedule: BaseSchedule
    args: Any
    kwargs: dict[str, Any]
    options: dict[str, Any]
    enabled: bool


def parse_definition(
    key: str, text: str | None, prefix: str | None, load: Callable[[str], Any] = decoder.loads
) -> Definition:
    """The validated definition; ``prefix`` None skips the check that the name belongs
    to the key (an entry class with its own ``generate_key`` checks that itself)."""
    if not text:
        raise InvalidEntry(key, "the hash has no 'definition' field")
    definition = _load_json(key, "definition", text, load)
    inner = legacy.unwrap(definition)
    if inner is not None:  # the stub shown to celery-redbeat 2.4.2: run what it carries
        definition = _load_json(key, "definition", inner, load)
    if not isinstance(definition, dict):
        raise InvalidEntry(key, "definition must be a JSON object")
    for required in ("name", "task", "schedule"):
        if required not in definition:
            raise InvalidEntry(key, f"definition is missing '{required}'")
    name = _expect(key, "name", definition["name"], (str,), "a string")
    if prefix is not None and prefix + name != key:
        raise InvalidEntry(key, f"definition name {name!r} belongs to key {prefix + name!r}")
    schedule = definition["schedule"]
    if isinstance(schedule, dict):
        kind = schedule.get("__type__")
        raise InvalidEntry(
            key, f"unknown schedule type {kind!r}" if kind else "schedule has no '__type__'"
        )
    if not isinstance(schedule, BaseSchedule):
        raise InvalidEntry(key, f"schedule must be a tagged object, not {type(schedule).__name__}")
    task = _expect(key, "task", definition["task"], (str,), "a string")
    if not task:
        raise InvalidEntry(key, "field 'task' is empty")
    args = definition.get("args")
    if args is not None:
        _expect(key, "args", args, (list,), "a list or null")
    return Definition(
        name,
        task,
        schedule,
        args,
        _expect(key, "kwargs", definition.get("kwargs") or {}, (dict,), "an object"),
        _expect(key, "options", definition.get("options") or {}, (dict,), "an object"),
        _expect(key, "enabled", definition.get("enabled", True), (bool,), "true or false"),
    )


@lru_cache(maxsize=4096)
def _utc_meta(text: str) -> tuple[datetime, int] | str | None:
    """The fast path's meta read: its last run and count, the error's text when the
    fields make no date, None when ``text`` is not in the fast path's form. Kept by text:
    the entries of a burst that ran together hold the same meta, and building an aware
    datetime from the match was a fifth of a due entry's planning (a datetime is
    immutable, so entries may share one)."""
    fast = UTC_META.match(text)
    if fast is None:
        return None
    year, month, day, hour, minute, second, micro, count = fast.groups()
    try:
        moment = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int(micro),
            UTC_ZONE,
        )
    except ValueError as exc:
        return str(exc)
    return moment, int(count or 0)


def parse_meta(key: str, text: str | None) -> tuple[datetime | None, int]:
    fast = _utc_meta(text) if text else None
    if isinstance(fast, str):
        raise InvalidEntry(key, f"meta: ValueError: {fast}")
    if fast is not None:
        return fast
    # Plain JSON, then the one tagged value meta holds.
    meta = _load_json(key, "meta", text, json.loads) or {}
    if not isinstance(meta, dict):
        raise InvalidEntry(key, "meta must be a JSON object")
    last_run_at = meta.get("last_run_at")
    if isinstance(last_run_at, dict):
        try:
            last_run_at = decoder.decode_tagged(last_run_at)
        except DECODE_ERRORS as exc:
            raise InvalidEntry(key, f"meta: {type(exc).__name__}: {exc}") from exc
    if last_run_at is not None and not isinstance(last_run_at, datetime):
        raise InvalidEntry(key, "meta 'last_run_at' must be a tagged datetime or null")
    count = meta.get("total_run_count") or 0
    _expect(key, "total_run_count", count, (int,), "an integer")
    return last_run_at, count


#: Definition keys the constructor gets anyway (or that belong to other hash fields).
CONSTRUCTOR_FIELDS = frozenset(
    {*Definition._fields, "last_run_at", "total_run_count", "app", "policy", *POLICY_FIELDS}
)


def extra_fields(key: str, text: str | None) -> dict[str, Any]:
    """The top-level keys of a (validated) definition beyond the known ones."""
    definition = _load_json(key, "definition", text)
    inner = legacy.unwrap(definition)
    if inner is not None:
        definition = _load_json(key, "definition", inner)
    return {
        name: value
        for name, value in definition.items()
        if name not in CONSTRUCTOR_FIELDS and name.isidentifier()
    }

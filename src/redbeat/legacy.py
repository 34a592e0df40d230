"""What celery-redbeat 2.4.2 can read, and the stub it is shown instead of the rest.

A 2.4.2 ``celery beat`` may share the Redis and key prefix with this package (a rolling
upgrade, or a rollback). It loads every due entry with ``cls(app=app, **definition)``
outside any error handler, so one definition it cannot decode stops that beat: an unknown
``__type__`` stays a dict (Celery then fails setting its ``app``), an unknown key of a
crontab or rrule is a TypeError, an unknown top-level key too, and a bad zone name is a
KeyError that makes it *remove* the entry from the schedule.

So a definition it cannot read is stored as a definition it can: a disabled entry on an
hourly interval (2.4.2 never sends a disabled entry, nor writes to it) whose ``options``
carry the real definition's JSON text under :data:`MARKER`. This package unwraps it and
runs the real entry. Anything that overwrites ``definition`` with a plain one (2.4.2
itself, a raw Redis writer) removes the marker, so the plain one wins. Fencing hashes the
stored text, which contains the real definition, so an edit is still noticed.

Only writes go through :func:`legacy_readable` (it builds the schedules 2.4.2 would build,
which is slow); reads only call :func:`unwrap`, a few dictionary look-ups.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from celery import schedules as celery_schedules
from dateutil import rrule as dateutil_rrule

#: The key, inside the stub's ``options``, of the real definition's JSON text.
MARKER = "__redbeat_definition__"

#: The stub's schedule: anything 2.4.2 reads would do, since it never runs a disabled
#: entry; an hour keeps a 2.4.2 beat that somehow enabled it from sending often.
STUB_SCHEDULE = {"__type__": "interval", "every": 3600.0, "relative": False}

# Keys 2.4.2 passes on to a constructor (anything else is a TypeError there).
TOP_LEVEL = frozenset({"name", "task", "args", "kwargs", "options", "schedule", "enabled"})
DATETIME_FIELDS = ("year", "month", "day", "hour", "minute", "second", "microsecond")
DATETIME_KEYS = frozenset({*DATETIME_FIELDS, "timezone", "fold"})
CRONTAB_KEYS = frozenset({"minute", "hour", "day_of_week", "day_of_month", "month_of_year"})
RRULE_RULES = ("wkst", "count", "bysetpos", "bymonth", "bymonthday", "byyearday", "byeaster",
               "byweekno", "byweekday", "byhour", "byminute", "bysecond")
#: What 2.4.2's encoder writes for an rrule, which is what its decoder accepts.
RRULE_KEYS = frozenset({"freq", "interval", *RRULE_RULES,
                        "dtstart", "dtstart_tz", "until", "until_tz"})
FREQUENCIES = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY")
SCHEDULE_TYPES = frozenset({"interval", "crontab", "rrule"})
# Building any of these can fail in as many ways as its arguments can be wrong.
BUILD_ERRORS = (ValueError, TypeError, KeyError, OverflowError, OSError, AssertionError,
                celery_schedules.ParseException)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# -- tagged values, as 2.4.2's decoder builds them ------------------------------------------


def _datetime(fields: dict[str, Any]) -> bool:
    """2.4.2 passes every key to ``datetime()``; a zone is a name, or a UTC offset in
    seconds (an unknown name is a KeyError, on which 2.4.2 drops the entry)."""
    if not fields.keys() <= DATETIME_KEYS or not all(
            _is_int(fields[name]) for name in (*DATETIME_FIELDS, "fold") if name in fields):
        return False
    zone = fields.get("timezone", "UTC")
    try:
        if _is_number(zone):
            tzinfo: Any = timezone(timedelta(minutes=zone / 60))
        elif isinstance(zone, str):
            tzinfo = ZoneInfo(zone)
        else:
            return False
        values = {name: fields[name] for name in (*DATETIME_FIELDS, "fold") if name in fields}
        datetime(tzinfo=tzinfo, **values)
    except BUILD_ERRORS:
        return False
    return True


def _interval(fields: dict[str, Any]) -> bool:
    # 2.4.2 reads both keys unconditionally, and ignores any other (which, if this package
    # ever wrote one, would mean something 2.4.2 would not do); every <= 0 would be due on
    # every tick
    if fields.keys() != {"every", "relative"} or not isinstance(fields["relative"], bool):
        return False
    every = fields["every"]
    if not _is_number(every) or every <= 0:
        return False
    try:
        timedelta(seconds=every)
    except OverflowError:
        return False
    return True


def _cron_field(value: Any) -> bool:
    if isinstance(value, str) or _is_int(value):
        return True
    return isinstance(value, list) and all(_is_int(item) for item in value)


def _crontab(fields: dict[str, Any]) -> bool:
    if not fields.keys() <= CRONTAB_KEYS or not all(map(_cron_field, fields.values())):
        return False
    return _crontab_builds(tuple(sorted(
        (name, tuple(value) if isinstance(value, list) else value)
        for name, value in fields.items())))


@functools.lru_cache(maxsize=1024)
def _crontab_builds(fields: tuple[tuple[str, Any], ...]) -> bool:
    """Whether 2.4.2 builds this crontab (which it does in from_key, unguarded); once
    per distinct crontab: building one is most of the cost of saving a crontab entry."""
    try:
        celery_schedules.crontab(**{name: list(value) if isinstance(value, tuple) else value
                                    for name, value in fields})
    except BUILD_ERRORS:
        return False
    return True


def _weekday_of(fields: dict[str, Any]) -> dateutil_rrule.weekday | None:
    """dateutil's ``weekday(wkday, n=None)``, to which 2.4.2 passes the keys as they are
    (so it reads ``n`` although its encoder never writes it)."""
    if not fields.keys() <= {"wkday", "n"} or "wkday" not in fields:
        return None
    wkday, n = fields["wkday"], fields.get("n")
    if not _is_int(wkday) or not 0 <= wkday <= 6 or n is not None and (not _is_int(n) or n == 0):
        return None
    return dateutil_rrule.weekday(wkday, n)


def _weekday(fields: dict[str, Any]) -> bool:
    return _weekday_of(fields) is not None


def _rule_value(value: Any) -> Any:
    """A rule as 2.4.2 hands it to dateutil (weekdays decoded); TypeError if it cannot be
    one (dateutil reports the rest when the rule is built)."""
    if value is None or _is_int(value):
        return value
    if isinstance(value, dict) and value.get("__type__") == "weekday":
        day = _weekday_of({key: item for key, item in value.items() if key != "__type__"})
        if day is None:
            raise TypeError("not a weekday 2.4.2 reads")
        return day
    if isinstance(value, list) and None not in value:
        return [_rule_value(item) for item in value]
    raise TypeError(f"not a rule value: {value!r}")


def _moment(epoch: Any, minutes: Any) -> datetime | None:
    """``from_timestamp`` as 2.4.2 applies it to dtstart/until; TypeError when it fails."""
    if epoch is None:
        return None
    if not _is_number(epoch) or minutes is not None and not _is_number(minutes):
        raise TypeError("not a timestamp and an offset in minutes")
    tz = timezone(timedelta(minutes=minutes)) if minutes else timezone.utc
    return datetime.fromtimestamp(epoch, tz=tz)


def _rrule(fields: dict[str, Any]) -> bool:
    if not fields.keys() <= RRULE_KEYS or "freq" not in fields:
        return False
    freq, interval = fields["freq"], fields.get("interval", 1)
    if isinstance(freq, str) and freq.upper() in FREQUENCIES:
        freq = FREQUENCIES.index(freq.upper())
    if not _is_int(freq) or not 0 <= freq <= 6:
        return False
    if not _is_int(interval) or interval < 1:
        return False  # dateutil loops forever looking for the next run of interval 0
    try:
        dtstart = _moment(fields.get("dtstart"), fields.get("dtstart_tz", 0))
        until = _moment(fields.get("until"), fields.get("until_tz", 0))
        rules = {name: _rule_value(fields.get(name)) for name in RRULE_RULES}
        # what 2.4.2 builds in from_key, unguarded
        dateutil_rrule.rrule(freq, dtstart=dtstart or datetime.now(timezone.utc),
                             interval=interval, until=until, **rules)
    except BUILD_ERRORS:
        return False
    return True


#: The ``__type__`` names 2.4.2 decodes, each with the check that it decodes this one.
TAGGED: dict[str, Callable[[dict[str, Any]], bool]] = {
    "datetime": _datetime, "interval": _interval, "crontab": _crontab,
    "weekday": _weekday, "rrule": _rrule,
}


def _value(value: Any) -> bool:
    """Any JSON value: each tagged object in it is one 2.4.2 decodes without error."""
    if isinstance(value, list):
        return all(map(_value, value))
    if not isinstance(value, dict):
        return True
    if "__type__" not in value:
        return all(map(_value, value.values()))
    kind = value["__type__"]
    check = TAGGED.get(kind) if isinstance(kind, str) else None
    # each check takes only the plain JSON values its type allows
    return check is not None and check({key: item for key, item in value.items()
                                        if key != "__type__"})


# -- definitions --------------------------------------------------------------------------


def legacy_readable(obj: Any, name: str | None = None) -> bool:
    """Whether celery-redbeat 2.4.2 loads this definition (JSON values, not yet decoded)
    and runs it as this package would. With ``name``, the definition must also carry that
    name: 2.4.2 writes a run's meta under the key the name gives, so a definition stored
    under another key would be due again on every tick."""
    if not isinstance(obj, dict) or not obj.keys() <= TOP_LEVEL:
        return False
    if not isinstance(obj.get("name"), str) or name is not None and obj["name"] != name:
        return False
    if not isinstance(obj.get("task"), str) or not isinstance(obj.get("enabled", True), bool):
        return False
    schedule = obj.get("schedule")
    if not isinstance(schedule, dict) or schedule.get("__type__") not in SCHEDULE_TYPES:
        return False  # a bare number would do for 2.4.2, but this package rejects it
    for key, kind in (("args", list), ("kwargs", dict), ("options", dict)):
        if obj.get(key) is not None and not isinstance(obj[key], kind):
            return False
    return all(map(_value, obj.values()))


def stub(text: str, obj: Any, name: str | None = None) -> str:
    """The disabled definition 2.4.2 is shown in place of ``text`` (``obj`` is ``text``
    loaded, or None when it is not JSON). Its name, task, args and kwargs are the real
    ones where 2.4.2 can read them, so listings made with 2.4.2 still make sense."""
    real = obj if isinstance(obj, dict) else {}
    args, kwargs = real.get("args"), real.get("kwargs")
    name = name if name is not None else real.get("name")
    return json.dumps({
        "name": name if isinstance(name, str) else "",
        "task": real["task"] if isinstance(real.get("task"), str) else "",
        "args": args if isinstance(args, list) and _value(args) else [],
        "kwargs": kwargs if isinstance(kwargs, dict) and _value(kwargs) else {},
        "options": {MARKER: text},
        "schedule": STUB_SCHEDULE,
        "enabled": False,
    })


def wrap(text: str, name: str | None = None) -> str:
    """``text`` itself when 2.4.2 can read it, else the stub that carries it."""
    if name is None and _readable_whatever_its_name(text):
        return text
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return stub(text, None, name)
    return text if legacy_readable(obj, name) else stub(text, obj, name)


#: How the definitions entries write begin (their ``definition`` names the entry first).
_NAME_FIRST = '{"name": '
_DECODER = json.JSONDecoder()


def _readable_whatever_its_name(text: str) -> bool:
    """Whether 2.4.2 reads ``text``, a definition that names its entry first, told by the
    rest of the text: a string is all 2.4.2 asks of a name, so definitions that differ
    only in their names are all readable or all not, and entries saved with one task,
    arguments and schedule are checked once, not each (parsing and checking the text
    again cost a save as much as encoding it). False when not sure: the caller then
    checks the whole text."""
    if not text.startswith(_NAME_FIRST):
        return False
    try:
        name, end = _DECODER.raw_decode(text, len(_NAME_FIRST))
    except ValueError:
        return False
    return isinstance(name, str) and text.startswith(", ", end) and \
        _rest_readable(text[end + 2:])


@functools.lru_cache(maxsize=256)
def _rest_readable(rest: str) -> bool:
    """Whether 2.4.2 reads a definition that is any name followed by ``rest``."""
    try:
        return legacy_readable(json.loads('{"name": "", ' + rest))
    except (ValueError, RecursionError):
        return False


def unwrap(obj: Any) -> str | None:
    """The real definition's JSON text when ``obj`` (a loaded definition) is a stub."""
    if not isinstance(obj, dict):
        return None
    options = obj.get("options")
    if not isinstance(options, dict):
        return None
    inner = options.get(MARKER)
    return inner if isinstance(inner, str) else None


def real_text(text: str) -> str:
    """The real definition's JSON text of a stored ``definition`` (for showing it)."""
    if MARKER not in text:
        return text
    try:
        inner = unwrap(json.loads(text))
    except (ValueError, RecursionError):
        return text
    return text if inner is None else inner


__all__ = ["MARKER", "legacy_readable", "real_text", "stub", "unwrap", "wrap"]

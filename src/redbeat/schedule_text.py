"""Schedules as the command line writes them, both ways.

``parse_*`` read what ``redbeat add``/``edit`` accept (``--every 1m30s``, ``--cron
@daily``, ``--rrule "FREQ=WEEKLY;BYDAY=MO"``, ``--at 2030-01-02T09:00:00``, ``--tz``);
:func:`as_options` writes a stored schedule back in that same syntax, so what ``show``
prints can be pasted into ``add`` and gives the same definition. Every mistake is a
``ValueError`` naming the option, never a bare KeyError from a lookup (which the CLI
would otherwise report as a missing entry).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab, schedule, solar
from dateutil.rrule import weekday

from .schedules import FREQUENCIES, FREQUENCY_NAMES, clocked, rrule
from .schedules import crontab as zoned_crontab

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: One part of a duration: a number and its unit ("1m30s" has two).
DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhdw]?)")
#: The crontab shorthands of cron(8), as five fields.
CRON_SHORTHANDS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
                   "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
                   "@hourly": "0 * * * *"}
WEEKDAYS = {"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}
DAY_NAMES = {number: name for name, number in WEEKDAYS.items()}
#: RFC 5545 parts that are lists of numbers (COUNT is one number), by rrule field.
RRULE_KEYS = {"BYMONTH": "bymonth", "BYMONTHDAY": "bymonthday", "BYYEARDAY": "byyearday",
              "BYWEEKNO": "byweekno", "BYHOUR": "byhour", "BYMINUTE": "byminute",
              "BYSECOND": "bysecond", "BYSETPOS": "bysetpos", "BYEASTER": "byeaster",
              "COUNT": "count"}
RRULE_TIME = "%Y%m%dT%H%M%S"


# -- reading ---------------------------------------------------------------------------


def parse_json(text: str | None, what: str, kind: type) -> Any:
    """The JSON value of an entry field given as text (``--args``, ``--options``...),
    which must be a ``kind`` (list or dict); None when the field is not given. A
    mistake is a ValueError naming ``what``, so the caller reports it as bad input."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(value, kind):
        raise ValueError(f"{what} must be a JSON {kind.__name__}")
    return value


def parse_every(text: str, option: str = "--every") -> float:
    """A duration: ``30`` (seconds), ``30s``, ``5m``, ``1h``, ``1d``, ``1w`` or parts of
    them together (``1m30s``, ``1h 30m``)."""
    text = text.strip().lower().replace(" ", "")
    parts = list(DURATION_PART.finditer(text))
    if not parts or "".join(part.group(0) for part in parts) != text or len(parts) > 1 and any(
            not part.group(2) for part in parts):  # a bare number only on its own
        wanted = "a duration such as 30s, 5m, 1h30m, 1d or 1w"
        raise ValueError(f"{option} wants {wanted}, not {text!r}")
    seconds = sum(float(part.group(1)) * UNITS[part.group(2) or "s"] for part in parts)
    if seconds <= 0:
        raise ValueError(f"{option} must be positive")
    return seconds


def parse_limit(text: str, option: str) -> float | None:
    """A limit an entry may also have none of (``--misfire-grace``, ``--ttl``): a
    duration as ``--every`` takes it, or ``none``, which removes it (so ``edit`` can
    take back a limit it set)."""
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)  # plain seconds, 0 included: the policy checks the range
    except ValueError:
        return parse_every(text, option)


def parse_zone(text: str | None, option: str = "--tz") -> str | None:
    """An IANA zone name, checked here: ZoneInfo's "not found" is a KeyError, which
    must reach the user as invalid input naming the option, not as a missing entry."""
    if text is None:
        return None
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"{option}: unknown time zone {text!r} (an IANA name such as "
                         "Europe/Paris or UTC)") from None
    return text


def parse_time(text: str, zone: str | tzinfo | None, option: str = "--at") -> datetime:
    """An ISO 8601 time; without an offset it is read in ``zone`` (a name or a zone;
    default UTC)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{option} wants an ISO 8601 time such as 2030-01-02T09:00:00, "
                         f"not {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(zone) if isinstance(zone, str)
                                else zone or timezone.utc)
    return moment


def _sunday_as_zero(field: str) -> str:
    """cron(8) also writes Sunday as 7; Celery's crontab knows only 0."""
    items = []
    for item in field.split(","):
        if item == "7":
            item = "0"
        elif re.fullmatch(r"\d-7", item):
            item = f"{item[0]}-6,0"
        items.append(item)
    return ",".join(items)


def parse_cron(text: str, zone: str | None, option: str = "--cron") -> crontab:
    """Five cron fields, or a shorthand (``@daily``, ``@hourly``...)."""
    text = CRON_SHORTHANDS.get(text.strip().lower(), text)
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"{option} wants 5 fields (minute hour day month weekday), "
                         f"not {text!r}")
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    day_of_week = _sunday_as_zero(day_of_week)
    return zoned_crontab(minute=minute, hour=hour, day_of_month=day_of_month,
                         month_of_year=month_of_year, day_of_week=day_of_week, timezone=zone)


def parse_rrule(text: str, zone: str | tzinfo | None, option: str = "--rrule") -> rrule:
    """RFC 5545 ``FREQ=...;BYHOUR=...`` (DTSTART and UNTIL as YYYYMMDDTHHMMSS in ``zone``).

    Every part is checked here, so a mistake is reported naming the part: the
    schedule's own lookups fail with bare KeyErrors ('FORTNIGHTLY')."""
    fields: dict[str, Any] = {}
    freq = None
    for part in filter(None, text.split(";")):
        name, _, value = part.partition("=")
        name = name.strip().upper()
        if name == "FREQ":
            freq = value.strip().upper()
            if freq not in FREQUENCIES:
                raise ValueError(f"{option}: FREQ={value.strip()!r} is not one of "
                                 f"{', '.join(FREQUENCIES)}")
        elif name == "INTERVAL":
            fields["interval"] = _rrule_numbers(name, value, option)[0]
        elif name == "BYDAY":
            fields["byweekday"] = [_rrule_day(day, option=option) for day in value.split(",")]
        elif name == "WKST":
            fields["wkst"] = _rrule_day(value, "WKST", option)
        elif name in ("DTSTART", "UNTIL"):
            try:
                fields[name.lower()] = datetime.strptime(value.strip().rstrip("Z"), RRULE_TIME)
            except ValueError:
                raise ValueError(f"{option}: {name} wants YYYYMMDDTHHMMSS, not "
                                 f"{value!r}") from None
        elif name in RRULE_KEYS:
            numbers = _rrule_numbers(name, value, option)
            fields[RRULE_KEYS[name]] = numbers[0] if name == "COUNT" else numbers
        else:
            raise ValueError(f"{option}: unsupported part {name!r}")
    if freq is None:
        raise ValueError(f"{option} needs FREQ=...")
    return rrule(freq, timezone=zone, **fields)


def _rrule_numbers(name: str, value: str, option: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",")]
    except ValueError:
        raise ValueError(f"{option}: {name} wants whole numbers, not {value!r}") from None


def _rrule_day(text: str, part: str = "BYDAY", option: str = "--rrule") -> weekday:
    """``MO`` or ``+1MO``/``-1FR`` (the first Monday, the last Friday of the period)."""
    day = text.strip().upper()
    try:
        n = int(day[:-2]) if day[:-2] else None
        return weekday(WEEKDAYS[day[-2:]], n)
    except (KeyError, ValueError):
        raise ValueError(f"{option}: {part} wants days such as MO,WE or +1MO, not "
                         f"{text.strip()!r}") from None


# -- writing ---------------------------------------------------------------------------


def seconds_text(seconds: float) -> str:
    """A duration as ``--every`` reads it: ``1d``, ``90s``, ``1.5s``."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _day_text(day: Any) -> str:
    """A weekday as BYDAY writes it (``MO``, ``+1MO``); a bare number is a weekday too."""
    if isinstance(day, weekday):
        return (f"{day.n:+d}" if day.n else "") + DAY_NAMES[day.weekday]
    return DAY_NAMES[int(day)]


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]


def rrule_text(value: rrule) -> str:
    """The rule in the RFC 5545 syntax ``--rrule`` reads: BYDAY with day names, DTSTART
    and UNTIL in the rule's own zone (the one ``--tz`` gives back)."""
    zone = value.dtstart.tzinfo
    parts = [f"FREQ={FREQUENCY_NAMES[value.freq]}"]
    if value.interval != 1:
        parts.append(f"INTERVAL={value.interval}")
    for name, rule in value.rules.items():
        if rule is None:
            continue
        if name == "byweekday":
            parts.append("BYDAY=" + ",".join(_day_text(day) for day in _listed(rule)))
        elif name == "wkst":
            parts.append(f"WKST={_day_text(rule)}")
        else:
            parts.append(f"{name.upper()}={','.join(str(item) for item in _listed(rule))}")
    parts.append(f"DTSTART={value.dtstart.strftime(RRULE_TIME)}")
    if value.until is not None:
        parts.append(f"UNTIL={value.until.astimezone(zone).strftime(RRULE_TIME)}")
    return ";".join(parts)


def as_options(value: Any) -> list[str] | None:
    """The ``add`` options that give this schedule back (None for a kind ``add`` cannot
    write: a class of the application's own)."""
    if isinstance(value, rrule):
        zone = ["--tz", value.named_zone] if value.named_zone else []
        return ["--rrule", rrule_text(value), *zone]
    if isinstance(value, crontab):
        fields = [value._orig_minute, value._orig_hour, value._orig_day_of_month,
                  value._orig_month_of_year, value._orig_day_of_week]
        named = getattr(value, "timezone", None)
        return ["--cron", " ".join(str(f) for f in fields), *(["--tz", named] if named else [])]
    if isinstance(value, clocked):
        return ["--at", value.run_at.isoformat()]
    if isinstance(value, solar):
        return ["--solar", f"{value.event} {value.lat:g},{value.lon:g}"]
    if isinstance(value, schedule):
        return ["--every", seconds_text(value.run_every.total_seconds())]
    return None


def zone_name_of(value: Any) -> str | None:
    """The IANA zone a schedule is evaluated in, when it names one: ``edit`` keeps it
    for a new ``--cron``/``--rrule`` given without ``--tz``."""
    if isinstance(value, rrule):
        return value.named_zone
    if isinstance(value, crontab):
        return getattr(value, "timezone", None)
    return None


def describe(value: Any) -> str:
    """A schedule in words, for tables: the same syntax as the options that give it."""
    if isinstance(value, rrule):
        named = value.named_zone
        return f"rrule {rrule_text(value)}" + (f" ({named})" if named else "")
    if isinstance(value, crontab):
        fields = [value._orig_minute, value._orig_hour, value._orig_day_of_month,
                  value._orig_month_of_year, value._orig_day_of_week]
        zone = getattr(value, "timezone", None)
        return "cron " + " ".join(str(f) for f in fields) + (f" ({zone})" if zone else "")
    if isinstance(value, clocked):
        return f"once at {value.run_at.isoformat()}"
    if isinstance(value, solar):
        return f"solar {value.event} at {value.lat},{value.lon}"
    if isinstance(value, schedule):
        return f"every {seconds_text(value.run_every.total_seconds())}"
    return repr(value)

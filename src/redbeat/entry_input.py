"""An entry's parts as an operator types them, read once for every way in: the CLI's
``add``/``edit`` options and the web view's entry form give the same text to the same
functions, so both accept and refuse the same input with the same words.

``values`` is a mapping of field names (the CLI's option destinations, which the web
form uses as its input names) to text, or None for a field not given. Each function
reads one part (the schedule, the policy, the apply_async options) and raises
:class:`FieldError` naming the field at fault, so the CLI prints one line and the web
form shows the message beside the field, keeping what was typed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import tzinfo
from typing import Any

from celery.schedules import solar

from .policy import EntryPolicy
from .schedule_text import (
    parse_cron,
    parse_every,
    parse_json,
    parse_limit,
    parse_rrule,
    parse_time,
    parse_zone,
)
from .schedules import clocked

#: The schedule fields, in the order ``add`` documents them; an entry has one.
SCHEDULE_FIELDS = ("every", "cron", "rrule_text", "run_at", "solar")
#: Policy fields and the EntryPolicy attribute each sets.
POLICY_FIELDS = {"start": "start_time", "end": "end_time",
                 "misfire_grace": "misfire_grace_time", "coalesce": "coalesce",
                 "jitter": "jitter", "ttl": "ttl", "overlap": "overlap",
                 "relative_to": "relative_to", "lost_after": "lost_after"}
#: How the CLI names a field in its messages (``--every``); the web form passes its own.
Label = Callable[[str], str]


def option_label(field: str) -> str:
    return {"rrule_text": "--rrule", "run_at": "--at", "zone": "--tz", "args_json": "--args",
            "kwargs_json": "--kwargs", "options_json": "--options"}.get(
        field, "--" + field.replace("_", "-"))


class FieldError(ValueError):
    """Bad input in one field: ``str()`` is the message (naming the field as the caller
    labels it), ``field`` the field's name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _given(values: Mapping[str, Any], field: str) -> Any:
    value = values.get(field)
    return None if value is None or isinstance(value, str) and not value.strip() else value


def parse_solar(text: str, label: str = "--solar") -> solar:
    """``EVENT LAT,LON``: ``sunrise 48.85,2.35`` (an event Celery's solar knows)."""
    event, _, place = text.strip().partition(" ")
    lat, _, lon = place.replace(" ", "").partition(",")
    if event not in solar._all_events:
        raise ValueError(f"{label}: the event must be one of "
                         f"{', '.join(sorted(solar._all_events))}, not {event!r}")
    try:
        latitude, longitude = float(lat), float(lon)
    except ValueError:
        raise ValueError(f"{label} wants EVENT LAT,LON such as 'sunrise 48.85,2.35', "
                         f"not {text.strip()!r}") from None
    if not (-90 <= latitude <= 90 and -180 <= longitude <= 180):
        raise ValueError(f"{label}: latitude -90..90 and longitude -180..180")
    return solar(event, latitude, longitude)


def schedule_from(values: Mapping[str, Any], label: Label = option_label,
                  reading_zone: str | tzinfo | None = None) -> Any:
    """The schedule the fields give (None when they give none); more than one is a
    FieldError on the second. ``run_at`` and ``rrule_text`` are read in ``zone`` when
    given, else in ``reading_zone`` (the app's, for a caller that knows the app: what
    every time typed for an entry is read in, docs/cli.md); ``cron`` without ``zone``
    follows the app's zone, as a crontab of ``beat_schedule`` does."""
    given = [field for field in SCHEDULE_FIELDS if _given(values, field)]
    if len(given) > 1:
        raise FieldError(given[1], f"give only one of {', '.join(map(label, given))}")
    try:
        zone = parse_zone(_given(values, "zone"), label("zone"))
    except ValueError as exc:
        raise FieldError("zone", str(exc)) from None
    if not given:
        return None
    field = given[0]
    text = str(values[field])
    try:
        if field == "every":
            return parse_every(text, label(field))
        if field == "cron":
            return parse_cron(text, zone, label(field))
        if field == "rrule_text":
            return parse_rrule(text, zone or reading_zone, label(field))
        if field == "run_at":
            return clocked(parse_time(text, zone or reading_zone, label(field)))
        return parse_solar(text, label(field))
    except ValueError as exc:
        raise FieldError(field, str(exc)) from None


def _seconds(text: Any, field: str, label: Label) -> float:
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return float(text)
    except ValueError:
        return parse_every(text, label(field))


def _policy_words(message: str, label: Label) -> str:
    """EntryPolicy's message with its attribute names as the caller labels the fields."""
    for field, name in POLICY_FIELDS.items():
        message = message.replace(f"policy {name!r}", label(field)).replace(
            repr(name), label(field))
    return message


def policy_from(values: Mapping[str, Any], base: EntryPolicy,
                label: Label = option_label,
                reading_zone: str | tzinfo | None = None) -> EntryPolicy:
    """``base`` with the policy fields given, each checked by EntryPolicy itself as it
    is applied (so "end before start" is the end's fault). ``start``/``end``: an ISO
    time read in ``zone`` (else ``reading_zone``) or ``none``; ``misfire_grace``/``ttl``:
    seconds, a duration or ``none``; ``coalesce``: a bool; ``jitter``: seconds or a
    duration; ``overlap``: allow, skip or buffer_one; ``relative_to``: schedule or
    execution; ``lost_after``: seconds, a duration or ``none`` (docs/outcomes.md)."""
    try:
        zone = parse_zone(_given(values, "zone"), label("zone")) or reading_zone
    except ValueError as exc:
        raise FieldError("zone", str(exc)) from None
    policy = base
    for field, name in POLICY_FIELDS.items():
        value = _given(values, field)
        if value is None:
            continue
        try:
            if field in ("start", "end"):
                value = (None if str(value).strip().lower() == "none"
                         else parse_time(str(value).strip(), zone, label(field)))
            elif field in ("misfire_grace", "ttl", "lost_after"):
                value = parse_limit(str(value), label(field))
            elif field == "jitter":
                value = _seconds(value, field, label)
            policy = dataclasses.replace(policy, **{name: value})
        except ValueError as exc:
            raise FieldError(field, _policy_words(str(exc), label)) from None
    return policy


def options_from(values: Mapping[str, Any], base: Mapping[str, Any] | None,
                 label: Label = option_label) -> dict[str, Any] | None:
    """apply_async options: ``options_json`` replaces them; ``queue``, ``priority``
    (0-255) and ``expires`` (seconds or a duration) set one each."""
    options = dict(base or {})
    text = _given(values, "options_json")
    if text is not None:
        try:
            options = parse_json(text, label("options_json"), dict)
        except ValueError as exc:
            raise FieldError("options_json", str(exc)) from None
    queue = _given(values, "queue")
    if queue:
        options["queue"] = str(queue).strip()
    priority = _given(values, "priority")
    if priority is not None:
        try:
            options["priority"] = int(str(priority).strip())
        except ValueError:
            options["priority"] = -1
        if not 0 <= options["priority"] <= 255:
            raise FieldError("priority", f"{label('priority')} wants a whole number 0-255, "
                                         f"not {str(priority).strip()!r}")
    expires = _given(values, "expires")
    if expires is not None:
        try:
            options["expires"] = _seconds(str(expires).strip(), "expires", label)
        except ValueError as exc:
            raise FieldError("expires", str(exc)) from None
    return options or None


def json_field(values: Mapping[str, Any], field: str, kind: type,
               label: Label = option_label) -> Any:
    """``args_json`` (a list) or ``kwargs_json`` (an object); None when not given."""
    try:
        return parse_json(_given(values, field), label(field), kind)
    except ValueError as exc:
        raise FieldError(field, str(exc)) from None


__all__ = ["POLICY_FIELDS", "SCHEDULE_FIELDS", "FieldError", "json_field", "option_label",
           "options_from", "parse_solar", "policy_from", "schedule_from"]

"""The entry form (create and edit): its fields from a stored entry, and a submitted
form read into an entry's parts with an error per field.

Every part is read by ``redbeat.entry_input``, as the CLI's ``add``/``edit`` read their
options: the same text is accepted or refused the same way, with the same words. The
form's values are kept as typed, so a page showing the errors shows the input too.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

from .. import guards
from .. import labels as label_rules
from ..entry_input import (
    SCHEDULE_FIELDS,
    FieldError,
    json_field,
    options_from,
    policy_from,
    schedule_from,
)
from ..policy import EntryPolicy
from ..schedule_text import as_options, seconds_text, zone_name_of

#: The schedule kinds, as the form's select offers them (the CLI's option names).
KINDS = {"every": "interval", "cron": "crontab", "rrule_text": "rrule", "run_at": "one-off",
         "solar": "solar"}
#: How the form names each field in its messages (and its labels).
LABELS = {"name": "Name", "task": "Task", "schedule": "Schedule", "zone": "Zone",
          "args_json": "Arguments", "kwargs_json": "Keyword arguments", "queue": "Queue",
          "priority": "Priority", "expires": "Expires", "options_json": "Other options",
          "start": "Start", "end": "End", "misfire_grace": "Misfire grace",
          "coalesce": "Coalesce", "jitter": "Jitter", "ttl": "TTL", "labels": "Labels",
          "overlap": "Overlap", "relative_to": "Count from", "lost_after": "Lost after",
          **{kind: "Schedule" for kind in KINDS}}
#: The options that have a field of their own; the rest are edited as JSON.
OWN_OPTIONS = ("queue", "priority", "expires")
TEXT_FIELDS = ("name", "task", "kind", "schedule", "zone", "args_json", "kwargs_json",
               "queue", "priority", "expires", "options_json", "start", "end",
               "misfire_grace", "jitter", "ttl", "coalesce", "labels", "overlap",
               "relative_to", "lost_after")


def label(name: str) -> str:
    return LABELS.get(name, name)


@dataclass
class EntryForm:
    """What the form shows: the values as typed and the error of each field."""

    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def submitted(cls, form: Mapping[str, str]) -> EntryForm:
        return cls({name: str(form.get(name, "")) for name in TEXT_FIELDS})

    @classmethod
    def empty(cls) -> EntryForm:
        return cls({name: "" for name in TEXT_FIELDS} | {
            "kind": "every", "args_json": "[]", "kwargs_json": "{}", "coalesce": "yes",
            "overlap": "allow", "relative_to": "schedule"})


def _time_text(moment: datetime | None, zone: tzinfo) -> str:
    return "" if moment is None else moment.astimezone(zone).replace(tzinfo=None).isoformat()


def _seconds(value: float | None) -> str:
    return "" if value is None else seconds_text(value)


def from_entry(entry: Any, app_zone: tzinfo) -> EntryForm:
    """The form of a stored entry: its schedule in the CLI's syntax, the window's times
    in the form's zone (the schedule's own, else the app's), without an offset."""
    options = as_options(entry.schedule) or []
    given = dict(zip(options[0::2], options[1::2], strict=True))
    kind = {"--every": "every", "--cron": "cron", "--rrule": "rrule_text", "--at": "run_at",
            "--solar": "solar"}.get(options[0] if options else "", "every")
    zone_name = zone_name_of(entry.schedule) or ""
    zone = _zone(zone_name) or app_zone
    policy: EntryPolicy = entry.policy
    stored = dict(entry.options or {})
    own = {name: stored.pop(name) for name in OWN_OPTIONS if name in stored}
    values = {
        "name": entry.name, "task": str(entry.task), "kind": kind,
        "schedule": given.get(options[0], "") if options else "", "zone": zone_name,
        "args_json": json.dumps(list(entry.args or []), default=repr),
        "kwargs_json": json.dumps(dict(entry.kwargs or {}), default=repr),
        "queue": str(own.get("queue", "")), "priority": str(own.get("priority", "")),
        "expires": str(own.get("expires", "")),
        "options_json": json.dumps(stored, default=repr) if stored else "",
        "start": _time_text(policy.start_time, zone), "end": _time_text(policy.end_time, zone),
        "misfire_grace": _seconds(policy.misfire_grace_time), "jitter":
            _seconds(policy.jitter) if policy.jitter else "", "ttl": _seconds(policy.ttl),
        "coalesce": "yes" if policy.coalesce else "no",
        "labels": ", ".join(entry.labels or ()),
        "overlap": policy.overlap, "relative_to": policy.relative_to,
        "lost_after": _seconds(policy.lost_after),
    }
    return EntryForm(values)


def _zone(name: str) -> tzinfo | None:
    from zoneinfo import ZoneInfo
    try:
        return ZoneInfo(name) if name else None
    except (ValueError, KeyError, OSError):
        return None


@dataclass
class Parts:
    """An entry's parts read from the form (None where the field had an error)."""

    name: str = ""
    task: str = ""
    schedule: Any = None
    args: list[Any] | None = None
    kwargs: dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    policy: EntryPolicy | None = None
    labels: tuple[str, ...] = ()


def read(form: EntryForm, base_policy: EntryPolicy,
         registered: Collection[str] | None, accept_task: bool,
         default_zone: str | None = None) -> Parts:
    """Read every part, recording each field's error on ``form``. ``registered``: the
    task names the app registers (None: unknown, as the standalone CLI); an unknown
    one is refused unless ``accept_task`` (the CLI's ``--force``). A time without an
    offset (one-off, start, end) is read in the form's zone, else ``default_zone``
    (the app's), the zone every time on the page is shown in; a crontab or rrule
    without a zone follows the app's, as beat evaluates it."""
    values = dict(form.values)
    parts = Parts(name=values["name"].strip(), task=values["task"].strip())
    if not parts.name:
        form.errors["name"] = "Name: give the entry a name"
    problem = guards.task_problem(parts.task, registered if registered is not None
                                  else {parts.task}, "Task")
    if problem and (not accept_task or not parts.task):
        form.errors["task"] = problem.replace("give --force", "tick the box below")
    kind = values["kind"] if values["kind"] in KINDS else "every"
    fields = {name: None for name in SCHEDULE_FIELDS} | {kind: values["schedule"],
                                                        "zone": values["zone"]}
    schedule_values = {**values, **fields}
    try:
        parts.schedule = schedule_from(schedule_values, label, default_zone)
        if parts.schedule is None:
            form.errors["schedule"] = f"Schedule: give the {KINDS[kind]}"
    except FieldError as exc:
        field_name = "schedule" if exc.field in SCHEDULE_FIELDS else exc.field
        message = str(exc)  # celery's crontab speaks for itself: "Invalid end range"
        form.errors[field_name] = (message if message.startswith(label(field_name))
                                   else f"{label(field_name)}: {message}")
    for name, kind_of in (("args_json", list), ("kwargs_json", dict)):
        try:
            value = json_field(values, name, kind_of, label)
            setattr(parts, name[:-5], value if value is not None else kind_of())
        except FieldError as exc:
            form.errors[name] = str(exc)
    try:
        parts.options = options_from(values, None, label)
    except FieldError as exc:
        form.errors[exc.field] = str(exc)
    policy_values = {**values, "coalesce": values["coalesce"] != "no"}
    try:
        parts.policy = policy_from(policy_values, base_policy, label, default_zone)
    except FieldError as exc:
        form.errors[exc.field] = str(exc)
    try:
        parts.labels = label_rules.normalized(
            [text for text in values["labels"].split(",") if text.strip()])
    except ValueError as exc:
        form.errors["labels"] = f"Labels: {exc}"
    return parts


#: The policy fields the form shows (EntryPolicy attributes): an edit starts from their
#: defaults, so a field emptied in the form is taken back.
FORM_POLICY = ("start_time", "end_time", "misfire_grace_time", "coalesce", "jitter", "ttl",
               "overlap", "relative_to", "lost_after")


def default_policy(old: EntryPolicy | None) -> EntryPolicy:
    """The policy an edit starts from: the defaults for the fields the form shows,
    the entry's own for those it has no field for (catch-up bound, overlap...)."""
    if old is None:
        return EntryPolicy()
    defaults = EntryPolicy()
    return dataclasses.replace(old, **{name: getattr(defaults, name) for name in FORM_POLICY})


__all__ = ["KINDS", "EntryForm", "Parts", "default_policy", "from_entry", "label", "read"]

"""Schedules kept by other Celery schedulers, read as this package's entries (pure).

django-celery-beat keeps a periodic task as a row of its ``periodictask`` table joined
to one schedule row (interval, crontab, solar or clocked); Celery's own
``PersistentScheduler`` keeps ``celery.beat.ScheduleEntry`` objects in a shelve file.
:mod:`redbeat.migrate` reads both; here each record becomes the keyword arguments of a
``RedBeatSchedulerEntry`` and a note for whatever could not be carried as it was, so
the importer's report and its dry run say the same thing.

The translation follows what each scheduler does at run time, not only what its
columns are called: django-celery-beat counts a never-run task from the row's last
change (or runs it at ``start_time``), disables a task past ``expires`` and adds a
``periodic_task_name`` header to every message; the entries made here do the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from celery import schedules as celery_schedules

from .schedules import clocked, crontab

#: django-celery-beat's interval periods, which are timedelta's keyword names
PERIODS = frozenset({"days", "hours", "minutes", "seconds", "microseconds"})
#: Message options django-celery-beat keeps in columns of their own
OPTION_COLUMNS = ("queue", "exchange", "routing_key", "priority")


class NotCarried(ValueError):
    """A record that cannot become an entry here; the reason names what is wrong."""


@dataclass
class Carried:
    """One record of another scheduler, as the arguments of an entry here."""

    name: str
    #: ``RedBeatSchedulerEntry`` keyword arguments (schedule, policy fields, meta...)
    fields: dict[str, Any]
    #: what was translated or left behind, one sentence each, for the report
    notes: list[str] = field(default_factory=list)
    #: a one-off whose run time follows from its schedule: the importer replaces the
    #: schedule by a one-off at the schedule's next run (it needs the app to find it)
    one_off: bool = False


def moment(value: Any) -> datetime | None:
    """A time as a database driver returns it (a datetime, or SQLite's text), in UTC;
    naive times are UTC, as Django stores them with ``USE_TZ`` on (its default)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace(" ", "T", 1))
    if not isinstance(value, datetime):
        raise NotCarried(f"not a time: {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _json(row: Mapping[str, Any], column: str, default: Any) -> Any:
    text = row.get(column)
    if text is None or text == "":
        return default
    try:
        return json.loads(text)
    except ValueError as exc:
        raise NotCarried(f"{column} is not JSON: {exc}") from exc


def _number(value: Any) -> float:
    return float(value) if isinstance(value, Decimal) else float(value)


def dcb_schedule(row: Mapping[str, Any]) -> Any:
    """The schedule a joined django-celery-beat row names (its ``*_id`` column set)."""
    if row.get("interval_every") is not None:
        period = row.get("interval_period")
        if period not in PERIODS:
            raise NotCarried(f"interval period {period!r} is not one of {sorted(PERIODS)}")
        every = timedelta(**{period: int(row["interval_every"])})
        if every <= timedelta(0):
            raise NotCarried(f"interval of {row['interval_every']} {period} never runs")
        return celery_schedules.schedule(every)
    if row.get("crontab_minute") is not None:
        return crontab(
            minute=row["crontab_minute"], hour=row["crontab_hour"],
            day_of_week=row["crontab_day_of_week"], day_of_month=row["crontab_day_of_month"],
            month_of_year=row["crontab_month_of_year"],
            timezone=str(row.get("crontab_timezone") or "UTC"))
    if row.get("solar_event") is not None:
        return celery_schedules.solar(row["solar_event"], _number(row["solar_latitude"]),
                                      _number(row["solar_longitude"]))
    if row.get("clocked_time") is not None:
        run_at = moment(row["clocked_time"])
        assert run_at is not None
        return clocked(run_at)
    raise NotCarried("it has no schedule (no interval, crontab, solar or clocked row)")


def from_periodic_task(row: Mapping[str, Any]) -> Carried:
    """A django-celery-beat ``PeriodicTask`` row joined to its schedule row (the
    columns :data:`redbeat.migrate.DCB_QUERY` selects)."""
    name = str(row["name"])
    try:
        return _periodic_task(name, row)
    except (NotCarried, ValueError, TypeError, KeyError) as exc:
        raise NotCarried(f"{name}: {exc}") from exc


def _periodic_task(name: str, row: Mapping[str, Any]) -> Carried:
    notes: list[str] = []
    schedule = dcb_schedule(row)
    options: dict[str, Any] = {column: row[column] for column in OPTION_COLUMNS
                               if row.get(column) not in (None, "")}
    headers = _json(row, "headers", {})
    if not isinstance(headers, dict):
        raise NotCarried("headers is not a JSON object")
    # django-celery-beat names the task in a header of every message it sends
    options["headers"] = {**headers, "periodic_task_name": name}
    expires = moment(row.get("expires"))
    if expires is not None:
        options["expires"] = expires
    elif row.get("expire_seconds") is not None:
        options["expires"] = int(row["expire_seconds"])
    args = _json(row, "args", [])
    kwargs = _json(row, "kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise NotCarried("args must be a JSON list and kwargs a JSON object")
    start_time = moment(row.get("start_time"))
    last_run_at = moment(row.get("last_run_at"))
    enabled = bool(row.get("enabled", True))
    total_run_count = int(row.get("total_run_count") or 0)
    if last_run_at is None and start_time is None and not isinstance(schedule, clocked):
        # django-celery-beat counts a task that never ran from the row's last change
        last_run_at = moment(row.get("date_changed"))
    one_off = bool(row.get("one_off")) and not isinstance(schedule, clocked)
    if one_off and total_run_count > 0:
        # django-celery-beat disables a one-off that ran when it next looks at it
        enabled, one_off = False, False
        notes.append("a one-off task that already ran: imported disabled")
    if row.get("description"):
        notes.append("its description is not carried (entries here have none)")
    fields: dict[str, Any] = {
        "task": row["task"], "schedule": schedule, "args": args, "kwargs": kwargs,
        "options": options, "enabled": enabled, "last_run_at": last_run_at,
        "total_run_count": total_run_count,
    }
    if start_time is not None:
        fields["start_time"] = start_time
    if expires is not None:
        fields["end_time"] = expires  # django-celery-beat disables it from then on
    return Carried(name, fields, notes, one_off=one_off)


def from_shelve_entry(name: str, entry: Any) -> Carried:
    """A ``celery.beat.ScheduleEntry`` as Celery's ``PersistentScheduler`` shelved it."""
    schedule = getattr(entry, "schedule", None)
    if not isinstance(schedule, (celery_schedules.schedule, celery_schedules.crontab,
                                 celery_schedules.solar)):
        raise NotCarried(f"{name}: its schedule {schedule!r} is not an interval, crontab "
                         "or solar schedule")
    last_run_at = entry.last_run_at
    if isinstance(last_run_at, datetime) and last_run_at.tzinfo is None:
        # Celery shelves naive times in UTC when its utc_enabled is on (the default)
        last_run_at = last_run_at.replace(tzinfo=timezone.utc)
    fields = {
        "task": entry.task, "schedule": schedule, "args": list(entry.args or ()),
        "kwargs": dict(entry.kwargs or {}), "options": dict(entry.options or {}),
        "last_run_at": last_run_at, "total_run_count": int(entry.total_run_count or 0),
    }
    return Carried(name, fields)

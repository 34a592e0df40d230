"""Importing the schedule of another Celery scheduler: django-celery-beat's tables
(SQLite, PostgreSQL, or whatever database the Django project is configured with) and
Celery's own ``PersistentScheduler`` shelve file.

Reading is here (database drivers, shelve); what each record means is
:mod:`redbeat.foreign`. Writing goes through the store, an entry at a time, as
``save()`` writes it but with the source's run count kept. An import is idempotent
(an entry already equal to its source is left alone) and never writes over an entry
that was changed here since it was imported (by the CLI, Python, the web view or
beat's statics) unless asked to: after the move, this schedule is the one people edit.
"""

from __future__ import annotations

import json
import shelve
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from celery import Celery

from . import legacy
from .entry import InvalidEntry, RedBeatSchedulerEntry, changed_json
from .entry_fields import meta_json, parse_meta
from .foreign import Carried, NotCarried, from_periodic_task, from_shelve_entry
from .keys import CHANGED, DEFINITION, META, POLICY
from .runtime import store_for
from .schedules import clocked

#: Every column the converter reads, one joined row per periodic task. The tables and
#: columns are django-celery-beat's own (2.x; the same names on every database).
DCB_QUERY = """
SELECT t.name, t.task, t.args, t.kwargs, t.queue, t.exchange, t.routing_key, t.headers,
       t.priority, t.expires, t.expire_seconds, t.one_off, t.start_time, t.enabled,
       t.last_run_at, t.total_run_count, t.date_changed, t.description,
       i.every AS interval_every, i.period AS interval_period,
       c.minute AS crontab_minute, c.hour AS crontab_hour,
       c.day_of_week AS crontab_day_of_week, c.day_of_month AS crontab_day_of_month,
       c.month_of_year AS crontab_month_of_year, c.timezone AS crontab_timezone,
       s.event AS solar_event, s.latitude AS solar_latitude, s.longitude AS solar_longitude,
       k.clocked_time AS clocked_time
FROM django_celery_beat_periodictask t
LEFT JOIN django_celery_beat_intervalschedule i ON t.interval_id = i.id
LEFT JOIN django_celery_beat_crontabschedule c ON t.crontab_id = c.id
LEFT JOIN django_celery_beat_solarschedule s ON t.solar_id = s.id
LEFT JOIN django_celery_beat_clockedschedule k ON t.clocked_id = k.id
ORDER BY t.name
"""

#: What ``changed.by`` says of an entry this importer wrote
IMPORTER = "import"


class SourceError(ValueError):
    """The source cannot be read at all (no such file, not its tables, no driver)."""


def _rows(cursor: Any) -> Iterator[dict[str, Any]]:
    cursor.execute(DCB_QUERY)
    columns = [column[0] for column in cursor.description]
    for values in cursor.fetchall():
        yield dict(zip(columns, values, strict=True))


def django_celery_beat_rows(database: str | None) -> list[dict[str, Any]]:
    """The periodic tasks of a django-celery-beat database: ``sqlite:///path``,
    ``postgresql://user:pw@host:port/db``, or None for the database of the Django
    project that ``DJANGO_SETTINGS_MODULE`` names (any backend Django supports)."""
    try:
        if database is None:
            return _django_rows()
        url = urlsplit(database)
        if url.scheme == "sqlite":
            return _sqlite_rows(unquote(url.path[1:] if url.path.startswith("//")
                                        else url.path))
        if url.scheme in ("postgres", "postgresql"):
            return _postgres_rows(database)
    except SourceError:
        raise
    except Exception as exc:  # a driver's own error: say what it was, in one line
        raise SourceError(f"cannot read django-celery-beat's tables: "
                          f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}") from exc
    raise SourceError(f"--database {database!r}: expected sqlite:///path or "
                      "postgresql://user:password@host/dbname")


def _sqlite_rows(path: str) -> list[dict[str, Any]]:
    import sqlite3
    from pathlib import Path
    if not Path(path).is_file():
        raise SourceError(f"no SQLite database at {path}")
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(_rows(connection.cursor()))
    finally:
        connection.close()


def _postgres_rows(url: str) -> list[dict[str, Any]]:
    try:
        import psycopg
    except ImportError as exc:
        raise SourceError("reading PostgreSQL needs psycopg: "
                          "pip install 'psycopg[binary]'") from exc
    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as connection:
        return list(_rows(connection.cursor()))


def _django_rows() -> list[dict[str, Any]]:
    import os
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise SourceError("give --database, or set DJANGO_SETTINGS_MODULE to read the "
                          "Django project's own database")
    import django
    django.setup()
    from django.db import connection
    with connection.cursor() as cursor:
        return list(_rows(cursor))


def shelve_entries(path: str) -> dict[str, Any]:
    """The entries of a ``celerybeat-schedule`` file (Celery's default scheduler)."""
    try:
        with shelve.open(path, flag="r") as db:
            entries = db.get("entries")
    except Exception as exc:  # dbm's own errors differ by backend
        raise SourceError(f"{path} is not a celery beat schedule file: "
                          f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(entries, dict):
        raise SourceError(f"{path} has no entries: not a celery beat schedule file")
    return entries


@dataclass
class ForeignPlan:
    """What an import of another scheduler's records does, by entry name."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    #: changed here since it was imported: left alone unless ``overwrite``
    kept: list[str] = field(default_factory=list)
    #: name -> why it could not be imported
    refused: dict[str, str] = field(default_factory=dict)
    #: name -> what was translated or left behind
    notes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def written(self) -> list[str]:
        return self.created + self.updated


def records_of(rows: Iterable[Mapping[str, Any]], plan: ForeignPlan) -> list[Carried]:
    carried = []
    for row in rows:
        try:
            carried.append(from_periodic_task(row))
        except NotCarried as exc:
            plan.refused[str(row.get("name"))] = str(exc).split(": ", 1)[-1]
    return carried


def shelve_records(entries: Mapping[str, Any], plan: ForeignPlan) -> list[Carried]:
    carried = []
    for name, entry in sorted(entries.items()):
        try:
            carried.append(from_shelve_entry(name, entry))
        except NotCarried as exc:
            plan.refused[name] = str(exc).split(": ", 1)[-1]
    return carried


def import_foreign(app: Celery, records: Iterable[Carried], plan: ForeignPlan | None = None,
                   dry_run: bool = False, overwrite: bool = False,
                   statics: Iterable[str] = ()) -> ForeignPlan:
    """Write ``records`` as entries of ``app``'s schedule; see the module's docstring.

    ``statics`` names the records that are the app's own ``beat_schedule`` entries:
    written as statics, so their run history carries over and the leader keeps them
    in step with the app from then on."""
    plan = plan if plan is not None else ForeignPlan()
    store = store_for(app)
    static_names = set(statics)
    for record in records:
        try:
            entry = _entry(app, record)
        except (ValueError, TypeError, InvalidEntry) as exc:
            plan.refused[record.name] = f"{type(exc).__name__}: {exc}"
            continue
        if record.notes:
            plan.notes[record.name] = record.notes
        stored, _, _ = store.entry_record(entry.key, entry.name)
        definition = entry.definition_json()
        policy = entry.policy.to_json()
        if stored and legacy.real_text(stored.get(DEFINITION) or "") == \
                legacy.real_text(definition) and stored.get(POLICY) == policy:
            plan.unchanged.append(entry.name)
            continue
        if stored and _changed_by(stored) != IMPORTER and not overwrite:
            plan.kept.append(entry.name)
            continue
        (plan.updated if stored else plan.created).append(entry.name)
        if dry_run:
            continue
        if stored.get(META):
            # the run history kept (the store writes meta only when absent): the next
            # run follows from it, as save() would find it
            last_run_at, _ = parse_meta(entry.key, stored[META])
            score = entry.copy(last_run_at=last_run_at).score
        else:
            score = entry.score
        store.save(entry.key, definition, meta_json(entry.last_run_at, entry.total_run_count),
                   score, changed_json(IMPORTER), policy)
        if entry.name in static_names:
            store.record_statics([entry.name])
    return plan


def _entry(app: Celery, record: Carried) -> RedBeatSchedulerEntry:
    entry = RedBeatSchedulerEntry(record.name, app=app, **record.fields)
    if record.fields.get("last_run_at") is None:
        # never ran: the constructor's "created now" would put the first run one
        # interval from now, where the source runs it at its start time
        entry = entry.copy(last_run_at=None)
    if record.one_off:
        # a one-off of django-celery-beat's on a recurring schedule: its one run is the
        # schedule's next one, so it becomes a one-off at that time
        due = entry.due_at
        if due is None:
            raise ValueError("a one-off task whose schedule has no run left")
        record.notes.append(f"a one-off task on a recurring schedule: imported as a "
                            f"one-off at its next run, {due.isoformat()}")
        entry = entry.copy(schedule=clocked(due), last_run_at=None)
    return entry


def _changed_by(fields: Mapping[str, str]) -> str | None:
    try:
        changed = json.loads(fields.get(CHANGED) or "{}")
    except ValueError:
        return None
    return changed.get("by") if isinstance(changed, dict) else None

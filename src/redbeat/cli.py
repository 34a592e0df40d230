"""The ``redbeat`` command line: list, inspect and change entries; status; health.

Two ways in, one set of commands:

    redbeat --url redis://host:6379/1 list
    celery -A proj redbeat list          # reads the app's redbeat settings

Exit codes scripts can rely on: 0 done (or healthy), 1 unhealthy or failed,
2 bad usage, 3 no such entry, 4 Redis unreachable, 5 invalid input, 6 Redis refused
the credentials (authentication or ACL), 7 refused without --force (a static entry),
8 invalid settings (the app's or redbeat's: nothing was read or written), 9 `check`
only: beat is healthy but entries need attention (quarantined or failing), 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from datetime import datetime, tzinfo
from typing import IO, Any, NoReturn
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click
import redis.exceptions
from celery import Celery

from . import (
    __version__,
    audit,
    browse,
    export_file,
    groups,
    guards,
    health,
    legacy,
    manage,
    migrate,
)
from . import labels as label_rules
from .connection import OWN_OPTIONS
from .entry import (
    EntryNotFound,
    InvalidEntry,
    RedBeatSchedulerEntry,
)
from .entry_input import SCHEDULE_FIELDS, json_field, options_from, policy_from, schedule_from
from .failures import failing_summary, read_failures
from .keys import CHANGED, CREATED, MISFIRES, KeyLayout
from .lock import Holder, expiry_words
from .nextrun import follows_app_zone, score_time
from .nexttime import utc
from .policy import OVERLAP, RELATIVE_TO, EntryPolicy
from .preflight import check_app, check_redis_url
from .redaction import redact
from .retry import AUTH_ERRORS
from .runs import summary as run_summary
from .runtime import runtime_for, store_for
from .schedule_text import (
    as_options,
    describe,
    parse_zone,
    zone_name_of,
)
from .settings import SettingError, ensure_conf

EXIT_FAILED, EXIT_NOT_FOUND, EXIT_UNREACHABLE, EXIT_INVALID, EXIT_AUTH = 1, 3, 4, 5, 6
EXIT_REFUSED, EXIT_SETTINGS, EXIT_ATTENTION, EXIT_INTERRUPTED = 7, 8, 9, 130
DEFAULT_TIMEOUT = 5.0
SESSION = "redbeat.session"


@dataclasses.dataclass
class Session:
    """The global options, applied when a command first needs the schedule (so help
    and ``--version`` need no Redis), the same way in both forms of the command."""

    url: str | None
    prefix: str | None
    zone: str | None
    timeout: float | None
    #: the app ``celery -A proj`` loaded; None for the standalone ``redbeat``
    celery_app: Celery | None = None
    app: Celery | None = None
    #: who changes are recorded as (``--actor``; None: the operating-system user)
    actor: str | None = None

    def resolve(self) -> Celery:
        if self.app is None:
            base = self.celery_app if self.celery_app is not None else self._standalone()
            if self.celery_app is not None:
                check_app(base)  # before anything is read: exit 8, no entry blamed
            self.app = for_cli(base, self.url, self.prefix, self.timeout)
            check_redis_url(self.app)  # --url or the setting: exit 8, one line
        return self.app

    def _standalone(self) -> Celery:
        if not self.url:
            raise click.UsageError("give --url (or REDBEAT_REDIS_URL)")
        app = Celery("redbeat-cli", set_as_current=False)
        app.conf.update(redbeat_redis_url=self.url, timezone=self.zone or "UTC",
                        redbeat_redis_options={})
        runtime_for(app).zone_unknown = True  # beat's zone is its app's, not known here
        if self.prefix:
            app.conf.redbeat_key_prefix = self.prefix
        return app

    def registered_tasks(self) -> set[str] | None:
        """The task names the app registers once its task modules are imported (as a
        worker imports them); None for the standalone command, which knows no app."""
        if self.celery_app is None:
            return None
        try:
            self.celery_app.loader.import_default_modules()
        except ImportError as exc:
            raise ValueError(f"the app's task modules cannot be imported: {exc}") from exc
        return set(self.celery_app.tasks)

    def reading_zone(self, given: str | None) -> str | tzinfo:
        """The zone an option's time without an offset is read in (``--at``, ``--rrule``,
        ``--start``, ``--end``): ``--tz`` when given; else, under ``celery -A proj``,
        the app's ``timezone`` (where beat evaluates the entry); standalone, where the
        app is unknown, ``--timezone`` (UTC by default), the zone times are shown in."""
        if given:
            return given
        if self.celery_app is not None:
            zone = self.resolve().timezone  # resolved first: an unknown zone is exit 8
            return getattr(zone, "key", None) or zone
        return self.zone or "UTC"

    @property
    def shown_zone(self) -> tzinfo:
        """Where times are shown: ``--timezone``, else the app's zone (UTC standalone)."""
        if self.zone:
            return ZoneInfo(self.zone)
        return self.resolve().timezone


def for_cli(app: Celery, url: str | None, prefix: str | None,
            timeout: float | None) -> Celery:
    """``app`` with a copy of its redbeat settings in which ``--url``/``--prefix`` (when
    given) replace the app's, and Redis is asked to answer within ``--timeout`` seconds
    with no retries: a command line must answer quickly, not retry for the scheduler's
    retry period.

    The app's own settings object is never changed (other code in the process may hold
    it), and options the settings borrowed from ``broker_transport_options`` are not
    handed to the Redis client (``visibility_timeout`` is a kombu option redis-py
    refuses): only the ones redbeat itself reads from there are kept, as the scheduler
    does. The copy replaces the app's settings in its runtime, with a client of its own."""
    config = ensure_conf(app)
    for notice in config.notices:
        click.echo(f"warning: {notice}", err=True)
    options = {name: value for name, value in config.redis_options.items()
               if config.redis_options_from_redbeat or name in OWN_OPTIONS}
    options["retry_period"] = 0
    for name in ("socket_connect_timeout", "socket_timeout"):
        if timeout is not None:
            options[name] = timeout
        else:
            options.setdefault(name, DEFAULT_TIMEOUT)
    changes: dict[str, Any] = {"redis_options": options,
                               "redis_options_from_redbeat": True, "notices": []}
    if url:
        changes.update(redis_url=url, redis_url_is_fallback=False)
    if prefix:
        own_lock = config.lock_key == KeyLayout(config.key_prefix).lock
        changes.update(key_prefix=prefix,
                       lock_key=KeyLayout(prefix).lock if own_lock else config.lock_key)
    # a copy: nothing read again
    runtime_for(app).use_settings(dataclasses.replace(config, **changes), new_client=True)
    return app


def _session(ctx: click.Context) -> Session:
    session = ctx.meta.get(SESSION)
    if not isinstance(session, Session):
        raise click.UsageError("no Celery app: use --url or `celery -A proj redbeat`")
    return session


def _app(ctx: click.Context) -> Celery:
    """The app the command works on: ours (standalone) or the one ``celery -A`` loaded,
    with the global options applied."""
    return _session(ctx).resolve()


def command(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Maps failures to the documented exit codes with a one-line message, classified
    by what went wrong: the entry, the input, the credentials or the connection."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:  # a command that does not stop at a boundary of its own
            fail("interrupted", EXIT_INTERRUPTED)
        except EntryNotFound as exc:  # the one KeyError that means "no such entry"
            fail(str(exc), EXIT_NOT_FOUND)
        except Refused as exc:
            fail(str(exc), EXIT_REFUSED)
        except SettingError as exc:  # before ValueError: a setting, not the command's input
            fail(str(exc), EXIT_SETTINGS)
        except ZoneInfoNotFoundError as exc:  # a KeyError, but bad input, not a lookup
            fail(f"unknown time zone: {exc}", EXIT_INVALID)
        except KeyError as exc:  # a field of an export, a lookup in the input
            fail(f"missing {exc}", EXIT_INVALID)
        except AUTH_ERRORS as exc:
            fail(auth_message(exc), EXIT_AUTH)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            fail(f"Redis unreachable: {redact(str(exc))}", EXIT_UNREACHABLE)
        except (InvalidEntry, ValueError) as exc:
            fail(str(exc), EXIT_INVALID)
        except redis.exceptions.RedisError as exc:
            misplaced = store_for(_app(click.get_current_context())).misplaced_types(exc)
            fail(f"Redis: {misplaced or exc}", EXIT_FAILED)
    return run


def auth_message(exc: BaseException) -> str:
    """What a refused connection means, in words: redis-py's text for a server that
    wants a password the URL does not give is about the HELLO command."""
    text = str(exc)
    if "HELLO must be called" in text or "NOAUTH" in text or "Authentication required" in text:
        return "Redis requires a password and the URL gives none (redis://:PASSWORD@host)"
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return (f"Redis refused the credentials ({text}); check the user name and password "
                "of the URL")
    return f"Redis refused this user the command ({type(exc).__name__}: {text}); check its ACL"


def fail(message: str, code: int) -> NoReturn:
    """One line on standard error, and the exit code: a message that spans lines (a
    YAML parser's, a server's) is joined onto one."""
    click.echo("error: " + " ".join(message.split()), err=True)
    sys.exit(code)


#: The most entries `list` pages by and skips (Redis refuses an offset past 2**63: it
#: failed as a Redis error), and the most upcoming runs `show` lists (each is computed:
#: 100,000,000 ran for hours).
MAX_PAGE = 10**12
MAX_RUNS = 1000


# -- formatting ------------------------------------------------------------------------


#: Characters printed as escapes: C0/C1 controls (a newline in a name forged a row of
#: `list`; an ANSI sequence rewrote the terminal) and the bidi controls that reorder
#: what is shown (a name reading as another).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _shown(text: object) -> str:
    """``text`` for a terminal: a value another client wrote into Redis (a name, a task,
    a reason, a node id) on one line, its control characters escaped."""
    return _UNPRINTABLE.sub(lambda match: match.group().encode("unicode_escape").decode(),
                            str(text))


def _when(moment: datetime | None, zone: tzinfo) -> str:
    if moment is None:
        return "-"
    try:
        return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")  # always with its zone
    except OverflowError:  # year 1 or 9999 in a zone that would move it out of range
        return moment.isoformat()


def _last_run(entry: RedBeatSchedulerEntry | None) -> datetime | None:
    """When it last ran; None for an entry that has not run yet, whose ``last_run_at``
    is only the moment it was created (what its first run counts from)."""
    if entry is None or not entry.total_run_count:
        return None
    return entry.last_run_at


def _state(info: manage.EntryInfo) -> str:
    """The entry's state as shown (``failing`` included: see EntryInfo.shown_state)."""
    return info.shown_state


def _info_json(info: manage.EntryInfo) -> dict[str, Any]:
    entry = info.entry
    last_run = _last_run(entry)
    failures = read_failures(info.fields)
    last_failure = failures.last if failures else None
    return {
        "name": info.name, "key": info.key, "state": _state(info), "static": info.static,
        "task": entry.task if entry else None,
        "schedule": describe(entry.schedule) if entry else None,
        "next_run": info.next_run.isoformat() if info.next_run else None,
        "last_run": last_run.isoformat() if last_run else None,
        "runs": entry.total_run_count if entry else None,
        "failed": failures.count if failures else 0,
        "last_failure": {"task_id": last_failure.task_id, "at": last_failure.at.isoformat(),
                         "reason": last_failure.reason} if last_failure else None,
        "quarantine": info.quarantine or info.error,
        "last_outcome": info.run.state if info.run is not None else None,
        "labels": list(info.labels),
    }


# -- commands --------------------------------------------------------------------------


@click.group(name="redbeat")
@click.option("--url", envvar="REDBEAT_REDIS_URL",
              help="Redis URL of the schedule (under celery: instead of the app's).")
@click.option("--prefix", envvar="REDBEAT_KEY_PREFIX", default=None,
              help="Key prefix (default redbeat:, or the app's under celery).")
@click.option("--timezone", "zone", default=None,
              help="Time zone times are shown in (default UTC, or the app's under celery).")
@click.option("--timeout", type=float, default=None,
              help=f"Seconds to wait for Redis (default {DEFAULT_TIMEOUT:g}).")
@click.option("--actor", envvar="REDBEAT_ACTOR", default=None,
              help="Who changes are recorded as (default: the operating-system user).")
@click.version_option(__version__, "--version", prog_name="redbeat",
                      message="%(prog)s %(version)s")
@click.pass_context
def main(ctx: click.Context, url: str | None, prefix: str | None, zone: str | None,
         timeout: float | None, actor: str | None) -> None:
    """Manage a redbeat schedule in Redis."""
    try:
        zone = parse_zone(zone, "--timezone")
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    if timeout is not None and not timeout > 0:
        fail("--timeout must be a positive number of seconds", EXIT_INVALID)
    celery_app = getattr(ctx.obj, "app", None) if ctx.obj is not None else None
    if ctx.obj is not None and not isinstance(celery_app, Celery):
        raise click.UsageError("no Celery app: use --url or `celery -A proj redbeat`")
    # nothing connects yet: a sub-command's --help must work without --url or Redis
    session = Session(url, prefix, zone, timeout, celery_app, actor=actor)
    if ctx.obj is None:
        ctx.obj = session
    ctx.meta[SESSION] = session


@main.command("list")
@click.option("--json", "as_json", is_flag=True,
              help="JSON lines: one object per entry, one entry per line.")
@click.option("--pattern", default=None, help="Only names matching this glob.")
@click.option("--task", "task_pattern", default=None,
              help="Only entries whose task name matches this glob.")
@click.option("--state", type=click.Choice(browse.ALL_STATES), default=None,
              help="Only entries in this state.")
@click.option("--label", "labels", multiple=True,
              help="Only entries carrying this label (repeat it: every one of them).")
@click.option("--sort", type=click.Choice(list(browse.ORDERS)), default="next",
              show_default=True,
              help="By next run (parked entries last), name, or last run (newest first).")
@click.option("--limit", type=click.IntRange(min=1, max=MAX_PAGE), default=None,
              help="At most this many entries (default: all).")
@click.option("--offset", type=click.IntRange(min=0, max=MAX_PAGE), default=0,
              help="Start at this position of the order (the next page's is printed on "
                   "standard error).")
@click.pass_context
@command
def list_command(ctx: click.Context, as_json: bool, pattern: str | None,
                 task_pattern: str | None, state: str | None, labels: tuple[str, ...],
                 sort: str, limit: int | None, offset: int) -> None:
    """Entries: name, task, schedule, next and last run (with its outcome, as workers with
    redbeat_worker_outcomes report it), runs (and failed ones), state
    (failing: the last dispatch was refused). Read a page at a time through the same
    engine as the web view, so memory stays bounded and each page costs the same
    whatever the schedule's size."""
    query = browse.Query(order=sort, state=state or "", pattern=pattern or "",
                         task_pattern=task_pattern or "",
                         labels=label_rules.normalized(labels), start=offset,
                         size=min(limit + 1 if limit else LIST_PAGE, LIST_PAGE))
    table = _StreamedTable(["NAME", "TASK", "SCHEDULE", "NEXT RUN", "LAST RUN", "RUNS",
                            "STATE"])
    with _ctrl_c() as stop:
        shown, resume = _list_rows(ctx, query, limit, as_json, table, stop)
    if shown and not as_json:
        table.flush()
    if not shown and not as_json:
        click.echo("no entries")
    if resume is not None:
        click.echo(f"more entries match: --offset {resume} for the next page", err=True)


def _list_rows(ctx: click.Context, query: browse.Query, limit: int | None, as_json: bool,
               table: _StreamedTable, stop: Any) -> tuple[int, int | None]:
    """Print the matches; how many, and where the next page starts (None: no more)."""
    zone = _session(ctx).shown_zone
    shown, resume = 0, query.start  # type: int, int | None
    for info, after in browse.iter_matches(_app(ctx), query):
        if stop.requested:
            table.flush()
            fail(f"interrupted after {shown} entries (--offset {resume} goes on from "
                 "there)", EXIT_INTERRUPTED)
        if limit is not None and shown == limit:
            break  # one more matches (read with the page): resume after the last shown
        if as_json:
            click.echo(json.dumps(_info_json(info)))
        else:
            table.add(_row(info, zone))
        shown, resume = shown + 1, after
    else:
        resume = None
    return shown, resume


#: Entries a `list` page reads per round trip of hashes.
LIST_PAGE = 500


class _StreamedTable:
    """A table printed as it is read: the first ``LIST_PAGE`` rows are held so the
    columns fit them, later rows are printed at once, widening a column only for a
    cell that does not fit. Memory stays at one page whatever the listing's length."""

    def __init__(self, headers: list[str]) -> None:
        self.widths = [len(header) for header in headers]
        self.held: list[list[str]] | None = [headers]

    def add(self, row: list[str]) -> None:
        cells = [_shown(cell) for cell in row]
        self.widths = [max(width, len(cell)) for width, cell in zip(self.widths, cells,
                                                                    strict=True)]
        if self.held is None:
            click.echo(self._format(cells))
            return
        self.held.append(cells)
        if len(self.held) > LIST_PAGE:
            self.flush()

    def flush(self) -> None:
        for cells in self.held or ():
            click.echo(self._format(cells))
        self.held = None

    def _format(self, cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, self.widths,
                                                                  strict=True)).rstrip()


def _row(info: manage.EntryInfo, zone: tzinfo) -> list[str]:
    record = _info_json(info)
    runs = str(record["runs"] if record["runs"] is not None else "-")
    return [
        info.name, record["task"] or "?", record["schedule"] or "?",
        _when(info.next_run, zone), _when(_last_run(info.entry), zone)
        + (f" ({_shown(record['last_outcome'])})" if record["last_outcome"] else ""),
        runs + (f" ({record['failed']} failed)" if record["failed"] else ""),
        record["state"] + (" (static)" if info.static else ""),
    ]


@main.command()
@click.argument("name")
@click.option("--runs", type=click.IntRange(min=0, max=MAX_RUNS), default=5,
              show_default=True, help="Upcoming run times to show.")
@click.option("--raw", is_flag=True, help="Also the stored fields, as JSON.")
@click.pass_context
@command
def show(ctx: click.Context, name: str, runs: int, raw: bool) -> None:
    """One entry: task, schedule (also as the `add` options that give it back), args,
    options, last run, policy, misfires, last change, recent and failed dispatches and
    upcoming runs, times in the zone the header names."""
    app = _app(ctx)
    zone = _session(ctx).shown_zone
    info = manage.get_entry(app, name)
    click.echo(f"{_shown(info.name)}  ({_shown(info.key)}, {_state(info)}"
               f"{', static' if info.static else ''}; times in {zone})")
    if info.entry is not None:
        _show_entry(info, ensure_conf(app).misfire_grace_time, zone, ensure_conf(app).lost_after)
    if raw or info.entry is None:
        _show_fields(info)
    if info.quarantine or info.error:
        click.echo(f"quarantined: {_shown(info.quarantine or info.error)}")
    _show_dispatches(info, zone)
    _show_outcomes(info, zone)
    if info.entry is not None and info.entry.enabled:
        _show_next_runs(info.entry, zone, runs, info.score,
                        waiting=info.run is not None and info.run.active)


def _show_entry(info: manage.EntryInfo, default_grace: float | None, zone: tzinfo,
                default_lost_after: float) -> None:
    """The definition, meta, policy, misfires and last change, read as words and times."""
    entry = info.entry
    assert entry is not None
    options = as_options(entry.schedule)
    last_run = _last_run(entry)
    rows = [
        ("task", _shown(entry.task)),
        ("schedule", describe(entry.schedule)),
        ("as options", shlex.join(options) if options else "(none: add cannot write it)"),
        ("args", json.dumps(entry.args, default=repr)),
        ("kwargs", json.dumps(entry.kwargs, default=repr)),
        ("options", json.dumps(entry.options, default=repr)),
        ("last run", f"{_when(last_run, zone)} ({entry.total_run_count} run(s))"
         if last_run else "never"),
        ("policy", _policy_words(entry.policy, default_grace, zone)),
        ("misfires", _misfire_words(info.fields.get(MISFIRES), zone)),
        ("labels", ", ".join(map(_shown, info.labels)) or "none"),
        ("created", _change_words(info.fields.get(CREATED), zone)),
        ("changed", _change_words(info.fields.get(CHANGED), zone)),
        ("last outcome", _outcome_words(info, default_lost_after)),
    ]
    for label, value in rows:
        click.echo(f"{label + ':':<12} {value}")


def _outcome_words(info: manage.EntryInfo, default_lost_after: float) -> str:
    """The latest run as the workers reported it (redbeat_worker_outcomes)."""
    lost_after = (info.entry.policy.lost_after if info.entry is not None else None) \
        or default_lost_after
    return _shown(run_summary(info.run, time.time(), lost_after))


def _show_outcomes(info: manage.EntryInfo, zone: tzinfo) -> None:
    """Recent run outcomes, newest first."""
    if not info.outcomes:
        return
    click.echo("recent outcomes:")
    for record in info.outcomes:
        runtime = f" in {record['runtime']:.2f} s" if record["runtime"] is not None else ""
        error = f": {record['error']}" if record["error"] else ""
        click.echo(f"  {_shown(record['task_id'])}  {_shown(record['outcome'])}{runtime}  "
                   f"finished {_shown(_moment_text(record['finished'], zone))}  "
                   f"on {_shown(record['worker'] or '-')}{_shown(error)}")


def _policy_words(policy: EntryPolicy, default_grace: float | None, zone: tzinfo) -> str:
    grace = policy.misfire_grace_time
    if grace is None:
        grace_text = (f"{default_grace:g}s (redbeat_misfire_grace_time)"
                      if default_grace is not None else "none")
    else:
        grace_text = f"{grace:g}s"
    return ", ".join([
        f"start {_when(policy.start_time, zone)}", f"end {_when(policy.end_time, zone)}",
        f"misfire grace {grace_text}",
        "coalesce" if policy.coalesce else f"no coalesce (up to {policy.max_catch_up} runs)",
        f"jitter {policy.jitter:g}s",
        f"ttl {policy.ttl:g}s" if policy.ttl is not None else "ttl none",
        *([f"overlap {policy.overlap}"] if policy.overlap != "allow" else []),
        *(["relative to execution"] if policy.relative_to == "execution" else []),
        *([f"lost after {policy.lost_after:g}s"] if policy.lost_after is not None else []),
    ])


def _misfire_words(raw: str | None, zone: tzinfo) -> str:
    """The ``misfires`` record: slots skipped as too late or beyond the catch-up bound."""
    if not raw:
        return "none"
    try:
        record = json.loads(raw)
        last = record.get("last_skipped")
        when = _when(datetime.fromisoformat(last), zone) if last else "-"
        return f"{int(record.get('skipped', 0))} slot(s) skipped, the last due {when}"
    except (ValueError, TypeError, AttributeError, RecursionError):
        return raw


def _change_words(raw: str | None, zone: tzinfo) -> str:
    """A ``created``/``changed`` record: when, who, through what, from which process."""
    if not raw:
        return "-"
    change = audit.read(raw)
    if change is None:
        return _shown(raw)
    who = f" by {_shown(change.actor)}" if change.actor else ""
    return (f"{_when(change.at, zone)}{who} through {_shown(change.through)} "
            f"on {_shown(change.node)}")


def _moment_text(value: Any, zone: tzinfo) -> str:
    """An ISO time from a record, in the shown zone; anything else as it is."""
    try:
        return _when(datetime.fromisoformat(str(value)), zone)
    except (ValueError, OverflowError):  # not a time; one the zone cannot hold
        return str(value)


def _show_fields(info: manage.EntryInfo) -> None:
    for field in ("definition", "meta", "changed"):
        raw = info.fields.get(field)
        if raw is not None:
            click.echo(f"{field}:")
            real = legacy.real_text(raw) if field == "definition" else raw
            if real != raw:
                click.echo("  (stored inside a disabled stub, which celery-redbeat 2.4.2 skips)")
                raw = real
            try:
                click.echo("  " + json.dumps(json.loads(raw), indent=2).replace("\n", "\n  "))
            except (ValueError, RecursionError):
                click.echo(f"  {_shown(raw)}")


def _show_dispatches(info: manage.EntryInfo, zone: tzinfo) -> None:
    """Recent dispatches, the refused ones marked, then the failures themselves."""
    failures = read_failures(info.fields)
    failed = failures.task_ids() if failures else {}
    if info.history_error:
        click.echo(f"recent dispatches: ({info.history_error})")
    if info.history:
        click.echo("recent dispatches:")
        for record in info.history:
            failure = failed.get(str(record.get("task_id")))
            click.echo(f"  {_shown(record.get('task_id'))}  due "
                       f"{_shown(_moment_text(record.get('due'), zone))}  "
                       f"by {_shown(record.get('node'))}"
                       + (f"  FAILED: {_shown(failure.reason)}" if failure else ""))
    if failures is not None:
        click.echo(f"failed dispatches: {failures.count} (refused by Celery or the broker; "
                   "not sent)")
        for failure in failures.recent:
            click.echo(f"  {_shown(failure.task_id)}  at {_when(failure.at, zone)}  "
                       f"{_shown(failure.reason)}")


def _show_next_runs(entry: RedBeatSchedulerEntry, zone: tzinfo, runs: int,
                    score: float | None, waiting: bool = False) -> None:
    """``waiting``: the entry's latest run has not ended (a relative_to entry then runs
    after it ends, at the latest at its score, the run's bound)."""
    click.echo("next runs:")
    if runtime_for(entry.app).zone_unknown and follows_app_zone(entry.schedule):
        click.echo("  (in the app's time zone, which this command does not know: "
                   "celery -A proj redbeat show lists them)")
        return
    if entry.policy.relative_to == "execution" and runs:
        # the runs after the next one follow the ends of the runs before them
        moment = score_time(score)
        when = _when(moment, zone) if moment else "due now"
        click.echo(f"  after the run in progress ends, {when} at the latest" if waiting
                   else f"  {when}")
        click.echo("  (then each the schedule's next time after the run before it ends)")
        return
    try:
        upcoming = entry.upcoming(runs, score)
        now = utc(entry.default_now())
        for number, run in enumerate(upcoming):
            # the first as due_at says it: now, when overdue
            click.echo(f"  {_when(max(run.due, now) if number == 0 else run.due, zone)}")
        if len(upcoming) < runs:
            click.echo("  (no more runs)")
    except (OverflowError, ValueError) as exc:
        click.echo(f"  (cannot be computed: {exc})")


#: The options ``add`` and ``edit`` share: what an entry is made of. ``edit`` changes
#: only the ones given; ``add`` requires one schedule.
ENTRY_OPTIONS = [
    click.option("--every", default=None, help="Interval: 30s, 5m, 1h30m, 1d, 1w."),
    click.option("--cron", default=None, help='Crontab: "*/5 * * * *", or @daily, @hourly...'),
    click.option("--rrule", "rrule_text", default=None,
                 help='RFC 5545: "FREQ=DAILY;BYHOUR=9" (as `show` prints it).'),
    click.option("--at", "run_at", default=None, help="One-off: run once at this ISO time."),
    click.option("--solar", default=None,
                 help='Solar event at a place: "sunrise 48.85,2.35" (EVENT LAT,LON).'),
    click.option("--tz", "zone", default=None,
                 help="IANA zone --cron, --rrule, --at and --start/--end without an offset "
                      "are read in (default: the app's timezone under celery -A; "
                      "standalone, --timezone, UTC by default; a --cron without --tz "
                      "follows the app's zone)."),
    click.option("--args", "args_json", default=None, help="Positional arguments, JSON list."),
    click.option("--kwargs", "kwargs_json", default=None,
                 help="Keyword arguments, JSON object."),
    click.option("--options", "options_json", default=None,
                 help='apply_async options, JSON object: \'{"queue": "q", "priority": 5, '
                      '"expires": 60}\'.'),
    click.option("--queue", default=None, help="Queue to send to (one of the options)."),
    click.option("--priority", default=None, help="Message priority 0-255 (one of the options)."),
    click.option("--expires", default=None,
                 help="Seconds or a duration after which a message not yet taken by a "
                      "worker expires (one of the options)."),
    click.option("--start", default=None,
                 help="Send nothing before this ISO time (none: no start)."),
    click.option("--end", default=None, help="Send nothing after this ISO time (none: no end)."),
    click.option("--misfire-grace", default=None,
                 help="Skip a slot sent later than this after its time: seconds or a "
                      "duration (5m); none: the global redbeat_misfire_grace_time."),
    click.option("--coalesce/--no-coalesce", default=None,
                 help="One catch-up run for missed slots (default), or each one (bounded)."),
    click.option("--jitter", type=float, default=None,
                 help="Spread sends over this many seconds."),
    click.option("--ttl", default=None,
                 help="Keep it this long once finished: seconds or a duration (1d); "
                      "none: keep it."),
    click.option("--overlap", type=click.Choice(OVERLAP), default=None,
                 help="A slot due while the previous run goes on: sent (allow), skipped "
                      "(skip), or the latest waits for it (buffer_one). Needs workers with "
                      "redbeat_worker_outcomes."),
    click.option("--relative-to", type=click.Choice(RELATIVE_TO), default=None,
                 help="execution: the next run is the schedule's next time after the "
                      "previous run ended. Needs workers with redbeat_worker_outcomes."),
    click.option("--lost-after", default=None,
                 help="A run silent this long counts as lost and releases the entry: "
                      "seconds or a duration (10m); none: redbeat_lost_after."),
    click.option("--force", is_flag=True,
                 help="Change a static entry anyway; accept a task the app does not register."),
]


def entry_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(ENTRY_OPTIONS):
        fn = option(fn)
    return fn


def _schedule_from(ctx: click.Context, values: dict[str, Any]) -> Any:
    """The schedule the options give, or None when they give none. A crontab without
    ``--tz`` follows the app's zone (as one in ``beat_schedule`` does); every other time
    is read in :meth:`Session.reading_zone`."""
    if sum(1 for name in SCHEDULE_FIELDS if values[name]) > 1:
        raise click.UsageError("give only one of --every, --cron, --rrule, --at, --solar")
    return schedule_from(values, reading_zone=_reading_zone(ctx, values))


def _reading_zone(ctx: click.Context, values: dict[str, Any]) -> str | tzinfo:
    return _session(ctx).reading_zone(parse_zone(values["zone"]))


class Refused(Exception):
    """A change the CLI makes only with ``--force`` (exit 7)."""


def _guard_statics(ctx: click.Context, names: list[str], force: bool,
                   dry_run: bool = False) -> None:
    """Refuse (or, with ``--force``, warn about) changing static entries: a leader
    writes them back. The app's ``beat_schedule`` counts only for the app's own
    schedule, not another ``--url`` or ``--prefix``. A dry run only warns."""
    session = _session(ctx)
    own = session.celery_app is not None and not session.url and not session.prefix
    configured = session.celery_app.conf.beat_schedule if own and session.celery_app else None
    statics = guards.statics_among(names, store_for(_app(ctx)).static_names(), configured)
    if not statics:
        return
    if dry_run and not force:
        click.echo("warning: " + guards.static_message(statics, forced=False), err=True)
        return
    if not force:
        raise Refused(guards.static_message(statics, forced=False))
    click.echo("warning: " + guards.static_message(statics, forced=True), err=True)


def _check_task(ctx: click.Context, task: str, field: str, force: bool) -> None:
    """An empty task name is always refused; an unknown one when the app is known
    (``celery -A proj redbeat``) unless ``--force``."""
    registered = _session(ctx).registered_tasks()
    problem = guards.task_problem(task, registered if registered is not None else {task},
                                  field)
    if problem and (not force or not task.strip()):
        raise ValueError(problem)


@main.command()
@click.argument("name")
@click.argument("task")
@entry_options
@click.option("--disabled", is_flag=True, help="Store it paused.")
@click.option("--label", "labels", multiple=True,
              help="A label for the entry (repeat it for several; replaces its labels).")
@click.option("--no-labels", is_flag=True, help="Remove the entry's labels.")
@click.pass_context
@command
def add(ctx: click.Context, name: str, task: str, disabled: bool, force: bool,
        labels: tuple[str, ...], no_labels: bool, **values: Any) -> None:
    """Create or replace an entry (its run history is kept). Under `celery -A proj`,
    TASK must be one the app registers (--force accepts another)."""
    chosen = _schedule_from(ctx, values)
    if chosen is None:
        raise click.UsageError("give exactly one of --every, --cron, --rrule, --at, --solar")
    policy = policy_from(values, EntryPolicy(), reading_zone=_reading_zone(ctx, values))
    _check_task(ctx, task, "TASK", force)
    entry = RedBeatSchedulerEntry(
        name, task, chosen, args=json_field(values, "args_json", list),
        kwargs=json_field(values, "kwargs_json", dict),
        options=options_from(values, None), enabled=not disabled, app=_app(ctx),
        policy=policy, labels=_labels_given(labels, no_labels),
    )
    if name:
        _guard_statics(ctx, [name], force)
    entry.save(changed_by="cli", actor=_actor(ctx))
    click.echo(f"saved {_shown(name)}: {_saved_words(ctx, entry)}")


def _labels_given(labels: tuple[str, ...], no_labels: bool) -> tuple[str, ...] | None:
    """The labels ``--label``/``--no-labels`` set; None when neither is given (kept)."""
    if labels and no_labels:
        raise click.UsageError("give --label or --no-labels, not both")
    return () if no_labels else label_rules.normalized(labels) if labels else None


def _saved_words(ctx: click.Context, entry: RedBeatSchedulerEntry) -> str:
    """What ``add`` and ``edit`` say they wrote: the schedule with the zone it runs in
    (a crontab without a zone of its own runs in the app's), the start and end when
    given, and the next run, each time with its zone."""
    words = describe(entry.schedule)
    if follows_app_zone(entry.schedule) and not runtime_for(entry.app).zone_unknown:
        words += f" (the app's time zone, {_zone_label(entry.app.timezone)})"
    zone = _session(ctx).shown_zone
    for label, moment in (("from", entry.policy.start_time), ("until", entry.policy.end_time)):
        if moment is not None:
            words += f", {label} {_when(moment, zone)}"
    return f"{words}, next run {_upcoming(ctx, entry)}"


def _zone_label(zone: tzinfo) -> str:
    return str(getattr(zone, "key", None) or zone)


def _upcoming(ctx: click.Context, entry: RedBeatSchedulerEntry) -> str:
    if not entry.enabled:
        return "(disabled)"
    if runtime_for(entry.app).zone_unknown and follows_app_zone(entry.schedule):
        return "worked out by beat in the app's time zone (--tz gives it one)"
    return _when(entry.due_at, _session(ctx).shown_zone)


@main.command()
@click.argument("name")
@click.option("--task", default=None, help="Task name to send.")
@entry_options
@click.option("--label", "labels", multiple=True,
              help="A label for the entry (repeat it for several; replaces its labels).")
@click.option("--no-labels", is_flag=True, help="Remove the entry's labels.")
@click.pass_context
@command
def edit(ctx: click.Context, name: str, task: str | None, force: bool,
         labels: tuple[str, ...], no_labels: bool, **values: Any) -> None:
    """Change some fields of an entry in place (validated as `add` validates them); the
    others, its run history and its state stay as they are. A new schedule without --tz
    keeps the zone of the old one."""
    named = _labels_given(labels, no_labels)
    if task is None and named is None and all(value is None for option, value in values.items()
                                              if option != "zone"):
        raise click.UsageError("nothing to change: give the fields to change, e.g. --every 5m")
    app = _app(ctx)
    info = manage.get_entry(app, name)
    if info.entry is None:
        raise InvalidEntry(info.key, f"{info.error or 'unreadable'}; replace it with `add`")
    old = info.entry
    if values["zone"] is None:
        values["zone"] = zone_name_of(old.schedule)  # a new --cron keeps the entry's zone
    changes: dict[str, Any] = {}
    if task is not None:
        _check_task(ctx, task, "--task", force)
        changes["task"] = task
    schedule = _schedule_from(ctx, values)
    if schedule is not None:
        changes["schedule"] = schedule
    if values["args_json"] is not None:
        changes["args"] = json_field(values, "args_json", list)
    if values["kwargs_json"] is not None:
        changes["kwargs"] = json_field(values, "kwargs_json", dict)
    changes["options"] = options_from(values, old.options)
    changes["policy"] = policy_from(values, old.policy, reading_zone=_reading_zone(ctx, values))
    if named is not None:
        changes["labels"] = named
    _guard_statics(ctx, [name], force)
    entry = manage.edit_entry(app, name, changed_by="cli", actor=_actor(ctx), **changes)
    click.echo(f"edited {_shown(name)}: {_saved_words(ctx, entry)}")


def _simple(verb: str, action: Callable[[click.Context, str], Any], done: str, help: str,
            bulk: Callable[[click.Context, tuple[str, ...]], groups.Outcome],
            guarded: bool = True) -> None:
    """A command taking one entry name, or ``--label`` for every entry carrying the
    labels. The help is given to click here: a docstring assigned after the decorators
    ran never reaches ``--help``. A guarded command changes the entry, so refuses a
    static one without ``--force``."""
    @main.command(verb, help=help, short_help=help.split(". ")[0].rstrip("."))
    @click.argument("name", required=False)
    @click.option("--label", "labels", multiple=True,
                  help="Instead of NAME: every entry carrying this label (repeat it: every "
                       "one of them).")
    @click.pass_context
    @command
    def run(ctx: click.Context, name: str | None, labels: tuple[str, ...],
            force: bool = False) -> None:
        if (name is None) == (not labels):
            raise click.UsageError("give NAME or --label, not both")
        if labels:
            if guarded:
                names = [info.name for info in groups.labelled(_app(ctx), labels)]
                _guard_statics(ctx, names, force)
            outcome = bulk(ctx, labels)
            click.echo(f"{verb}: {len(outcome.changed)} entries labelled "
                       f"{', '.join(map(_shown, labels))}")
            for changed in outcome.changed:
                click.echo(f"  {_shown(changed)}")
            for skipped, reason in sorted(outcome.skipped.items()):
                click.echo(f"  ! {_shown(skipped)}: {_shown(reason)}", err=True)
            return
        assert name is not None
        if guarded:
            manage.get_entry(_app(ctx), name)  # exit 3 for a missing entry, first
            _guard_statics(ctx, [name], force)
        result = action(ctx, name)
        click.echo(done.format(name=_shown(name), result=result))
    if guarded:
        click.option("--force", is_flag=True,
                     help="Change a static entry anyway (until a beat next takes the lead "
                          "or restarts).")(run)


def _actor(ctx: click.Context) -> str | None:
    return _session(ctx).actor


def _enabling(enabled: bool) -> tuple[Callable[[click.Context, str], Any],
                                      Callable[[click.Context, tuple[str, ...]], Any]]:
    return (lambda ctx, name: manage.set_enabled(_app(ctx), name, enabled, "cli", _actor(ctx)),
            lambda ctx, labels: groups.set_enabled(_app(ctx), labels, enabled, "cli",
                                                   _actor(ctx)))


_simple("enable", _enabling(True)[0], "enabled {name}",
        "Enable a disabled entry. The leader schedules it again from its stored last run.",
        _enabling(True)[1])
_simple("disable", _enabling(False)[0], "disabled {name}",
        "Disable an entry. It keeps its definition and history, is never sent, and costs "
        "nothing per tick until enabled again.", _enabling(False)[1])
_simple("delete", lambda ctx, name: manage.delete_entry(_app(ctx), name), "deleted {name}",
        "Delete an entry and its history. A static entry (from beat_schedule) is written "
        "again when a beat next takes the lead or restarts: remove it from beat_schedule.",
        lambda ctx, labels: groups.delete(_app(ctx), labels))


def _queue_run(ctx: click.Context, name: str) -> str:
    """Queue a run, and say who will send it: a run queued with no beat leading waits."""
    app = _app(ctx)
    task_id = manage.run_now(app, name)
    holder, _ = store_for(app).lock_holder()
    if holder:
        return f"{task_id}; the leader sends it within a second"
    return f"{task_id}; no beat is leading now: it is sent when one takes the lead"


_simple("run-now", _queue_run, "queued {name} as {result}",
        "Send an entry once now. The leader sends it at its next tick with the task id "
        "<name>:run-now:<ms>; its schedule and run count are untouched.",
        lambda ctx, labels: groups.run_all_now(_app(ctx), labels), guarded=False)


@main.command("unquarantine")
@click.argument("names", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every quarantined entry.")
@click.option("--pattern", default=None, help="Only quarantined entries whose name matches "
                                               "this glob.")
@click.option("--dry-run", is_flag=True, help="Say what would be released; change nothing.")
@click.pass_context
@command
def unquarantine(ctx: click.Context, names: tuple[str, ...], every: bool, pattern: str | None,
                 dry_run: bool) -> None:
    """Lift the quarantine of the named entries, of those --pattern matches, or of --all:
    each is saved again as it is and the leader schedules it at its next tick. One
    whose own definition still cannot be read stays quarantined (listed, exit 5)."""
    from fnmatch import fnmatchcase

    if bool(names) + every + (pattern is not None) != 1:
        raise click.UsageError("give entry names, --pattern or --all (one of them)")
    outcome = manage.release_quarantined(
        _app(ctx), names=names or None,
        name_matches=(lambda name: fnmatchcase(name, pattern)) if pattern else None,
        dry_run=dry_run, changed_by="cli")
    would = "would release" if dry_run else "released"
    for name in outcome.released:
        click.echo(f"  {would} {_shown(name)}")
    for name, reason in outcome.kept:
        click.echo(f"  kept {_shown(name)}: {_shown(reason)}")
    click.echo(f"{would} {len(outcome.released)}, still quarantined {len(outcome.kept)}")
    if outcome.kept:
        sys.exit(EXIT_INVALID)


@main.command("export")
@click.option("--format", "fmt", type=click.Choice(["json", "yaml"]), default="json",
              show_default=True, help="Output format (yaml needs PyYAML).")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress bar and no summary on standard error.")
@click.pass_context
@command
def export_command(ctx: click.Context, fmt: str, quiet: bool) -> None:
    """Every entry (definition, meta, score) to standard output, an entry at a time (one
    JSON line each), so memory stays bounded at any size; a progress bar on a terminal,
    and how many on standard error. Ctrl-C stops it (exit 130), saying how many were
    written: the output is then incomplete and no import reads it."""
    app = _app(ctx)
    config = ensure_conf(app)
    head = export_file.header(config.key_prefix, time.time())
    out = sys.stdout
    writer: Any = (export_file.YamlWriter(out, head, _yaml()) if fmt == "yaml"
                   else export_file.JsonWriter(out, head))
    total, statics = store_for(app).count_members(), 0
    with _ctrl_c() as stop, _progress(total, "exporting", _bar_wanted(quiet)) as bar:
        for record in manage.export_records(app):
            writer.entry(record)
            statics += bool(record.get("static"))
            bar.update(1)
            if stop.requested:
                out.flush()
                fail(f"interrupted: {writer.count} of {total} entries written; the output "
                     "is incomplete (not a valid export)", EXIT_INTERRUPTED)
    writer.close()
    if not quiet:
        click.echo(f"exported {writer.count} entries ({statics} static) from prefix "
                   f"{config.key_prefix!r}", err=True)


def _bar_wanted(quiet: bool, lines: bool = False) -> bool:
    """Whether to draw a progress bar on standard error: only on a terminal, and never
    over what goes to standard output on the same terminal. ``export`` (``lines``
    False) draws none with --quiet; ``import`` prints a line per change unless --quiet,
    so it draws one when those lines are off or go elsewhere."""
    if not sys.stderr.isatty():
        return False
    if lines:
        return quiet or not sys.stdout.isatty()
    return not quiet and not sys.stdout.isatty()


class _NoBar:
    def update(self, steps: int) -> None:
        pass


@contextlib.contextmanager
def _progress(length: int | None, label: str, wanted: bool) -> Iterator[Any]:
    """click's progress bar on standard error, or nothing (not a terminal, --quiet with
    an export, an unknown length)."""
    if not wanted or not length:
        yield _NoBar()
        return
    with click.progressbar(length=length, label=label, file=sys.stderr,
                           show_pos=True) as bar:
        yield bar


@contextlib.contextmanager
def _ctrl_c() -> Iterator[Any]:
    """Ctrl-C (SIGINT) asked for, not raised: a long command checks ``requested``
    between its writes and stops at a boundary, so it can say exactly what was written.
    A second Ctrl-C raises at once."""
    state = types.SimpleNamespace(requested=False)
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def request(signum: int, frame: Any) -> None:
        if state.requested:
            raise KeyboardInterrupt
        state.requested = True

    previous = signal.signal(signal.SIGINT, request)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


@main.command("import")
@click.argument("source", required=False)
@click.option("--from", "kind", type=click.Choice(["redbeat", "django-celery-beat", "shelve"]),
              default="redbeat", show_default=True,
              help="What SOURCE is: a redbeat export, django-celery-beat's database, or "
                   "the celerybeat-schedule file of Celery's default scheduler.")
@click.option("--database", default=None, metavar="URL",
              help="django-celery-beat's database: sqlite:///path or "
                   "postgresql://user:password@host/db (default: the Django project's, "
                   "from DJANGO_SETTINGS_MODULE).")
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@click.option("--prune", is_flag=True, help="Delete entries the file does not have.")
@click.option("--overwrite", is_flag=True,
              help="--from django-celery-beat/shelve: also replace entries changed here "
                   "since they were imported.")
@click.option("--quiet", "-q", is_flag=True, help="Only the summary, not a line per entry.")
@click.option("--force", is_flag=True, help="Write over or prune static entries anyway.")
@click.pass_context
@command
def import_command(ctx: click.Context, source: str | None, kind: str, database: str | None,
                   dry_run: bool, prune: bool, overwrite: bool, quiet: bool,
                   force: bool) -> None:
    """Write the entries of an export (JSON or YAML) from SOURCE, a file or - for
    standard input; entries already equal are kept. Prints how many entries were
    created, updated, unchanged and pruned, then (unless --quiet) one line per change.

    With --from django-celery-beat (its tables, --database) or --from shelve SOURCE (a
    celerybeat-schedule file), another scheduler's periodic tasks are imported instead:
    entries already equal are kept, and so are entries changed here since an earlier
    import (unless --overwrite); what could not be carried is listed (exit 5)."""
    if kind != "redbeat":
        _import_foreign(ctx, kind, source, database, dry_run, overwrite, quiet, force)
        return
    if source is None:
        raise click.UsageError("give SOURCE, an export file or - for standard input")
    if database is not None or overwrite:
        raise click.UsageError("--database and --overwrite go with --from "
                               "django-celery-beat or shelve")
    app = _app(ctx)
    with _import_source(source) as stream:
        _import_export(ctx, app, stream, source, dry_run, prune, quiet, force)


@contextlib.contextmanager
def _import_source(source: str) -> Iterator[IO[str]]:
    """SOURCE as a file that can be read twice (the import is planned, then written):
    standard input is spooled to a temporary file (on disk past 8 MB)."""
    if source != "-":
        try:
            stream = open(source, encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ValueError(f"cannot read {source}: {exc.strerror or exc}") from None
        with stream:
            yield stream
        return
    with tempfile.SpooledTemporaryFile(max_size=8 << 20, mode="w+",
                                       encoding="utf-8") as spool:
        shutil.copyfileobj(sys.stdin, spool)
        spool.seek(0)
        yield spool


def _import_export(ctx: click.Context, app: Celery, stream: IO[str], source: str,
                   dry_run: bool, prune: bool, quiet: bool, force: bool) -> None:
    """Plan the import (every record read and checked, the statics guarded), then write
    it a batch per transaction; a line per change unless --quiet, a progress bar on a
    terminal, the counts last. Ctrl-C stops between batches (exit 130)."""
    size = _size_of(stream)
    records = _records_of(stream, source)
    session = _session(ctx)
    own = session.celery_app is not None and not session.url and not session.prefix
    static = store_for(app).static_names() | set(
        (session.celery_app.conf.beat_schedule or {}) if own and session.celery_app else ())
    touched: list[str] = []
    marks = {"created": "+", "updated": "~", "pruned": "-"}

    def line(kind: str, name: str) -> None:
        if kind != "unchanged" and not quiet:
            click.echo(f"  {marks[kind]} {_shown(name)}")

    def plan_heard(kind: str, name: str) -> None:
        if kind != "unchanged" and name in static:
            touched.append(name)
        if dry_run:
            line(kind, name)

    with _ctrl_c() as stop:
        with _progress(size, "checking", _bar_wanted(quiet, lines=True)) as bar:
            counts = manage.import_records(
                app, lambda: records(bar), dry_run=True, prune=prune, planned=plan_heard,
                before_write=lambda _: _guard_statics(ctx, touched, force, dry_run))
        if not dry_run:
            with _progress(size, "writing", _bar_wanted(quiet, lines=True)) as bar:
                counts = manage.import_records(
                    app, lambda: records(bar), prune=prune, written=line,
                    should_stop=lambda: stop.requested)
    summary = (f"created {counts.created}, updated {counts.updated}, unchanged "
               f"{counts.unchanged}, pruned {counts.pruned}")
    if dry_run:
        summary = (f"would create {counts.created}, would update {counts.updated}, "
                   f"unchanged {counts.unchanged}, would prune {counts.pruned}")
    if counts.stopped:
        fail(f"interrupted: {summary} before it stopped; the rest was not imported (the "
             "same import again finishes it: entries already written are left alone)",
             EXIT_INTERRUPTED)
    click.echo(summary)


def _size_of(stream: IO[str]) -> int | None:
    try:
        return os.fstat(stream.fileno()).st_size
    except (OSError, AttributeError, ValueError):  # a spool still in memory
        return None


def _records_of(stream: IO[str], source: str) -> Callable[[Any], Iterator[Any]]:
    """The export's entries, afresh on each call (from the start of the file), advancing
    ``bar`` by the characters read: JSON streamed, YAML read whole."""
    stream.seek(0)
    first = stream.read(64).lstrip()[:1]

    def json_records(bar: Any) -> Iterator[Any]:
        stream.seek(0)
        reader = export_file.JsonReader(stream)
        shown = 0
        for record in reader.entries():
            export_file.check_head(reader.head)
            bar.update(reader.consumed - shown)
            shown = reader.consumed
            yield record
        bar.update(reader.consumed - shown)

    def yaml_records(bar: Any) -> Iterator[Any]:
        stream.seek(0)
        try:
            document = _yaml().safe_load(stream)
        except ValueError:
            raise
        except Exception as exc:
            raise ValueError(f"{source} is neither JSON nor YAML: {exc}") from exc
        if not isinstance(document, dict) or document.get("format") != export_file.FORMAT \
                or not isinstance(document.get("entries"), list):
            raise ValueError(f"{source} is not a redbeat export (expected format "
                             f"{export_file.FORMAT})")
        bar.update(_size_of(stream) or 0)
        yield from document["entries"]

    return json_records if first == "{" else yaml_records


def _import_foreign(ctx: click.Context, kind: str, source: str | None, database: str | None,
                    dry_run: bool, overwrite: bool, quiet: bool, force: bool) -> None:
    """``import --from django-celery-beat`` / ``--from shelve``: read, plan, guard the
    statics as every change does, write, report."""
    app = _app(ctx)
    read, statics = _foreign_source(ctx, kind, source, database)
    plan = migrate.ForeignPlan()  # what reading refuses is reported with the rest
    plan = migrate.import_foreign(app, read(plan), plan, dry_run=True, overwrite=overwrite,
                                  statics=statics)
    _guard_statics(ctx, [name for name in plan.written if name not in statics], force,
                   dry_run)
    if not dry_run:
        plan = migrate.ForeignPlan()
        plan = migrate.import_foreign(app, read(plan), plan, overwrite=overwrite,
                                      statics=statics)
    _report_foreign(plan, dry_run, quiet)
    if plan.refused:
        raise SystemExit(EXIT_INVALID)


def _foreign_source(ctx: click.Context, kind: str, source: str | None, database: str | None
                    ) -> tuple[Callable[[migrate.ForeignPlan], list[Any]], set[str]]:
    """How to read the source's records (read once, converted per pass), and the names
    written as statics: for a shelve, the app's own ``beat_schedule`` entries."""
    if kind == "shelve":
        if source is None:
            raise click.UsageError("give SOURCE, the celerybeat-schedule file")
        entries = migrate.shelve_entries(source)
        celery_app = _session(ctx).celery_app
        configured = set(celery_app.conf.beat_schedule or {}) if celery_app else set()
        return (lambda plan: migrate.shelve_records(entries, plan)), configured
    if source is not None:
        raise click.UsageError("--from django-celery-beat reads --database, not SOURCE")
    rows = migrate.django_celery_beat_rows(database)
    return (lambda plan: migrate.records_of(rows, plan)), set()


def _report_foreign(plan: migrate.ForeignPlan, dry_run: bool, quiet: bool) -> None:
    would = "would " if dry_run else ""
    click.echo(f"{would}create {len(plan.created)}, {would}update {len(plan.updated)}, "
               f"unchanged {len(plan.unchanged)}, kept {len(plan.kept)} (changed here since; "
               f"--overwrite replaces them), not carried {len(plan.refused)}")
    if not quiet:
        for mark, names in (("+", plan.created), ("~", plan.updated), ("=", plan.kept)):
            for name in names:
                click.echo(f"  {mark} {_shown(name)}")
                for note in plan.notes.get(name, []):
                    click.echo(f"      {_shown(note)}")
    for name, reason in sorted(plan.refused.items()):
        click.echo(f"  ! {_shown(name)}: not carried: {_shown(reason)}", err=True)


def _yaml() -> Any:
    try:
        import yaml
    except ImportError as exc:
        raise ValueError("YAML needs PyYAML: pip install 'celery-beatkeeper[yaml]'") from exc
    return yaml


@main.command("status")
@click.pass_context
@command
def status_command(ctx: click.Context) -> None:
    """Who leads, how the schedule stands, and what needs attention."""
    app = _app(ctx)
    state = manage.status(app)
    now = state.server_time  # heartbeats are stamped on Redis's clock, not this host's
    if state.lock_holder:
        click.echo(f"leader:      {_shown(Holder.parse(state.lock_holder))} "
                   f"({expiry_words(state.lock_ttl_ms)})")
    else:
        click.echo("leader:      none (no node holds the lock)")
    for node, (role, at) in sorted(state.nodes.items()):
        click.echo(f"node:        {_shown(Holder.parse(node))}  {_shown(role)}, "
                   f"last tick {now - at:.1f}s ago")
    click.echo(f"entries:     {state.entries} ({state.parked} parked: finished or "
               "quarantined)")
    click.echo(f"overdue:     {state.overdue}"
               + (f" (most late {state.most_late_s:.1f}s)" if state.overdue else ""))
    if state.waiting:
        click.echo(f"waiting:     {state.waiting} (written with score 0, not yet scheduled)")
    click.echo(f"pending:     {state.pending} slot(s) claimed, publish not yet confirmed")
    for name, score in state.next_due:
        click.echo(f"next:        {_when(score_time(score), _session(ctx).shown_zone)}  "
                   f"{_shown(name)}")
    for name, reason in state.quarantined:
        click.echo(f"quarantined: {_shown(name)}: {_shown(reason)}")
    store = store_for(app)
    failing = failing_summary(store.failure_rows(manage.QUARANTINE_SAMPLE), ensure_conf(app).keys)
    click.echo(f"failing:     {len(failing.failing)} (last dispatch refused by Celery or the "
               f"broker; {failing.total} failed dispatch(es) recorded)")
    for name, failure in failing.failing:
        click.echo(f"failing:     {_shown(name)}: {_shown(failure.reason)} "
                   f"(at {_when(failure.at, _session(ctx).shown_zone)})")
    click.echo(f"redis:       {state.redis_version}, maxmemory-policy "
               f"{state.eviction_policy or 'unknown (CONFIG GET refused)'}")
    if state.eviction_policy and state.eviction_policy.startswith("allkeys-"):
        click.echo("warning:     allkeys-* eviction can silently delete schedule entries; "
                   "use noeviction or volatile-*", err=True)
    for trouble in (state.evicting, state.refuses_writes):
        if trouble:
            click.echo(f"error:       {trouble}", err=True)


@main.command("check")
@click.option("--host", default=None, help="Host whose scheduler to check (default: this).")
@click.option("--pid", type=int, default=None, help="Only the scheduler with this pid.")
@click.option("--max-age", type=float, default=None,
              help="Seconds since its last tick that still count as alive.")
@click.option("--failed-runs", type=click.IntRange(min=0), default=health.FAILED_RUNS,
              show_default=True,
              help="An entry whose last this many runs failed (as workers with "
                   "redbeat_worker_outcomes report them) needs attention; 0: not checked.")
@click.pass_context
@command
def check_command(ctx: click.Context, host: str | None, pid: int | None,
                  max_age: float | None, failed_runs: int) -> None:
    """Health probe: exit 0 when this host's beat leads or stands by a live leader;
    9 when it does but entries need attention (quarantined, their last dispatch was
    refused, or their last --failed-runs runs failed); 1 otherwise, Redis unreachable
    included."""
    try:
        result = health.check(_app(ctx), host=host, pid=pid, max_age=max_age,
                              failed_runs=failed_runs)
    except AUTH_ERRORS as exc:
        click.echo(f"unhealthy: {auth_message(exc)}")
        sys.exit(EXIT_FAILED)
    except redis.exceptions.RedisError as exc:
        click.echo(f"unhealthy: Redis unreachable ({redact(str(exc))})")
        sys.exit(EXIT_FAILED)
    if not result.healthy:
        click.echo("unhealthy: " + result.reason)
        sys.exit(EXIT_FAILED)
    if result.attention:
        click.echo(f"attention: {result.reason}; {_shown(result.attention)}")
        sys.exit(EXIT_ATTENTION)
    click.echo("healthy: " + result.reason)


# -- redbeat web: the optional web view (redbeat.web, docs/web.md) ---------------------


@main.command("web")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; one other machines can reach needs credentials.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True,
              help="Port to listen on.")
@click.option("--token", envvar="REDBEAT_WEB_TOKEN", default=None,
              help="Bearer token (also the password of HTTP basic auth); default: the "
                   "redbeat_web_token setting.")
@click.option("--user", envvar="REDBEAT_WEB_USER", default=None,
              help="HTTP basic user (default: the redbeat_web_user setting).")
@click.option("--password", envvar="REDBEAT_WEB_PASSWORD", default=None,
              help="HTTP basic password (default: the redbeat_web_password setting).")
@click.option("--read-only", is_flag=True, help="Show the schedule; change nothing.")
@click.pass_context
@command
def web_command(ctx: click.Context, host: str, port: int, token: str | None,
                user: str | None, password: str | None, read_only: bool) -> None:
    """Serve a web view of the schedule (pip install 'celery-beatkeeper[web]')."""
    try:
        from .web import WebSettings, serve
        from .web.security import RefusedBind, check_bind
    except ImportError as exc:
        fail(f"the web view needs its extra: pip install 'celery-beatkeeper[web]' ({exc})",
             EXIT_FAILED)
    app = _app(ctx)
    config = ensure_conf(app)
    settings = WebSettings(host=host, port=port, token=token or config.web_token,
                           user=user or config.web_user,
                           password=password or config.web_password, read_only=read_only)
    try:
        check_bind(settings)
    except RefusedBind as exc:
        fail(str(exc), 2)
    click.echo(f"redbeat web: http://{host}:{port}/ ({'read-only, ' if read_only else ''}"
               f"{'authentication required' if settings.has_auth else 'no authentication'})")
    try:
        serve(app, settings, zone=_session(ctx).shown_zone,
              check_tasks=_session(ctx).celery_app is not None)
    except OSError as exc:  # the port taken, an address this host does not have
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_FAILED)


#: ``celery -A proj redbeat ...`` (registered through the ``celery.commands`` entry point)
celery_command = main

"""The ``redbeat`` command line: list, inspect and change entries; status; health.

Two ways in, one set of commands:

    redbeat --url redis://host:6379/1 list
    celery -A proj redbeat list          # reads the app's redbeat settings

Exit codes scripts can rely on: 0 done (or healthy), 1 unhealthy or failed,
2 bad usage, 3 no such entry, 4 Redis unreachable, 5 invalid input, 6 Redis refused
the credentials (authentication or ACL).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
from collections.abc import Callable
from datetime import datetime, timezone, tzinfo
from typing import Any, NoReturn
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click
import redis.exceptions
from celery import Celery
from celery.schedules import crontab, schedule, solar

from . import __version__, health, legacy, manage
from .connection import CLIENT_ATTRIBUTE, OWN_OPTIONS, redact
from .entry import (
    CACHE_ATTRIBUTE,
    STORE_ATTRIBUTE,
    InvalidEntry,
    RedBeatSchedulerEntry,
    store_for,
)
from .failures import failing_summary, read_failures
from .keys import KeyLayout
from .lock import Holder
from .nexttime import next_after
from .policy import EntryPolicy
from .retry import AUTH_ERRORS
from .schedules import clocked, rrule
from .settings import ensure_conf

EXIT_FAILED, EXIT_NOT_FOUND, EXIT_UNREACHABLE, EXIT_INVALID, EXIT_AUTH = 1, 3, 4, 5, 6
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: One part of a duration: a number and its unit ("1m30s" has two).
DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhdw]?)")
#: The crontab shorthands of cron(8), as five fields.
CRON_SHORTHANDS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
                   "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
                   "@hourly": "0 * * * *"}
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

    def resolve(self) -> Celery:
        if self.app is None:
            base = self.celery_app if self.celery_app is not None else self._standalone()
            self.app = for_cli(base, self.url, self.prefix, self.timeout)
        return self.app

    def _standalone(self) -> Celery:
        if not self.url:
            raise click.UsageError("give --url (or REDBEAT_REDIS_URL)")
        app = Celery("redbeat-cli", set_as_current=False)
        app.conf.update(redbeat_redis_url=self.url, timezone=self.zone or "UTC",
                        redbeat_redis_options={})
        if self.prefix:
            app.conf.redbeat_key_prefix = self.prefix
        return app

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
    does. The copy goes on the app with a store and client of its own."""
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
    changes: dict[str, Any] = {"app": None, "redis_options": options,
                               "redis_options_from_redbeat": True, "notices": []}
    if url:
        changes.update(redis_url=url, redis_url_is_fallback=False)
    if prefix:
        own_lock = config.lock_key == KeyLayout(config.key_prefix).lock
        changes.update(key_prefix=prefix,
                       lock_key=KeyLayout(prefix).lock if own_lock else config.lock_key)
    copy = dataclasses.replace(config, **changes)  # app=None: nothing is read again
    copy.app = app
    app.redbeat_conf = copy
    for attribute in (STORE_ATTRIBUTE, CLIENT_ATTRIBUTE, CACHE_ATTRIBUTE):
        if getattr(app, attribute, None) is not None:
            setattr(app, attribute, None)
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


class NotFound(LookupError):
    """No entry of that name: the one failure that exits 3. Only the name a command
    was asked for is reported so; any other missing key (a zone, a frequency, a field
    of an export) is invalid input, never "no entry named ..."."""


def command(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Maps failures to the documented exit codes with a one-line message, classified
    by what went wrong: the entry, the input, the credentials or the connection."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NotFound as exc:
            fail(f"no entry named {exc.args[0]!r}", EXIT_NOT_FOUND)
        except ZoneInfoNotFoundError as exc:  # a KeyError, but bad input, not a lookup
            fail(f"unknown time zone: {exc}", EXIT_INVALID)
        except KeyError as exc:
            if exc.args and exc.args[0] == kwargs.get("name"):
                fail(f"no entry named {exc.args[0]!r}", EXIT_NOT_FOUND)
            fail(f"missing {exc}", EXIT_INVALID)
        except AUTH_ERRORS as exc:
            fail(auth_message(exc), EXIT_AUTH)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            fail(f"Redis unreachable: {redact(str(exc))}", EXIT_UNREACHABLE)
        except (InvalidEntry, ValueError) as exc:
            fail(str(exc), EXIT_INVALID)
        except redis.exceptions.RedisError as exc:
            fail(f"Redis: {exc}", EXIT_FAILED)
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
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


# -- formatting ------------------------------------------------------------------------


def describe(value: Any) -> str:
    """A schedule in words, for tables."""
    if isinstance(value, schedule):
        return f"every {_seconds_in_words(value.run_every.total_seconds())}"
    if isinstance(value, crontab):
        fields = [value._orig_minute, value._orig_hour, value._orig_day_of_month,
                  value._orig_month_of_year, value._orig_day_of_week]
        zone = getattr(value, "timezone", None)
        return "cron " + " ".join(str(f) for f in fields) + (f" ({zone})" if zone else "")
    if isinstance(value, rrule):
        from .schedules import FREQUENCY_NAMES

        parts = [f"FREQ={FREQUENCY_NAMES[value.freq]}"]
        if value.interval != 1:
            parts.append(f"INTERVAL={value.interval}")
        for name, rule in value.rules.items():
            if rule is not None:
                items = rule if isinstance(rule, (list, tuple)) else [rule]
                parts.append(f"{name.upper()}={','.join(str(item) for item in items)}")
        return "rrule " + ";".join(parts)
    if isinstance(value, clocked):
        return f"once at {value.run_at.isoformat()}"
    if isinstance(value, solar):
        return f"solar {value.event} at {value.lat},{value.lon}"
    return repr(value)


def _seconds_in_words(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _when(moment: datetime | None, zone: tzinfo) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")  # always with its zone


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows,
                                                                       strict=True)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
             for row in [headers, *rows]]
    return "\n".join(line.rstrip() for line in lines)


def _last_run(entry: RedBeatSchedulerEntry | None) -> datetime | None:
    """When it last ran; None for an entry that has not run yet, whose ``last_run_at``
    is only the moment it was created (what its first run counts from)."""
    if entry is None or not entry.total_run_count:
        return None
    return entry.last_run_at


def _state(info: manage.EntryInfo) -> str:
    """The entry's state, ``failing`` for an enabled entry whose last dispatch Celery
    or the broker refused (no slot has gone out since): such a run was claimed and
    counted, and must not pass for a success."""
    failures = read_failures(info.fields)
    if (info.state == "enabled" and failures is not None and info.entry is not None
            and failures.failing_since(info.entry.last_run_at)):
        return "failing"
    return info.state


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
    }


# -- parsing ---------------------------------------------------------------------------


def parse_every(text: str) -> float:
    """A duration: ``30`` (seconds), ``30s``, ``5m``, ``1h``, ``1d``, ``1w`` or parts of
    them together (``1m30s``, ``1h 30m``)."""
    text = text.strip().lower().replace(" ", "")
    parts = list(DURATION_PART.finditer(text))
    if not parts or "".join(part.group(0) for part in parts) != text or len(parts) > 1 and any(
            not part.group(2) for part in parts):  # a bare number only on its own
        wanted = "a duration such as 30s, 5m, 1h30m, 1d or 1w"
        raise ValueError(f"--every wants {wanted}, not {text!r}")
    seconds = sum(float(part.group(1)) * UNITS[part.group(2) or "s"] for part in parts)
    if seconds <= 0:
        raise ValueError("--every must be positive")
    return seconds


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


def parse_time(text: str, zone: str | None, option: str = "--at") -> datetime:
    """An ISO 8601 time; without an offset it is read in ``zone`` (default UTC)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{option} wants an ISO 8601 time such as 2030-01-02T09:00:00, "
                         f"not {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(zone) if zone else timezone.utc)
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


def parse_cron(text: str, zone: str | None) -> crontab:
    """Five cron fields, or a shorthand (``@daily``, ``@hourly``...)."""
    text = CRON_SHORTHANDS.get(text.strip().lower(), text)
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"--cron wants 5 fields (minute hour day month weekday), not {text!r}")
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    day_of_week = _sunday_as_zero(day_of_week)
    from .schedules import crontab as zoned_crontab

    return zoned_crontab(minute=minute, hour=hour, day_of_month=day_of_month,
                         month_of_year=month_of_year, day_of_week=day_of_week, timezone=zone)


WEEKDAYS = {"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}
RRULE_KEYS = {"BYMONTH": "bymonth", "BYMONTHDAY": "bymonthday", "BYYEARDAY": "byyearday",
              "BYWEEKNO": "byweekno", "BYHOUR": "byhour", "BYMINUTE": "byminute",
              "BYSECOND": "bysecond", "BYSETPOS": "bysetpos", "COUNT": "count"}


def parse_rrule(text: str, zone: str | None) -> rrule:
    """RFC 5545 ``FREQ=...;BYHOUR=...`` (DTSTART as YYYYMMDDTHHMMSS in ``zone``).

    Every part is checked here, so a mistake is reported naming the part: the
    schedule's own lookups fail with bare KeyErrors ('FORTNIGHTLY')."""
    from .schedules import FREQUENCIES

    fields: dict[str, Any] = {}
    freq = None
    for part in filter(None, text.split(";")):
        name, _, value = part.partition("=")
        name = name.strip().upper()
        if name == "FREQ":
            freq = value.strip().upper()
            if freq not in FREQUENCIES:
                raise ValueError(f"--rrule: FREQ={value.strip()!r} is not one of "
                                 f"{', '.join(FREQUENCIES)}")
        elif name == "INTERVAL":
            fields["interval"] = _rrule_numbers(name, value)[0]
        elif name == "BYDAY":
            fields["byweekday"] = [_rrule_day(day) for day in value.split(",")]
        elif name in ("DTSTART", "UNTIL"):
            try:
                fields[name.lower()] = datetime.strptime(value.strip().rstrip("Z"),
                                                         "%Y%m%dT%H%M%S")
            except ValueError:
                raise ValueError(f"--rrule: {name} wants YYYYMMDDTHHMMSS, not "
                                 f"{value!r}") from None
        elif name in RRULE_KEYS:
            numbers = _rrule_numbers(name, value)
            fields[RRULE_KEYS[name]] = numbers[0] if name == "COUNT" else numbers
        else:
            raise ValueError(f"--rrule: unsupported part {name!r}")
    if freq is None:
        raise ValueError("--rrule needs FREQ=...")
    return rrule(freq, timezone=zone, **fields)


def _rrule_numbers(name: str, value: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",")]
    except ValueError:
        raise ValueError(f"--rrule: {name} wants whole numbers, not {value!r}") from None


def _rrule_day(text: str) -> Any:
    """``MO`` or ``+1MO``/``-1FR`` (the first Monday, the last Friday of the period)."""
    from dateutil.rrule import weekday

    day = text.strip().upper()
    try:
        n = int(day[:-2]) if day[:-2] else None
        return weekday(WEEKDAYS[day[-2:]], n)
    except (KeyError, ValueError):
        raise ValueError(f"--rrule: BYDAY wants days such as MO,WE or +1MO, not "
                         f"{text.strip()!r}") from None


def _json_option(text: str | None, what: str, kind: type) -> Any:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(value, kind):
        raise ValueError(f"{what} must be a JSON {kind.__name__}")
    return value


# -- commands --------------------------------------------------------------------------


@click.group(name="redbeat")
@click.option("--url", envvar="REDBEAT_REDIS_URL",
              help="Redis URL of the schedule (under celery: instead of the app's).")
@click.option("--prefix", envvar="REDBEAT_KEY_PREFIX", default=None,
              help="Key prefix (default redbeat:, or the app's under celery).")
@click.option("--timezone", "zone", default=None,
              help="Time zone times are shown in (default UTC, or the app's under celery; "
                   "standalone, crontabs are evaluated in it too).")
@click.option("--timeout", type=float, default=None,
              help=f"Seconds to wait for Redis (default {DEFAULT_TIMEOUT:g}).")
@click.version_option(__version__, "--version", prog_name="redbeat",
                      message="%(prog)s %(version)s")
@click.pass_context
def main(ctx: click.Context, url: str | None, prefix: str | None, zone: str | None,
         timeout: float | None) -> None:
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
    session = Session(url, prefix, zone, timeout, celery_app)
    if ctx.obj is None:
        ctx.obj = session
    ctx.meta[SESSION] = session


@main.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array: one object per entry.")
@click.option("--pattern", default=None, help="Only names matching this glob.")
@click.option("--state", type=click.Choice(["enabled", "failing", "disabled", "quarantined",
                                            "finished", "unscheduled"]), default=None,
              help="Only entries in this state.")
@click.pass_context
@command
def list_command(ctx: click.Context, as_json: bool, pattern: str | None,
                 state: str | None) -> None:
    """All entries: name, task, schedule, next and last run, runs (and failed ones),
    state (failing: the last dispatch was refused)."""
    from fnmatch import fnmatchcase

    app = _app(ctx)
    zone = _session(ctx).shown_zone
    rows, records = [], []
    for info in manage.iter_entries(app):
        if pattern and not fnmatchcase(info.name, pattern):
            continue
        record = _info_json(info)
        if state and record["state"] != state:
            continue
        records.append(record)
        entry = info.entry
        runs = str(record["runs"] if record["runs"] is not None else "-")
        rows.append([
            info.name, record["task"] or "?", record["schedule"] or "?",
            _when(info.next_run, zone),
            _when(_last_run(entry), zone),
            runs + (f" ({record['failed']} failed)" if record["failed"] else ""),
            record["state"] + (" (static)" if info.static else ""),
        ])
    if as_json:
        click.echo(json.dumps(records, indent=2))
    elif rows:
        click.echo(_table(rows, ["NAME", "TASK", "SCHEDULE", "NEXT RUN", "LAST RUN", "RUNS",
                                 "STATE"]))
    else:
        click.echo("no entries")


@main.command()
@click.argument("name")
@click.option("--runs", default=5, show_default=True, help="Upcoming run times to show.")
@click.pass_context
@command
def show(ctx: click.Context, name: str, runs: int) -> None:
    """One entry: definition, meta, history, failed dispatches, last change and upcoming
    runs."""
    app = _app(ctx)
    zone = _session(ctx).shown_zone
    info = manage.get_entry(app, name)
    click.echo(f"{info.name}  ({info.key}, {_state(info)}"
               f"{', static' if info.static else ''})")
    _show_fields(info)
    if info.quarantine or info.error:
        click.echo(f"quarantined: {info.quarantine or info.error}")
    _show_dispatches(info, zone)
    if info.entry is not None and info.entry.enabled:
        _show_next_runs(info.entry, zone, runs)


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
                click.echo(f"  {raw}")


def _show_dispatches(info: manage.EntryInfo, zone: tzinfo) -> None:
    """Recent dispatches, the refused ones marked, then the failures themselves."""
    failures = read_failures(info.fields)
    failed = failures.task_ids() if failures else {}
    if info.history:
        click.echo("recent dispatches:")
        for record in info.history:
            failure = failed.get(str(record.get("task_id")))
            click.echo(f"  {record.get('task_id')}  due {record.get('due')}  "
                       f"by {record.get('node')}"
                       + (f"  FAILED: {failure.reason}" if failure else ""))
    if failures is not None:
        click.echo(f"failed dispatches: {failures.count} (refused by Celery or the broker; "
                   "not sent)")
        for failure in failures.recent:
            click.echo(f"  {failure.task_id}  at {_when(failure.at, zone)}  "
                       f"{failure.reason}")


def _show_next_runs(entry: RedBeatSchedulerEntry, zone: tzinfo, runs: int) -> None:
    click.echo("next runs:")
    try:
        moment = entry.due_at
        for _ in range(runs):
            if moment is None:
                click.echo("  (no more runs)")
                break
            click.echo(f"  {_when(moment, zone)}")
            moment = next_after(entry.schedule, moment)
    except (OverflowError, ValueError) as exc:
        click.echo(f"  (cannot be computed: {exc})")


@main.command()
@click.argument("name")
@click.argument("task")
@click.option("--every", default=None, help="Interval: 30s, 5m, 1h30m, 1d, 1w.")
@click.option("--cron", default=None, help='Crontab: "*/5 * * * *", or @daily, @hourly...')
@click.option("--rrule", "rrule_text", default=None, help='RFC 5545: "FREQ=DAILY;BYHOUR=9".')
@click.option("--at", "run_at", default=None, help="One-off: run once at this ISO time.")
@click.option("--tz", "zone", default=None, help="IANA zone for --cron/--rrule.")
@click.option("--args", "args_json", default=None, help="Positional arguments, JSON list.")
@click.option("--kwargs", "kwargs_json", default=None, help="Keyword arguments, JSON object.")
@click.option("--queue", default=None, help="Queue to send to.")
@click.option("--disabled", is_flag=True, help="Store it paused.")
@click.option("--start", default=None, help="Send nothing before this ISO time.")
@click.option("--end", default=None, help="Send nothing after this ISO time.")
@click.option("--misfire-grace", type=float, default=None,
              help="Skip a slot that would be sent more than this many seconds late.")
@click.option("--no-coalesce", is_flag=True, help="Run each missed slot (bounded).")
@click.option("--jitter", type=float, default=None, help="Spread sends over this many seconds.")
@click.option("--ttl", type=float, default=None, help="Seconds to keep it once finished.")
@click.pass_context
@command
def add(ctx: click.Context, name: str, task: str, every: str | None, cron: str | None,
        rrule_text: str | None, run_at: str | None, zone: str | None, args_json: str | None,
        kwargs_json: str | None, queue: str | None, disabled: bool, start: str | None,
        end: str | None, misfire_grace: float | None, no_coalesce: bool,
        jitter: float | None, ttl: float | None) -> None:
    """Create or replace an entry (its run history is kept)."""
    given = [option for option in (every, cron, rrule_text, run_at) if option]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --every, --cron, --rrule, --at")
    zone = parse_zone(zone)
    if every:
        chosen: Any = parse_every(every)
    elif cron:
        chosen = parse_cron(cron, zone)
    elif run_at:
        chosen = clocked(parse_time(run_at, zone))
    else:
        chosen = parse_rrule(rrule_text or "", zone)
    policy = EntryPolicy(
        start_time=parse_time(start, zone, "--start") if start else None,
        end_time=parse_time(end, zone, "--end") if end else None,
        misfire_grace_time=misfire_grace,
        coalesce=not no_coalesce, jitter=jitter or 0.0, ttl=ttl,
    )
    entry = RedBeatSchedulerEntry(
        name, task, chosen, args=_json_option(args_json, "--args", list),
        kwargs=_json_option(kwargs_json, "--kwargs", dict),
        options={"queue": queue} if queue else None, enabled=not disabled, app=_app(ctx),
        policy=policy,
    )
    entry.save(changed_by="cli")
    upcoming = _when(entry.due_at, _session(ctx).shown_zone) if entry.enabled else "(disabled)"
    click.echo(f"saved {name}: {describe(entry.schedule)}, next run {upcoming}")


def _simple(verb: str, action: Callable[[Celery, str], Any], done: str, help: str) -> None:
    """A command taking one entry name. The help is given to click here: a docstring
    assigned after the decorators ran never reaches ``--help``."""
    @main.command(verb, help=help, short_help=help.split(". ")[0].rstrip("."))
    @click.argument("name")
    @click.pass_context
    @command
    def run(ctx: click.Context, name: str) -> None:
        result = action(_app(ctx), name)
        click.echo(done.format(name=name, result=result))


_simple("enable", lambda app, name: manage.set_enabled(app, name, True, "cli"), "enabled {name}",
        "Enable a disabled entry. The leader schedules it again from its stored last run.")
_simple("disable", lambda app, name: manage.set_enabled(app, name, False, "cli"),
        "disabled {name}",
        "Disable an entry. It keeps its definition and history, is never sent, and costs "
        "nothing per tick until enabled again.")
_simple("delete", manage.delete_entry, "deleted {name}",
        "Delete an entry and its history. A static entry (from beat_schedule) is written "
        "again when a leader next syncs the statics: remove it from beat_schedule too.")
def _queue_run(app: Celery, name: str) -> str:
    """Queue a run, and say who will send it: a run queued with no beat leading waits."""
    task_id = manage.run_now(app, name)
    holder, _ = store_for(app).lock_holder()
    if holder:
        return f"{task_id}; the leader sends it within a second"
    return f"{task_id}; no beat is leading now: it is sent when one takes the lead"


_simple("run-now", _queue_run, "queued {name} as {result}",
        "Send an entry once now. The leader sends it at its next tick with the task id "
        "<name>:run-now:<ms>; its schedule and run count are untouched.")


@main.command("export")
@click.option("--format", "fmt", type=click.Choice(["json", "yaml"]), default="json",
              show_default=True, help="Output format (yaml needs PyYAML).")
@click.pass_context
@command
def export_command(ctx: click.Context, fmt: str) -> None:
    """Every entry (definition, meta, score) to standard output."""
    document = manage.export_entries(_app(ctx))
    if fmt == "yaml":
        click.echo(_yaml().safe_dump(document, sort_keys=False, allow_unicode=True), nl=False)
    else:
        click.echo(json.dumps(document, indent=2))


@main.command("import")
@click.argument("source", type=click.File("r"))
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@click.option("--prune", is_flag=True, help="Delete entries the file does not have.")
@click.pass_context
@command
def import_command(ctx: click.Context, source: Any, dry_run: bool, prune: bool) -> None:
    """Write the entries of an export (JSON or YAML) from SOURCE, a file or - for
    standard input; entries already equal are kept."""
    text = source.read()
    try:
        document = json.loads(text)
    except ValueError:
        try:
            document = _yaml().safe_load(text)
        except Exception as exc:
            raise ValueError(f"{source.name} is neither JSON nor YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise ValueError(f"{source.name} is not a redbeat export")
    plan = manage.import_entries(_app(ctx), document, dry_run=dry_run, prune=prune)
    prefix = "would write" if dry_run else "wrote"
    click.echo(f"{prefix} {len(plan.written)}, unchanged {len(plan.unchanged)}, "
               f"{'would prune' if dry_run else 'pruned'} {len(plan.pruned)}")
    for name in plan.written:
        click.echo(f"  + {name}")
    for name in plan.pruned:
        click.echo(f"  - {name}")


def _yaml() -> Any:
    try:
        import yaml
    except ImportError as exc:
        raise ValueError("YAML needs PyYAML: pip install 'redbeat[yaml]'") from exc
    return yaml


@main.command("status")
@click.pass_context
@command
def status_command(ctx: click.Context) -> None:
    """Who leads, how the schedule stands, and what needs attention."""
    app = _app(ctx)
    state = manage.status(app)
    now = datetime.now(timezone.utc).timestamp()
    if state.lock_holder:
        click.echo(f"leader:      {Holder.parse(state.lock_holder)} "
                   f"(lock expires in {state.lock_ttl_ms / 1000:.1f}s)")
    else:
        click.echo("leader:      none (no node holds the lock)")
    for node, (role, at) in sorted(state.nodes.items()):
        click.echo(f"node:        {Holder.parse(node)}  {role}, last tick {now - at:.1f}s ago")
    click.echo(f"entries:     {state.entries} ({state.parked} parked: disabled, finished or "
               "quarantined)")
    click.echo(f"overdue:     {state.overdue}"
               + (f" (most late {state.most_late_s:.1f}s)" if state.overdue else ""))
    if state.waiting:
        click.echo(f"waiting:     {state.waiting} (written with score 0, not yet scheduled)")
    click.echo(f"pending:     {state.pending} slot(s) claimed, publish not yet confirmed")
    for name, score in state.next_due:
        moment = datetime.fromtimestamp(score, tz=timezone.utc)
        click.echo(f"next:        {_when(moment, _session(ctx).shown_zone)}  {name}")
    for name, reason in state.quarantined:
        click.echo(f"quarantined: {name}: {reason}")
    store = store_for(app)
    failing = failing_summary(store.failure_rows(manage.QUARANTINE_SAMPLE), ensure_conf(app).keys)
    click.echo(f"failing:     {len(failing.failing)} (last dispatch refused by Celery or the "
               f"broker; {failing.total} failed dispatch(es) recorded)")
    for name, failure in failing.failing:
        click.echo(f"failing:     {name}: {failure.reason} "
                   f"(at {_when(failure.at, _session(ctx).shown_zone)})")
    click.echo(f"redis:       {state.redis_version}, maxmemory-policy "
               f"{state.eviction_policy or 'unknown (CONFIG GET refused)'}")
    if state.eviction_policy and state.eviction_policy.startswith("allkeys-"):
        click.echo("warning:     allkeys-* eviction can silently delete schedule entries; "
                   "use noeviction or volatile-*", err=True)


@main.command("check")
@click.option("--host", default=None, help="Host whose scheduler to check (default: this).")
@click.option("--pid", type=int, default=None, help="Only the scheduler with this pid.")
@click.option("--max-age", type=float, default=None,
              help="Seconds since its last tick that still count as alive.")
@click.pass_context
@command
def check_command(ctx: click.Context, host: str | None, pid: int | None,
                  max_age: float | None) -> None:
    """Health probe: exit 0 when this host's beat leads or stands by a live leader;
    1 otherwise, Redis unreachable included (a probe has one failure code)."""
    try:
        result = health.check(_app(ctx), host=host, pid=pid, max_age=max_age)
    except AUTH_ERRORS as exc:
        click.echo(f"unhealthy: {auth_message(exc)}")
        sys.exit(EXIT_FAILED)
    except redis.exceptions.RedisError as exc:
        click.echo(f"unhealthy: Redis unreachable ({redact(str(exc))})")
        sys.exit(EXIT_FAILED)
    click.echo(("healthy: " if result.healthy else "unhealthy: ") + result.reason)
    if not result.healthy:
        sys.exit(EXIT_FAILED)


#: ``celery -A proj redbeat ...`` (registered through the ``celery.commands`` entry point)
celery_command = main

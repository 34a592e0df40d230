"""Typed settings, read once from ``app.conf`` and passed down.

Every setting is accepted under its Celery 4+ name (``redbeat_redis_url``) and its
Celery 3 upper-case name (``REDBEAT_REDIS_URL``), as celery-redbeat 2.4.2 accepts them,
and under a ``config_from_object`` namespace (``CELERY_REDBEAT_REDIS_URL`` with Django's
``namespace="CELERY"``); see :func:`conf_lookup`.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from celery import Celery

from .keys import KeyLayout
from .redaction import redact

logger = logging.getLogger("celery.beat")

_MISSING = object()

DEFAULT_KEY_PREFIX = "redbeat:"
#: How often a standby asks for the lock, and the longest a leader sleeps, so a new
#: entry saved by anyone is picked up within this many seconds.
DEFAULT_POLL_INTERVAL = 1.0
#: With no ``redbeat_lock_timeout``, the lease lasts this many poll intervals. The
#: leader renews it on every poll, so it need not outlive a long ``beat_max_loop_interval``
#: as 2.4.2's ``5 x max interval`` (25 minutes by default) had to: a killed leader is
#: replaced within about this many seconds plus one poll.
LEASE_POLLS = 5
DEFAULT_BATCH_SIZE = 1000
DEFAULT_HISTORY_LENGTH = 10
#: Dispatch records the schedule's history stream keeps (about 80 bytes each): under
#: 1 MB in all, whatever the number of entries.
DEFAULT_HISTORY_STREAM_LENGTH = 10_000
#: Seconds a run that beat dispatched may go without a report from a worker (queued,
#: started, retried) before it counts as lost: an entry whose policy waits for its runs
#: (``overlap``, ``relative_to``) is then released (see docs/outcomes.md).
DEFAULT_LOST_AFTER = 3600.0
#: ``redbeat_publish_timeout``'s default: the socket timeouts of beat's own connection
#: to a Redis broker, so a publish to a broker that hangs instead of refusing ends.
DEFAULT_PUBLISH_TIMEOUT = 3.0
AT_LEAST_ONCE = "at-least-once"
AT_MOST_ONCE = "at-most-once"

#: Every setting redbeat reads (its own names; Celery's are Celery's business). A
#: ``redbeat_*`` key of the configuration that is not one of these is a typo or a
#: setting of another version, ignored silently until it is warned about.
KNOWN_SETTINGS = frozenset({
    "redbeat_redis_url", "redbeat_redis_use_ssl", "redbeat_redis_options",
    "redbeat_key_prefix", "redbeat_lock_key", "redbeat_lock_timeout",
    "redbeat_poll_interval", "redbeat_batch_size", "redbeat_delivery",
    "redbeat_deterministic_task_ids", "redbeat_exit_on_lock_loss",
    "redbeat_history_length", "redbeat_history_stream_length",
    "redbeat_refuse_evicting_redis",
    "redbeat_misfire_grace_time", "redbeat_publish_timeout",
    "redbeat_metrics_port", "redbeat_metrics_address",
    "redbeat_web_token", "redbeat_web_user", "redbeat_web_password",
    "redbeat_worker_outcomes", "redbeat_lost_after",
})


class SettingError(ValueError):
    """One or more settings have a value redbeat cannot use; the message names each
    (one per line), so a configuration mistake reads as one, not as a traceback."""

    def __init__(self, problems: list[str], what: str = "redbeat setting") -> None:
        super().__init__(f"invalid {what}s: " + "; ".join(problems)
                         if len(problems) > 1 else f"invalid {what}: {problems[0]}")
        self.problems = problems


def unknown_settings(conf: Mapping[str, Any], namespace: str | None = None) -> list[str]:
    """One warning per ``redbeat_*`` key (either case, or under the app's namespace as
    ``CELERY_REDBEAT_*``) that redbeat does not read, with the closest known name: a
    misspelled ``redbeat_redis_ulr`` would otherwise leave the schedule on the broker's
    Redis without a word."""
    try:
        names = list(conf.keys())
    except Exception:  # a configuration source that cannot list itself
        return []
    prefixes = ("redbeat_", f"{namespace.lower()}_redbeat_" if namespace else "redbeat_")
    found = []
    for name in names:
        if not isinstance(name, str):
            continue
        lowered = name.lower()
        if not lowered.startswith(prefixes):
            continue
        at = lowered.index("redbeat_")
        setting = lowered[at:]
        if setting in KNOWN_SETTINGS:
            continue
        # compared without the shared "redbeat_", which would make anything look close
        close = difflib.get_close_matches(setting[len("redbeat_"):], sorted(
            known[len("redbeat_"):] for known in KNOWN_SETTINGS), n=1, cutoff=0.6)
        # the hint in the user's own spelling: CELERY_REDBEAT_REDIS_URL for a Django
        # namespace, REDBEAT_REDIS_URL for Celery 3 names
        suggestion = name[:at] + ("REDBEAT_" + close[0].upper() if name[at:].isupper()
                                  else "redbeat_" + close[0]) if close else ""
        hint = f"; did you mean {suggestion}?" if close else ""
        found.append(f"unknown setting {name} is ignored{hint}")
    return sorted(found)


def _number(value: Any, name: str, problems: list[str], *, minimum: float = 0.0,
            strict: bool = True, integer: bool = False) -> Any:
    """``value`` as a number above (or at, unless ``strict``) ``minimum``; a problem is
    recorded and None returned otherwise. Numeric text is accepted (settings often come
    from the environment); booleans are not numbers here."""
    kind = "a whole number" if integer else "a number"
    try:
        if isinstance(value, bool):
            raise TypeError
        number = int(value) if integer and not isinstance(value, float) else float(value)
        if integer and isinstance(value, float) and not value.is_integer():
            raise ValueError
        if integer:
            number = int(number)
    except (TypeError, ValueError, OverflowError):
        problems.append(f"{name}={value!r} is not {kind}")
        return None
    if not math.isfinite(number) or number < minimum or (strict and number == minimum):
        bound = f"{'above' if strict else 'at least'} {minimum:g}"
        problems.append(f"{name}={value!r} must be {bound}")
        return None
    return number


TRUE_TEXT = frozenset({"1", "true", "yes", "on"})
FALSE_TEXT = frozenset({"0", "false", "no", "off", ""})


def _flag(value: Any, name: str, problems: list[str]) -> bool | None:
    """A boolean setting: True/False, 0/1, or their usual spellings as text. ``bool()``
    would read the text "false" as true."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE_TEXT | FALSE_TEXT:
        return value.strip().lower() in TRUE_TEXT
    problems.append(f"{name}={value!r} is not true or false")
    return None


def _typed(value: Any, name: str, problems: list[str], kinds: tuple[type, ...],
           wanted: str) -> bool:
    if value is None or isinstance(value, kinds):
        return True
    problems.append(f"{name}={value!r} must be {wanted}")
    return False


def conf_lookup(conf: Mapping[str, Any], name: str, default: Any = _MISSING) -> Any:
    """The value of ``name`` under either spelling, or ``default``.

    Reads by subscript, never with ``in``: until some key is read, ``app.conf`` holds
    only what was set on it directly and ``in`` answers from that alone, so a fresh
    process whose app called ``config_from_object`` (module, object, dict or Django's
    settings) would see none of its settings; a subscript makes Celery load them first.
    Celery's ``Settings`` then also tries the namespaced spelling
    (``CELERY_REDBEAT_REDIS_URL`` under ``namespace="CELERY"``) and Celery's own
    Celery 3 names (``CELERYBEAT_SCHEDULE`` for ``beat_schedule``, ``BROKER_USE_SSL``);
    redbeat's names are unknown to Celery, so their upper-case spelling is tried here.
    Where ``Settings`` computes a setting in a property (``broker_url`` honours
    ``CELERY_BROKER_URL`` from the environment, ``timezone`` Django's ``TIME_ZONE``), the
    property is read, so redbeat falls back to the broker Celery itself uses.
    """
    if isinstance(getattr(type(conf), name, None), property):
        return getattr(conf, name)
    for spelling in (name, name.upper()):
        try:
            return conf[spelling]
        except KeyError:
            continue
    return default


def broker_fallback(conf: Mapping[str, Any], name: str) -> Any:
    """A broker setting redbeat borrows when its own is unset (``broker_url``,
    ``broker_use_ssl``, ``broker_transport_options``): Celery's environment override of
    the URL, then the Celery 3 spelling as 2.4.2 reads it (Celery answers it from the
    new name too, but a raw ``BROKER_URL`` key wins, as it did in 2.4.2), then the
    setting as Celery reads it."""
    if name == "broker_url" and os.environ.get("CELERY_BROKER_URL"):
        return os.environ["CELERY_BROKER_URL"]
    try:
        return conf[name.upper()]
    except KeyError:
        return conf_lookup(conf, name, None)


def conf_has(conf: Mapping[str, Any], name: str) -> bool:
    """Whether ``name`` is set under any spelling (2.4.2's ``is_key_in_conf``); a setting
    Celery knows always is, through its default."""
    return conf_lookup(conf, name) is not _MISSING


def _text(value: Any, name: str, problems: list[str]) -> str | None:
    return value if _typed(value, name, problems, (str,), "text") else None


def _url(value: Any, name: str, problems: list[str]) -> str | None:
    return value if _typed(value, name, problems, (str,), "a redis:// URL") else None


def _options(value: Any, name: str, problems: list[str]) -> dict[str, Any] | None:
    if _typed(value, name, problems, (Mapping,), "a dict of options"):
        return dict(value)
    return None


def _as_is(value: Any, name: str, problems: list[str]) -> Any:
    return value


def _delivery(value: Any, name: str, problems: list[str]) -> str | None:
    if value in (AT_LEAST_ONCE, AT_MOST_ONCE):
        return str(value)
    problems.append(f"{name}={value!r} must be {AT_LEAST_ONCE!r} or {AT_MOST_ONCE!r}")
    return None


def _seconds(value: Any, name: str, problems: list[str]) -> float | None:
    """Seconds, 0 included; 0 reads as "the default" for the settings whose default is
    computed (``redbeat_lock_timeout``: 0 meant that in 2.4.2 too, ``timeout or ...``)."""
    return _number(value, name, problems, strict=False) or None


def _positive(value: Any, name: str, problems: list[str]) -> float | None:
    return _number(value, name, problems)


def _grace(value: Any, name: str, problems: list[str]) -> float | None:
    return _number(value, name, problems, strict=False)


def _batch(value: Any, name: str, problems: list[str]) -> int | None:
    return _number(value, name, problems, minimum=1, strict=False, integer=True)


def _count(value: Any, name: str, problems: list[str]) -> int | None:
    return _number(value, name, problems, strict=False, integer=True)


def _port(value: Any, name: str, problems: list[str]) -> int | None:
    port = _number(value, name, problems, minimum=1, strict=False, integer=True)
    if port is not None and port > 65535:
        problems.append(f"{name}={port!r} must be at most 65535")
        return None
    return port


@dataclass(frozen=True)
class Setting:
    """One row of :data:`SETTINGS`: the config attribute, the setting names read for it
    (the first one set wins; a ``broker_*`` name is the fallback 2.4.2 read), how a
    value is checked and converted (None: refused, with a problem recorded), and the
    value when none is set or the one set was refused."""

    attribute: str
    names: tuple[str, ...]
    convert: Callable[[Any, str, list[str]], Any]
    default: Any
    #: whether empty text counts as not set (text settings: an empty prefix or URL)
    blank_is_unset: bool = False

    def lookup(self, conf: Mapping[str, Any]) -> tuple[str | None, Any]:
        """The first name set (not None) and its value."""
        for name in self.names:
            value = (broker_fallback(conf, name) if name.startswith("broker_")
                     else conf_lookup(conf, name, None))
            if value is not None and not (self.blank_is_unset and value == ""):
                return name, value
        return None, None


#: Every setting redbeat reads into :class:`RedBeatConfig`, in reading order (the
#: prefix first, as 2.4.2 reads it: with Celery's test app, defaults added by
#: ``conf.add_defaults`` are visible to the first read only). ``redbeat_lock_key`` is
#: read after them (its value is relative to the prefix).
SETTINGS = (
    Setting("key_prefix", ("redbeat_key_prefix",), _text, DEFAULT_KEY_PREFIX, True),
    Setting("redis_url", ("redbeat_redis_url", "broker_url"), _url, "", True),
    Setting("redis_use_ssl", ("redbeat_redis_use_ssl", "broker_use_ssl"), _as_is, None),
    Setting("redis_options", ("redbeat_redis_options", "broker_transport_options"), _options,
            {}),
    Setting("lock_timeout", ("redbeat_lock_timeout",), _seconds, None),
    Setting("poll_interval", ("redbeat_poll_interval",), _seconds, DEFAULT_POLL_INTERVAL),
    Setting("batch_size", ("redbeat_batch_size",), _batch, DEFAULT_BATCH_SIZE),
    Setting("history_length", ("redbeat_history_length",), _count, DEFAULT_HISTORY_LENGTH),
    Setting("history_stream_length", ("redbeat_history_stream_length",), _count,
            DEFAULT_HISTORY_STREAM_LENGTH),
    Setting("misfire_grace_time", ("redbeat_misfire_grace_time",), _grace, None),
    # the workers' side: outcomes recorded, and how long a silent run stays "running"
    Setting("worker_outcomes", ("redbeat_worker_outcomes",), _flag, False),
    Setting("lost_after", ("redbeat_lost_after",), _seconds, DEFAULT_LOST_AFTER),
    Setting("publish_timeout", ("redbeat_publish_timeout",), _positive,
            DEFAULT_PUBLISH_TIMEOUT),
    Setting("delivery", ("redbeat_delivery",), _delivery, AT_LEAST_ONCE, True),
    Setting("deterministic_task_ids", ("redbeat_deterministic_task_ids",), _flag, True),
    Setting("exit_on_lock_loss", ("redbeat_exit_on_lock_loss",), _flag, False),
    Setting("refuse_evicting_redis", ("redbeat_refuse_evicting_redis",), _flag, False),
    # what redbeat serves over HTTP: beat's metrics and the web view's credentials
    Setting("metrics_port", ("redbeat_metrics_port",), _port, None),
    Setting("metrics_address", ("redbeat_metrics_address",), _text, "127.0.0.1", True),
    Setting("web_token", ("redbeat_web_token",), _text, None, True),
    Setting("web_user", ("redbeat_web_user",), _text, None, True),
    Setting("web_password", ("redbeat_web_password",), _text, None, True),
)


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


#: The default of every setting attribute: "read it from the app, else the table's
#: default". A copy (``dataclasses.replace``) passes every value on, so it reads nothing.
UNSET: Any = _Unset()


@dataclass(frozen=True)
class RedBeatConfig:
    """What redbeat needs from the Celery configuration, resolved once and frozen.

    Built from an app (``RedBeatConfig(app)``, the 2.4.2 signature), where every
    attribute not given is read through :data:`SETTINGS`, or from keyword arguments in
    tests and tools. An override is a copy, ``dataclasses.replace(config, ...)``, which
    goes through the same checks and reads nothing again; nobody changes a config that
    other code may hold.
    """

    app: Celery | None = None
    redis_url: str = UNSET
    redis_use_ssl: Any = UNSET
    redis_options: dict[str, Any] = UNSET
    #: whether ``redis_options`` are redbeat's own (else borrowed from the broker's)
    redis_options_from_redbeat: bool = UNSET
    key_prefix: str = UNSET
    lock_key: str | None = UNSET
    #: ``redbeat_lock_timeout`` as set (None when unset, as 2.4.2's config reports it);
    #: the lease actually in force is :meth:`lease_timeout`.
    lock_timeout: float | None = UNSET
    poll_interval: float = UNSET
    batch_size: int = UNSET
    delivery: str = UNSET
    deterministic_task_ids: bool = UNSET
    exit_on_lock_loss: bool = UNSET
    #: dispatch records ``show`` lists per entry (0: none are recorded)
    history_length: int = UNSET
    #: dispatch records kept in all, in the ``<prefix>:history`` stream (0: none)
    history_stream_length: int = UNSET
    refuse_evicting_redis: bool = UNSET
    misfire_grace_time: float | None = UNSET
    #: Whether this app's workers record the outcomes of beat's runs (redbeat.worker).
    worker_outcomes: bool = UNSET
    #: Default seconds a dispatched run may stay silent before it counts as lost.
    lost_after: float = UNSET
    #: seconds: the socket timeouts of beat's own connection to a Redis broker, and the
    #: longest a tick waits for a send
    publish_timeout: float = UNSET
    redis_url_is_fallback: bool = UNSET
    #: Port of beat's Prometheus endpoint (None: no endpoint), and the address it binds.
    metrics_port: int | None = UNSET
    metrics_address: str = UNSET
    #: Credentials of ``redbeat web`` (a bearer token, or HTTP basic user and password).
    web_token: str | None = field(default=UNSET, repr=False)
    web_user: str | None = UNSET
    web_password: str | None = field(default=UNSET, repr=False)
    #: Warnings about the configuration (unknown settings, a lock timeout raised to its
    #: floor), kept rather than logged where they arise: the configuration is often
    #: read before Celery has set up logging (``celery beat`` builds a scheduler for its
    #: banner first), so the scheduler logs them once it runs (:meth:`log_notices`).
    notices: list[str] = field(default_factory=list, compare=False)
    _logged: set[str] = field(default_factory=set, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        conf = self.app.conf if self.app is not None else None
        problems: list[str] = []
        read_names: dict[str, str | None] = {}
        read_any = False
        for setting in SETTINGS:
            given = getattr(self, setting.attribute)
            read_any = read_any or (given is UNSET and conf is not None)
            if given is UNSET:
                name, raw = setting.lookup(conf) if conf is not None else (None, None)
            else:
                name, raw = setting.names[0], given
            value = None if raw is None else setting.convert(raw, name or "", problems)
            self._set(setting.attribute, setting.default if value is None else value)
            read_names[setting.attribute] = name if given is UNSET else setting.names[0]
        if self.lock_key is UNSET:
            self._set("lock_key", self._read_lock_key(conf, problems))
        if self.redis_url_is_fallback is UNSET:
            self._set("redis_url_is_fallback", read_names["redis_url"] == "broker_url")
        if self.redis_options_from_redbeat is UNSET:
            self._set("redis_options_from_redbeat",
                      read_names["redis_options"] != "broker_transport_options")
        self._set("notices", list(self.notices))  # a copy has its own
        if problems:
            raise SettingError(problems)
        if read_any and self.app is not None:
            namespace = getattr(self.app, "namespace", None)
            for message in unknown_settings(self.app.conf, namespace if isinstance(
                    namespace, str) else None):
                self.notice(message)
            self._warn_inherited()

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # while being built: frozen after

    def _read_lock_key(self, conf: Mapping[str, Any] | None, problems: list[str]) -> str | None:
        """``redbeat_lock_key``, relative to the prefix (2.4.2 prepends it); None (set
        explicitly) turns locking off."""
        lock_key = _MISSING if conf is None else conf_lookup(conf, "redbeat_lock_key", _MISSING)
        if lock_key is not _MISSING and not _typed(lock_key, "redbeat_lock_key", problems,
                                                   (str,), "text or None"):
            lock_key = _MISSING
        if lock_key is _MISSING:
            return KeyLayout(self.key_prefix).lock
        return None if lock_key is None else KeyLayout(self.key_prefix, str(lock_key)).lock

    def _warn_inherited(self) -> None:
        """celery-redbeat 2.4.2 deprecated borrowing the broker's settings (the schedule
        then shares the broker's Redis and its transport options); so does this package,
        with the same DeprecationWarnings, while still honouring them. The URL fallback
        is also logged (a DeprecationWarning is hidden by default, and where the schedule
        lives is worth a line in beat's log): the README and configuration.md say so."""
        if self.redis_url_is_fallback:
            self.notice(f"redbeat_redis_url is not set: the schedule is kept in the broker's "
                        f"Redis (broker_url {redact(self.redis_url)}); set redbeat_redis_url")
            warnings.warn("redbeat_redis_url is not set: falling back to broker_url is "
                          "deprecated; set redbeat_redis_url", DeprecationWarning, stacklevel=3)
        if not self.redis_options_from_redbeat and self.redis_options:
            warnings.warn("redbeat_redis_options is not set: falling back to "
                          "broker_transport_options is deprecated; set redbeat_redis_options",
                          DeprecationWarning, stacklevel=3)

    def notice(self, message: str) -> None:
        """Keep a configuration warning for :meth:`log_notices` (once per text)."""
        if message not in self.notices:
            self.notices.append(message)

    def log_notices(self) -> None:
        """Log the configuration warnings not logged yet: called by the scheduler when
        it runs, when Celery's logging is in place, so they reach beat's log."""
        for message in self.notices:
            if message not in self._logged:
                self._logged.add(message)
                logger.warning("beat: %s", message)

    def lease_timeout(self) -> float:
        """The lock timeout in force: the setting (or the scheduler's override of it in
        its copy), else :data:`LEASE_POLLS` poll intervals.

        The leader extends the lock at least once per poll interval (and between
        batches of a long tick); three missed extensions in a row must not be enough to
        lose it, or a slow Redis reply hands leadership around for nothing, so a shorter
        timeout is raised to that floor (with a warning).
        """
        timeout = self.lock_timeout or self.poll_interval * LEASE_POLLS
        floor = self.poll_interval * 3 + 1
        if timeout < floor:
            self.notice(f"redbeat_lock_timeout={timeout:g}s is too close to the "
                        f"{self.poll_interval:g}s poll interval; using {floor:g}s")
            return floor
        return float(timeout)

    # -- the 2.4.2 attribute names, kept for code that reads them --------------------

    @property
    def history_records(self) -> int:
        """Dispatch records the history stream keeps; 0 (either setting at 0): none are
        written."""
        return self.history_stream_length if self.history_length > 0 else 0

    @cached_property
    def keys(self) -> KeyLayout:
        """The key layout of this prefix and lock key, built once per config (frozen, so
        it never goes stale): a save asks for it several times (its key, the check that
        the key is not one of the package's own, which builds the layout's set of them),
        and building it each time was a tenth of a save's own work."""
        return KeyLayout(self.key_prefix, self.lock_key)

    @property
    def schedule_key(self) -> str:
        return self.keys.schedule

    @property
    def statics_key(self) -> str:
        return self.keys.statics

    @property
    def redbeat_redis_options(self) -> dict[str, Any]:
        return self.redis_options

    @property
    def schedule(self) -> dict[str, Any]:
        """``beat_schedule`` of the app, read live so tests and tools may change it."""
        if self.app is None:
            return {}
        return dict(conf_lookup(self.app.conf, "beat_schedule", None) or {})

    @schedule.setter
    def schedule(self, value: dict[str, Any]) -> None:
        if self.app is not None:
            self.app.conf.beat_schedule = value

    def either_or(self, name: str, default: Any = None) -> Any:
        if name == name.upper():
            warnings.warn(f"Celery 3 setting name {name} (use {name.lower()})", UserWarning,
                          stacklevel=2)
        if self.app is None:
            return default
        return conf_lookup(self.app.conf, name, default)

    def is_key_in_conf(self, name: str) -> bool:
        return self.app is not None and conf_has(self.app.conf, name)


def _set_property_or_refuse(self: RedBeatConfig, name: str, value: Any) -> None:
    """A frozen config still takes 2.4.2's ``config.schedule = {...}``: that property
    writes the app's ``beat_schedule``, not the config. Any other assignment raises
    ``FrozenInstanceError``."""
    attribute = getattr(type(self), name, None)
    if isinstance(attribute, property) and attribute.fset is not None:
        attribute.fset(self, value)
    else:
        _frozen_setattr(self, name, value)


_frozen_setattr = RedBeatConfig.__setattr__
RedBeatConfig.__setattr__ = _set_property_or_refuse  # type: ignore[method-assign,assignment]


def ensure_conf(app: Celery | None = None) -> RedBeatConfig:
    """The app's settings, built on first use and kept on ``app.redbeat_conf``."""
    if app is None:
        from celery import current_app

        app = current_app._get_current_object()
    config = getattr(app, "redbeat_conf", None)
    if config is None:
        config = RedBeatConfig(app)
        app.redbeat_conf = config
    return config

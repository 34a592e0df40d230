"""Typed settings, read once from ``app.conf`` and passed down.

Every setting is accepted under its Celery 4+ name (``redbeat_redis_url``) and its
Celery 3 upper-case name (``REDBEAT_REDIS_URL``), as celery-redbeat 2.4.2 accepts them,
and under a ``config_from_object`` namespace (``CELERY_REDBEAT_REDIS_URL`` with Django's
``namespace="CELERY"``); see :func:`conf_lookup`.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from .keys import KeyLayout

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
AT_LEAST_ONCE = "at-least-once"
AT_MOST_ONCE = "at-most-once"


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


@dataclass
class RedBeatConfig:
    """What redbeat needs from the Celery configuration, resolved once.

    Built from an app (``RedBeatConfig(app)``, the 2.4.2 signature) or directly from
    keyword arguments in tests and tools.
    """

    app: Celery | None = None
    redis_url: str = ""
    redis_use_ssl: Any = None
    redis_options: dict[str, Any] = field(default_factory=dict)
    redis_options_from_redbeat: bool = True
    key_prefix: str = DEFAULT_KEY_PREFIX
    lock_key: str | None = None
    #: ``redbeat_lock_timeout`` as set (None when unset, as 2.4.2's config reports it);
    #: the lease actually in force is :meth:`lease_timeout`.
    lock_timeout: float | None = None
    poll_interval: float = DEFAULT_POLL_INTERVAL
    batch_size: int = DEFAULT_BATCH_SIZE
    delivery: str = AT_LEAST_ONCE
    deterministic_task_ids: bool = True
    exit_on_lock_loss: bool = False
    history_length: int = DEFAULT_HISTORY_LENGTH
    refuse_evicting_redis: bool = False
    misfire_grace_time: float | None = None
    redis_url_is_fallback: bool = False

    def __post_init__(self) -> None:
        if self.app is not None:
            self._read(self.app.conf)
            self._warn_inherited()
        self._check()

    def _warn_inherited(self) -> None:
        """celery-redbeat 2.4.2 deprecated borrowing the broker's settings (the schedule
        then shares the broker's Redis and its transport options); so does this package,
        with the same DeprecationWarnings, while still honouring them."""
        if self.redis_url_is_fallback:
            warnings.warn("redbeat_redis_url is not set: falling back to broker_url is "
                          "deprecated; set redbeat_redis_url", DeprecationWarning, stacklevel=3)
        if not self.redis_options_from_redbeat and self.redis_options:
            warnings.warn("redbeat_redis_options is not set: falling back to "
                          "broker_transport_options is deprecated; set redbeat_redis_options",
                          DeprecationWarning, stacklevel=3)

    def _read(self, conf: Mapping[str, Any]) -> None:
        # The prefix first, as 2.4.2 reads it: with Celery's test app, defaults added by
        # ``conf.add_defaults`` are visible to the first read only.
        self.key_prefix = conf_lookup(conf, "redbeat_key_prefix", None) or DEFAULT_KEY_PREFIX
        url = conf_lookup(conf, "redbeat_redis_url", None)
        self.redis_url_is_fallback = not url
        self.redis_url = url or broker_fallback(conf, "broker_url") or ""
        self.redis_use_ssl = conf_lookup(
            conf, "redbeat_redis_use_ssl", broker_fallback(conf, "broker_use_ssl")
        )
        options = conf_lookup(conf, "redbeat_redis_options", _MISSING)
        self.redis_options_from_redbeat = options is not _MISSING
        if options is _MISSING:
            options = broker_fallback(conf, "broker_transport_options")
        self.redis_options = dict(options or {})
        lock_key = conf_lookup(conf, "redbeat_lock_key", _MISSING)
        self.lock_key = (
            KeyLayout(self.key_prefix).lock
            if lock_key is _MISSING
            else (None if lock_key is None else KeyLayout(self.key_prefix, lock_key).lock)
        )
        lock_timeout = conf_lookup(conf, "redbeat_lock_timeout", None)
        self.lock_timeout = None if lock_timeout is None else float(lock_timeout)
        self.poll_interval = float(
            conf_lookup(conf, "redbeat_poll_interval", None) or DEFAULT_POLL_INTERVAL
        )
        self.batch_size = int(conf_lookup(conf, "redbeat_batch_size", None) or DEFAULT_BATCH_SIZE)
        self.delivery = conf_lookup(conf, "redbeat_delivery", None) or AT_LEAST_ONCE
        self.deterministic_task_ids = bool(
            conf_lookup(conf, "redbeat_deterministic_task_ids", True)
        )
        self.exit_on_lock_loss = bool(conf_lookup(conf, "redbeat_exit_on_lock_loss", False))
        self.history_length = int(
            conf_lookup(conf, "redbeat_history_length", DEFAULT_HISTORY_LENGTH)
        )
        self.refuse_evicting_redis = bool(
            conf_lookup(conf, "redbeat_refuse_evicting_redis", False)
        )
        grace = conf_lookup(conf, "redbeat_misfire_grace_time", None)
        self.misfire_grace_time = None if grace is None else float(grace)

    def _check(self) -> None:
        if self.delivery not in (AT_LEAST_ONCE, AT_MOST_ONCE):
            raise ValueError(
                f"redbeat_delivery must be {AT_LEAST_ONCE!r} or {AT_MOST_ONCE!r}, "
                f"not {self.delivery!r}"
            )
        if self.batch_size < 1:
            raise ValueError("redbeat_batch_size must be at least 1")

    def lease_timeout(self, requested: float | None = None) -> float:
        """The lock timeout in force: ``requested`` (a scheduler argument), else the
        setting, else :data:`LEASE_POLLS` poll intervals.

        The leader extends the lock at least once per poll interval (and between
        batches of a long tick); three missed extensions in a row must not be enough to
        lose it, or a slow Redis reply hands leadership around for nothing, so a shorter
        timeout is raised to that floor (with a warning).
        """
        timeout = requested or self.lock_timeout or self.poll_interval * LEASE_POLLS
        floor = self.poll_interval * 3 + 1
        if timeout < floor:
            logger.warning(
                "beat: redbeat_lock_timeout=%ss is too close to the %ss poll interval; using %ss",
                timeout, self.poll_interval, floor,
            )
            return floor
        return float(timeout)

    # -- the 2.4.2 attribute names, kept for code that reads them --------------------

    @property
    def keys(self) -> KeyLayout:
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

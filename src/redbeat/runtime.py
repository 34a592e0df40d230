"""One Celery app's redbeat runtime: its settings, Redis client, store and parsed
definitions, in one object per app.

The settings stay on ``app.redbeat_conf`` and the client on ``app.redbeat_redis``, the
attributes celery-redbeat 2.4.2 defined and that code written for it reads and assigns
(a test suite's fresh ``FakeRedis`` per test, a project's own client set in
``setup_schedule``). So nothing is cached past what the application set: the client is
resolved on every use (``app.redbeat_redis`` as it is now, or a replaced
``redbeat.schedulers.get_redis``), and the store is rebuilt when the client or the
settings object changed. Replacing the client is one assignment::

    app.redbeat_redis = redis.Redis.from_url(url)

A client that answers bytes (no ``decode_responses``) is given a twin on the same
server that answers text, for this package's own round trips only.
"""

from __future__ import annotations

import logging
import sys
from functools import lru_cache
from typing import Any

from celery import Celery

from . import decoder
from .connection import build_client, text_client, unwrapped
from .entry_fields import Definition, parse_definition
from .redaction import redact
from .retry import RetryingConnection, RetryPolicy
from .settings import RedBeatConfig, ensure_conf
from .store import ScheduleStore

logger = logging.getLogger("celery.beat")

#: The app's attribute holding its client: 2.4.2's name, assigned by applications.
CLIENT_ATTRIBUTE = "redbeat_redis"
#: The app's attribute holding its runtime (the one this package adds to the app, so
#: the runtime, its store and caches live and die with it).
RUNTIME_ATTRIBUTE = "redbeat_runtime"


class DefinitionCache:
    """One app's parsed definitions, by their text, and the schedules they share.

    The tick sees the same definitions again and again, and parsing one is most of the
    cost of planning it. Entries built from the cache share these objects, so only the
    scheduler (which never mutates them) uses it. One per app and key prefix: a
    schedule carries its app (a crontab's default zone is the app's), set here once,
    not on every tick.
    """

    def __init__(self, app: Celery, prefix: str, size: int = 16384) -> None:
        self.app = app
        self.prefix = prefix
        self.schedules = decoder.SharedSchedules()
        self.parse = lru_cache(maxsize=size)(self._parse)

    def _parse(self, key: str, text: str | None) -> Definition:
        definition = parse_definition(key, text, self.prefix, self.schedules.loads)
        definition.schedule.app = self.app
        return definition


class Runtime:
    """What redbeat keeps for one app. Built by :func:`runtime_for`, never by hand."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        #: The app's zone is not the one beat evaluates entries in (an app built by the
        #: standalone CLI, which has no access to the real one).
        self.zone_unknown = False
        self._store: tuple[Any, RedBeatConfig, ScheduleStore] | None = None
        self._definitions: DefinitionCache | None = None

    @property
    def settings(self) -> RedBeatConfig:
        """The app's settings (``app.redbeat_conf``, built on first use)."""
        return ensure_conf(self.app)

    def use_settings(self, settings: RedBeatConfig, new_client: bool = False) -> None:
        """Replace the app's settings (a checked copy, see settings.py); the store and
        definitions follow on their next use. ``new_client``: drop the client too, so
        one is built from these settings (a command line's ``--url``)."""
        self.app.redbeat_conf = settings
        if new_client:
            setattr(self.app, CLIENT_ATTRIBUTE, None)

    # -- the client ----------------------------------------------------------------------

    def own_client(self) -> Any:
        """``app.redbeat_redis`` as the application set it, or one built from the
        settings (and put there, as 2.4.2 did) when it set none: 2.4.2's ``get_redis``."""
        app = self.app
        client = getattr(app, CLIENT_ATTRIBUTE, None)
        if client is None:
            config = self.settings
            if config.redis_url_is_fallback and config.redis_url:
                logger.warning("beat: redbeat_redis_url is not set; using broker_url %s for "
                               "the schedule", redact(config.redis_url))
            client = build_client(config)
            retry_period = config.redis_options.get("retry_period")
            if retry_period is not None:
                client = RetryingConnection(retry_period, client)
            setattr(app, CLIENT_ATTRIBUTE, client)
        return client

    def client(self) -> Any:
        """The client to use now: what a replaced ``redbeat.schedulers.get_redis``
        returns (2.4.2's test suites patch it), else :meth:`own_client`."""
        schedulers = sys.modules.get("redbeat.schedulers")
        replaced = getattr(schedulers, "get_redis", get_redis)
        if replaced is not get_redis:
            return replaced(self.app)
        return self.own_client()

    # -- what is built on it ---------------------------------------------------------------

    @property
    def store(self) -> ScheduleStore:
        """The store on the current client and settings: built again only when either
        changed (one client and one retry policy per app while they do not)."""
        client, config = self.client(), self.settings
        built = self._store
        if built is not None and built[0] is client and built[1] is config:
            return built[2]
        retry = RetryPolicy(config.redis_options.get("retry_period"))
        store = ScheduleStore(text_client(unwrapped(client)), config.keys, retry,
                              config.history_records)
        self._store = (client, config, store)
        return store

    @property
    def definitions(self) -> DefinitionCache:
        """The app's parsed definitions, for the prefix in force."""
        cache = self._definitions
        prefix = self.app.redbeat_conf.key_prefix if cache is not None else \
            self.settings.key_prefix  # asked once per due row: the settings exist by then
        if cache is None or cache.prefix != prefix:
            cache = self._definitions = DefinitionCache(self.app, prefix)
        return cache


def runtime_for(app: Celery | None = None) -> Runtime:
    """The app's runtime (the current app's when None), built on first use."""
    runtime = getattr(app, RUNTIME_ATTRIBUTE, None)
    if runtime is None:
        owner = ensure_conf(app).app
        runtime = getattr(owner, RUNTIME_ATTRIBUTE, None)
        if runtime is None:
            runtime = Runtime(owner)
            setattr(owner, RUNTIME_ATTRIBUTE, runtime)
    return runtime


def store_for(app: Celery | None = None) -> ScheduleStore:
    """The app's store, on the client in force."""
    return runtime_for(app).store


def get_redis(app: Celery | None = None) -> Any:
    """The app's Redis client, built on first use (2.4.2's ``get_redis``)."""
    return runtime_for(app).own_client()


__all__ = ["CLIENT_ATTRIBUTE", "RUNTIME_ATTRIBUTE", "DefinitionCache", "Runtime", "get_redis",
           "runtime_for", "store_for"]

"""``RedBeatSchedulerEntry``: one periodic task as stored in Redis.

The entry is the Python face of a hash ``<prefix><name>`` with the fields
``definition`` and ``meta`` (see docs/data-format.md). It saves and loads through the
store. The fields' text is read (strictly: :class:`InvalidEntry`) and written by
redbeat.entry_fields, which is pure, so the planner decodes rows without this I/O.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import schedstate

from . import audit, compat, decoder, legacy
from . import labels as label_rules
from .entry_fields import (
    DECODE_ERRORS,
    POLICY_FIELDS,
    UTC_META,
    UTC_ZONE,
    Definition,
    InvalidEntry,
    as_utc_zone,
    extra_fields,
    meta_json,
    parse_definition,
    parse_meta,
    utc_meta_text,
)
from .nextrun import NextRun, follows_app_zone, next_run, score_of, to_score, upcoming_runs
from .nexttime import clock_now, next_after, to_millisecond, utc
from .policy import DEFAULT as DEFAULT_POLICY
from .policy import EntryPolicy
from .runtime import DefinitionCache, runtime_for, store_for
from .schedules import check_interval, clocked
from .settings import RedBeatConfig, ensure_conf
from .store import Save, ScheduleStore


class EntryNotFound(KeyError):
    """No entry of that name (or at that key). A KeyError, as 2.4.2 raised, so code
    written for it still catches it; the CLI maps this one, and no other KeyError, to
    "no entry named ..." (exit 3)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"no entry named {self.name!r}"


def node_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def changed_json(by: str, actor: str | None = None) -> str:
    """The entry's ``changed`` field (and ``created``, when it is new): when (epoch
    milliseconds), through what, who (``actor``; default the operating-system user),
    from which process (redbeat.audit). Kept short: every entry carries one. (The text
    ``json.dumps`` gives for that object, in keys' order; the user's and the node's
    parts made once per process.)"""
    who = json.dumps(actor) if actor is not None else _process_json()[0]
    return (f'{{"at": {round(time.time() * 1000)}, "by": {json.dumps(by)}, '
            f'"actor": {who}, "node": {_process_json()[1]}}}')


_PROCESS: tuple[int, str, str] = (0, "", "")


def _process_json() -> tuple[str, str]:
    """The operating-system user and ``node_name()`` as JSON texts, once per process (a
    fork is another process)."""
    global _PROCESS
    pid = os.getpid()
    if _PROCESS[0] != pid:
        _PROCESS = (pid, json.dumps(audit.current_user()), json.dumps(node_name()))
    return _PROCESS[1], _PROCESS[2]


class RedBeatSchedulerEntry(ScheduleEntry):
    """A periodic task stored in Redis. Signature and behaviour of celery-redbeat 2.4.2."""

    #: 2.4.2's class attribute (never set by it), kept for code that reads it.
    _meta = None
    #: What an entry built by a subclass that calls ``ScheduleEntry.__init__`` directly
    #: (skipping this constructor, as some 2.4.2 subclasses do) has: enabled, no policy.
    enabled = True
    policy: EntryPolicy = DEFAULT_POLICY
    #: The entry's labels; None when not known here (an entry the tick decoded, or one
    #: built without naming any): a save then keeps the stored ones
    labels: tuple[str, ...] | None = None

    def __init__(
        self,
        name: str | None = None,
        task: str | None = None,
        schedule: Any = None,
        args: Any = None,
        kwargs: dict[str, Any] | None = None,
        enabled: bool = True,
        options: dict[str, Any] | None = None,
        last_run_at: datetime | None = None,
        total_run_count: int | None = None,
        app: Celery | None = None,
        policy: EntryPolicy | None = None,
        **clsargs: Any,
    ) -> None:
        """``policy`` (or its fields as keyword arguments: ``start_time``, ``end_time``,
        ``misfire_grace_time``, ``coalesce``, ``max_catch_up``, ``jitter``, ``ttl``,
        ``overlap``, ``relative_to``, ``lost_after``) is stored in its own hash field;
        see redbeat.policy and docs/outcomes.md. ``labels`` (strings) too: see
        redbeat.labels."""
        policy_fields = {name: clsargs.pop(name) for name in POLICY_FIELDS if name in clsargs}
        named = clsargs.pop("labels", None)  # None: a save keeps the stored labels
        self.labels = None if named is None else label_rules.normalized(named)
        # As in Celery, an entry created without ``last_run_at`` counts as having run
        # now (by its schedule's clock), so it first runs one interval (or the next
        # calendar match) after it was created, not at once.
        super().__init__(
            name=str(name), task=task, schedule=schedule, args=args, kwargs=kwargs,
            options=options, total_run_count=total_run_count, app=app,
            last_run_at=last_run_at, **clsargs,
        )
        check_interval(self.schedule)  # refused here, so a static is skipped, not stored
        if last_run_at is None:
            # Celery set "now" by the schedule's clock. A one-off has no interval to wait
            # for: it runs at its time, or at once if that has passed (as Celery's
            # clocked schedules do), so it stays "never ran".
            created: datetime = self.__dict__["last_run_at"]
            self.__dict__["last_run_at"] = (
                None if isinstance(self.schedule, clocked) else to_millisecond(created))
        self.enabled = enabled
        self.config = ensure_conf(self.app)
        policy = policy or DEFAULT_POLICY
        self.policy = replace(policy, **policy_fields) if policy_fields else policy

    @property
    def config(self) -> RedBeatConfig:
        """The app's settings (kept on the entry by this constructor; an entry built
        without it reads the app's)."""
        return self.__dict__.get("config") or ensure_conf(self.app)

    @config.setter
    def config(self, value: RedBeatConfig) -> None:
        self.__dict__["config"] = value

    # -- identity ------------------------------------------------------------------------

    @staticmethod
    def generate_key(app: Celery, name: str) -> str:
        return ensure_conf(app).keys.entry(name)

    @property
    def key(self) -> str:
        return self.generate_key(app=self.app, name=self.name)

    @property
    def store(self) -> ScheduleStore:
        return store_for(self.app)

    # -- timing --------------------------------------------------------------------------

    def default_now(self) -> datetime:
        """Celery's clock of the entry (see :func:`redbeat.nexttime.clock_now`)."""
        return clock_now(self.schedule, self.app)

    _default_now = default_now  # Celery's alias, which names its own default_now

    def next_run_after(self, moment: datetime) -> datetime | None:
        return next_after(self.schedule, moment)

    def next_due(self) -> datetime | None:
        """The real next run time (in the past when overdue); None when the schedule
        has no more runs. The score is this time (with the policy's delay)."""
        run = self._next_run()
        return None if run is None else run.due

    def upcoming(self, count: int, score: float | None = None) -> list[NextRun]:
        """The next ``count`` slots (fewer when the schedule or the window ends).
        ``score`` is the stored one: an entry that never ran is sent at the slot it
        names (a hand-written interval at its score, not from now), as the tick does."""
        return upcoming_runs(self._next_run(score), self.schedule, self.policy, self.name,
                             count, utc(self._default_now()))

    def _next_run(self, score: float | None = None) -> NextRun | None:
        return next_run(self.schedule, self.policy, self.name, self.last_run_at,
                        utc(self._default_now()), score)

    @property
    def due_at(self) -> datetime | None:
        """When it runs next: now when overdue (as in 2.4.2), None when the schedule has
        no more runs."""
        due = self.next_due()
        return None if due is None else max(due, utc(self._default_now()))

    @property
    def score(self) -> float:
        """The schedule-set score: the due time (a disabled entry's too, as in 2.4.2, so
        enabling it by rewriting its ``definition`` in place makes it run at its next
        slot), or -1 (never selected) when finished."""
        if self._own_due_at():
            return to_score(self.due_at)  # a subclass's own due time, as 2.4.2 scored it
        return score_of(self._next_run())

    def _own_due_at(self) -> bool:
        """Whether this entry's class has its own due time (2.4.2's hook); asked on every
        save, and the class itself has none."""
        return type(self) is not RedBeatSchedulerEntry and \
            compat.own_due_at(type(self), RedBeatSchedulerEntry)

    @property
    def rank(self) -> int | None:
        return self.store.rank(self.key)

    def is_due(self) -> schedstate:
        if not self.enabled:
            return schedstate(False, 5.0)
        due = self.next_due()
        now = utc(self._default_now())
        if due is None:
            return schedstate(False, None)
        if due <= now:
            following = next_after(self.schedule, now)
            wait = None if following is None else (following - now).total_seconds()
            return schedstate(True, wait)
        return schedstate(False, (due - now).total_seconds())

    # -- encoding ------------------------------------------------------------------------

    @property
    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name, "task": self.task, "args": self.args, "kwargs": self.kwargs,
            "options": self.options, "schedule": self.schedule, "enabled": self.enabled,
        }

    def definition_json(self) -> str:
        """The stored text: what celery-redbeat 2.4.2 cannot read goes in a disabled stub
        that carries it (see redbeat.legacy), so a 2.4.2 beat on the same data never fails."""
        return legacy.wrap(decoder.dumps(self.definition))

    # -- celery-redbeat 2.4.2's decoding helpers, for code that calls them --------------

    @staticmethod
    def decode_definition(definition: str) -> dict[str, Any]:
        """A definition's JSON as a dict of decoded values (schedules as objects)."""
        return decoder.loads(definition)

    @staticmethod
    def decode_meta(meta: str | None, app: Celery | None = None) -> dict[str, Any]:
        if not meta:
            return {"last_run_at": None}
        return decoder.loads(meta)

    @staticmethod
    def load_definition(key: str, app: Celery | None = None,
                        definition: str | None = None) -> dict[str, Any]:
        """EntryNotFound (a KeyError) when the key holds no definition."""
        if definition is None:
            definition = store_for(ensure_conf(app).app).load(key)[0]
        if not definition:
            raise EntryNotFound(key)
        return RedBeatSchedulerEntry.decode_definition(definition)

    @staticmethod
    def load_meta(key: str, app: Celery | None = None) -> dict[str, Any]:
        return RedBeatSchedulerEntry.decode_meta(store_for(ensure_conf(app).app).load(key)[1])

    # -- persistence ---------------------------------------------------------------------

    def save(self, changed_by: str = "python-api",
             actor: str | None = None) -> RedBeatSchedulerEntry:
        """Write the entry; ValueError for a name whose key is one of the package's own
        (``:lock``, ``:nodes``, ...), which would break every node.

        Through an app that does not know the zone beat runs in (the standalone CLI's,
        its runtime's ``zone_unknown``), an entry whose runs follow the app's zone (a
        crontab without a zone of its own) is stored due at once: beat's next tick
        works out its next run in the app's zone (an early score is corrected, nothing
        is sent), so it runs as the same entry saved from the app would.

        ``changed_by`` (through what) and ``actor`` (who; default the operating-system
        user) are recorded in the entry's ``changed`` field (redbeat.audit)."""
        self.store.save_many([self.save_request(changed_by, actor)])
        return self

    def save_request(self, changed_by: str = "python-api", actor: str | None = None) -> Save:
        """What :meth:`save` writes, for the store to write many at once (a change by
        label); validated as save validates."""
        if not self.name:
            raise ValueError("entry name is empty")
        if self.config.keys.is_internal(self.key):
            raise ValueError(f"entry name {self.name!r} is reserved: its key {self.key!r} is "
                             "one of redbeat's own keys")
        meta = meta_json(self.last_run_at)
        if runtime_for(self.app).zone_unknown and self.enabled and \
                follows_app_zone(self.schedule):
            score, rescore = to_score(to_millisecond(self._default_now())), None
        else:
            score = self.score
            follows = score >= 0 and not self._own_due_at()
            rescore = self._score_after if follows else None
        return Save(self.key, self.definition_json(), meta, score,
                    changed_json(changed_by, actor), self.policy.to_json(), rescore,
                    label_rules.save_field(self.labels))

    def _score_after(self, stored_meta: str | None) -> float:
        """The score to save with when the stored meta is ``stored_meta`` (None: none).

        A stored entry keeps its meta (run history), so its next run follows from the
        stored ``last_run_at``, not from this object's (now, for an entry built afresh):
        a re-save must not push the next run late, and re-saving faster than the
        interval must not starve the entry. The store asks only when the stored meta is
        another run history and the stored score cannot be kept (save.lua)."""
        try:
            meta = decoder.loads(stored_meta or "{}")
            last_run_at = meta.get("last_run_at") if isinstance(meta, dict) else None
            if isinstance(last_run_at, datetime) and last_run_at != self.last_run_at:
                return self.copy(last_run_at=last_run_at).score
        except DECODE_ERRORS:
            pass  # an unreadable meta: the tick quarantines or rewrites it
        return self.score

    def delete(self) -> None:
        self.store.delete(self.key)

    def reschedule(self, last_run_at: datetime | None = None) -> None:
        """Pretend it last ran at ``last_run_at`` (default now) and store the next run."""
        self.last_run_at = last_run_at or to_millisecond(self._default_now())
        self.store.write_meta(self.key, meta_json(self.last_run_at, self.total_run_count),
                              self.score)

    def _next_instance(
        self, last_run_at: datetime | None = None, only_update_last_run_at: bool = False
    ) -> RedBeatSchedulerEntry:
        entry = self.copy(
            last_run_at=last_run_at or self._default_now(),
            total_run_count=self.total_run_count + (0 if only_update_last_run_at else 1),
        )
        self.store.write_meta(entry.key, meta_json(entry.last_run_at, entry.total_run_count),
                              entry.score)
        return entry

    __next__ = next = _next_instance

    def copy(self, **changes: Any) -> RedBeatSchedulerEntry:
        """A shallow copy with some attributes replaced (no re-validation, no I/O)."""
        clone = self.__class__.__new__(self.__class__)
        clone.__dict__.update(self.__dict__, **changes)
        return clone

    def __reduce__(self) -> Any:
        return self.__class__, (
            self.name, self.task, self.schedule, self.args, self.kwargs, self.enabled,
            self.options, self.last_run_at, self.total_run_count,
        )

    @classmethod
    def from_key(cls, key: str, app: Celery | None = None) -> RedBeatSchedulerEntry:
        """Load an entry; EntryNotFound (a KeyError) when the key holds no entry,
        InvalidEntry when it holds one that cannot be scheduled."""
        config = ensure_conf(app)
        definition, meta, policy, labels_text = store_for(config.app).load_fields(key)
        if not definition:
            raise EntryNotFound(key)
        entry = cls.decode(config.app, key, definition, meta, policy=policy)
        entry.labels = label_rules.from_field(labels_text)
        return entry

    @classmethod
    def decode(
        cls, app: Celery, key: str, definition: str | None, meta: str | None,
        cached: bool = False, policy: str | None = None,
    ) -> RedBeatSchedulerEntry:
        return decode_entry(cls, app, key, definition, meta, cached, policy)

    def __repr__(self) -> str:
        return f"<RedBeatSchedulerEntry: {self.name} {self.task} {self.schedule!r}>"


def definition_cache(app: Celery) -> DefinitionCache:
    """The app's parsed definitions (its runtime's)."""
    return runtime_for(app).definitions


def decode_entry(
    cls: type[RedBeatSchedulerEntry], app: Celery, key: str, definition_text: str | None,
    meta_text: str | None, cached: bool = False, policy_text: str | None = None,
) -> RedBeatSchedulerEntry:
    config = ensure_conf(app)
    try:
        policy = EntryPolicy.from_json(policy_text)
    except DECODE_ERRORS as exc:  # nested past the limit too; an unknown zone a KeyError
        reason = exc if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise InvalidEntry(key, f"policy: {reason}") from exc
    own_keys = compat.own_keys(cls, RedBeatSchedulerEntry)
    if cached and not own_keys:
        definition = definition_cache(app).parse(key, definition_text)
    else:
        definition = parse_definition(key, definition_text,
                                      None if own_keys else config.key_prefix)
        definition.schedule.app = app
        if own_keys and cls.generate_key(app, definition.name) != key:
            raise InvalidEntry(key, f"definition name {definition.name!r} belongs to key "
                                    f"{cls.generate_key(app, definition.name)!r}")
    last_run_at, count = parse_meta(key, meta_text)
    if compat.own_constructor(cls, RedBeatSchedulerEntry):
        # A subclass with its own constructor gets it called, as 2.4.2's from_key did,
        # with the definition's other top-level keys (a ``tenant`` it stores) too, and
        # only the keywords it takes: one that names exactly 2.4.2's (no **kwargs) is
        # not offered ``policy``, which is set afterwards.
        known = dict(
            name=definition.name, task=definition.task, schedule=definition.schedule,
            args=definition.args, kwargs=definition.kwargs, enabled=definition.enabled,
            options=definition.options, last_run_at=last_run_at, total_run_count=count,
            app=app, policy=policy,
        )
        extra = extra_fields(key, definition_text)
        try:
            entry = cls(**compat.accepted(cls.__init__, {**known, **extra}))
        except TypeError:
            if not extra:
                raise
            entry = cls(**compat.accepted(cls.__init__, known))  # refuses the extra ones
        entry.__dict__.update(last_run_at=last_run_at, policy=policy)  # None: never ran
        return entry
    # Built without __init__: the fields are validated already, and this runs for every
    # due entry of every tick.
    entry = cls.__new__(cls)
    entry.__dict__.update(
        app=app, config=config, name=definition.name, task=definition.task,
        schedule=definition.schedule, args=definition.args, kwargs=definition.kwargs,
        options=definition.options, enabled=definition.enabled, last_run_at=last_run_at,
        total_run_count=count, policy=policy,
    )
    return entry


#: The names this module had before the fields' text moved to redbeat.entry_fields, kept
#: importable from here for code that imports them from the entry's module.
__all__ = [
    "DECODE_ERRORS", "UTC_META", "UTC_ZONE", "Definition",
    "DefinitionCache", "EntryNotFound", "InvalidEntry", "RedBeatSchedulerEntry", "as_utc_zone",
    "changed_json", "decode_entry", "definition_cache", "meta_json",
    "node_name", "parse_definition", "parse_meta", "to_millisecond", "to_score",
    "utc_meta_text",
]

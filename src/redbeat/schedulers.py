"""``RedBeatScheduler``: Celery beat's scheduler, with the schedule in Redis.

One tick is at most three round trips, whatever the number of due entries:

1. tick.lua: take or extend the lock and read one bounded batch of due entries, the
   pending (claimed but unconfirmed) slots, and the next due score;
2. commit.lua: write every decision of the batch (new meta and score, pending slots,
   quarantines), only if this node still holds the lock;
3. confirm: forget the pending slots the broker accepted.

Only the lock holder writes statics or dispatches. A standby polls the lock every
``redbeat_poll_interval`` (1 s), so it takes over about a second after the lock is
released or expires. A lost lock or an unreachable Redis never ends the process (unless
``redbeat_exit_on_lock_loss``): the node logs it and stands by.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from queue import SimpleQueue
from typing import Any, NamedTuple

import redis.exceptions
from celery import Celery, signals
from celery.beat import Scheduler
from celery.schedules import crontab
from celery.utils.time import humanize_seconds
from kombu.common import ignore_errors
from kombu.exceptions import OperationalError
from kombu.utils.objects import cached_property

from . import decoder, metrics, publish
from .connection import CLIENT_ATTRIBUTE, get_redis
from .entry import (
    InvalidEntry,
    RedBeatSchedulerEntry,
    changed_json,
    meta_json,
    node_name,
    store_for,
)
from .keys import PARKED_SCORE, QUARANTINE
from .lock import NO_EXPIRY, Holder, Lease, expiry_words
from .nextrun import next_run, score_of
from .redaction import redact
from .planning import (
    Claim,
    PendingMessage,
    Plan,
    TickSettings,
    held_grace,
    plan_batch,
    printable,
    quarantine_reason,
    read_pending,
)
from .preflight import check_app
from .retry import RetryingConnection, is_auth_error
from .settings import (
    AT_LEAST_ONCE,
    DEFAULT_POLL_INTERVAL,
    RedBeatConfig,
    SettingError,
    conf_lookup,
    ensure_conf,
)
from .store import Fetch, LockLost, Op, Row, StaticWrite, unsupported_lua, with_flag_reply

logger = logging.getLogger("celery.beat")

SENT, BROKER_DOWN = object(), object()

#: ``redbeat_publish_timeout``'s default: the socket timeouts of beat's own connection
#: to a Redis broker, so a publish to a broker that hangs instead of refusing ends.
DEFAULT_PUBLISH_TIMEOUT = 3.0
#: A Redis broker is pinged before a send when it has not answered for this long: a
#: ping that hangs writes nothing, while a message written to a frozen broker is
#: ambiguous (it lands when the broker wakes, after the send was given up for failed).
PROBE_AFTER = 0.25
#: Seconds ``close()`` waits for Redis to release the lock; then the lock is left to
#: expire, so SIGTERM ends beat well inside a supervisor's grace period.
CLOSE_TIMEOUT = 2.0


Slot = tuple[RedBeatSchedulerEntry, str]  # an entry and the task id of its slot
#: Messages of claimed slots made while the commit ran, by task id: drafted, or sealed
Drafts = dict[str, publish.Draft | publish.Outgoing]


class Batch(NamedTuple):
    """Slots with their messages built (publish.py), and those left to Celery's path."""

    ready: list[tuple[RedBeatSchedulerEntry, publish.Outgoing]]
    alone: list[Slot]


class SendJob:
    """Slots handed to the scheduler's publishing thread in one go. Their outcome (the
    task ids done with: sent, or dropped as unpublishable) belongs to the tick that waits
    for it, unless that tick gave up first: then the thread itself records the sends that
    went out late (the lock makes that one decision, not two)."""

    def __init__(self, slots: list[Slot], announce: Callable[[list[Slot]], None] | None = None,
                 batch: Batch | None = None) -> None:
        self.slots = slots
        self.announce = announce  # logs the slots once the broker is known to be up
        self.batch = batch  # their messages, when built before the hand-off
        self.outcome: list[str] = []
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.finished = False
        self.given_up = False

    def give_up(self) -> bool:
        """Leave the outcome to the thread; False when it has already finished."""
        with self.lock:
            self.given_up = not self.finished
            return self.given_up

    def finish(self, outcome: list[str]) -> bool:
        """Record the outcome; True when the tick had given up on it."""
        with self.lock:
            self.outcome, self.finished = outcome, True
            return self.given_up

#: Hooks of celery-redbeat 2.4.2 that the batched tick does not call; a subclass (or
#: instance) overriding one of them, or an entry class overriding one of ENTRY_HOOKS,
#: gets the per-entry path. (``apply_async``, ``send_task`` and ``setup_schedule`` are
#: called on both paths.)
SCHEDULER_HOOKS = ("maybe_due", "is_due", "reserve")
#: How one slot is published: overriding one of these (on the class or the instance)
#: sends each slot through it, one by one, instead of the batched publish.
PUBLISH_HOOKS = ("apply_async", "send_task", "send_slot")
#: Slots written per batch (one Redis pipeline, one set of AMQP confirms), and so per
#: hand-off to the publishing thread, which a tick waits for at most half a poll interval:
#: as many as a tick reads by default (``redbeat_batch_size``), so a burst is one hand-off.
PUBLISH_BATCH = 1000
#: ... or fewer, once their payloads reach this many bytes (large arguments).
PUBLISH_BYTES = 2_000_000
ENTRY_HOOKS = ("__init__", "is_due", "due_at", "reschedule", "generate_key", "_next_instance",
               "next", "__next__")
#: Entries listed by the ``schedule`` property at most.
PAGE = 1000

EVICTING_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random")
#: Parked members checked for an expired hash per sweep, and seconds between sweeps.
SWEEP_PAGE, SWEEP_EVERY = 500, 60.0


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for one tick. A busy tick holds
    thousands of containers at once (rows, entries, claims, messages, records) until it
    returns, and their very number makes the collector scan them again and again while
    the tick runs (and now and then the whole heap: tens of milliseconds); when the tick
    returns, reference counting frees them, and the collector resumes as before. Left
    alone when the application turned it off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def celery_default_entries(app: Celery, configured: dict[str, Any]) -> dict[str, Any]:
    """The entries Celery's beat adds by itself: ``celery.backend_cleanup`` when
    results expire on a backend that cannot expire them (Celery's own rule)."""
    if (app.conf.result_expires and not app.backend.supports_autoexpire
            and "celery.backend_cleanup" not in configured):
        return {"celery.backend_cleanup": {
            "task": "celery.backend_cleanup", "schedule": crontab("0", "4", "*"),
            "options": {"expires": 12 * 3600}}}
    return {}


class RedBeatScheduler(Scheduler):
    Entry = RedBeatSchedulerEntry

    #: Celery's default is 300 s; this scheduler wakes every poll interval anyway (to
    #: renew the lease and see entries saved by anyone), so that is its loop interval.
    max_interval = DEFAULT_POLL_INTERVAL

    def __init__(
        self,
        app: Celery,
        lock_key: str | None = None,
        lock_timeout: float | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        # Arguments override the settings in this scheduler's own checked copy of the
        # config (the app's is shared). An argument, or an assignment below, names the
        # lock key as is, as in 2.4.2; only the setting gets the prefix prepended.
        overrides: dict[str, Any] = {"lock_key": lock_key} if lock_key else {}
        if lock_timeout is not None:
            overrides["lock_timeout"] = lock_timeout
        try:
            self.config: RedBeatConfig = dataclasses.replace(ensure_conf(app), **overrides)
            check_app(app)  # a fault of the app's own, not to be blamed on each entry
        except SettingError as exc:  # one line naming each bad setting, not a traceback
            raise SystemExit(f"beat: {exc}") from None
        self.clock = clock
        #: Elapsed time for the lease and the broker (both injectable: tests drive them)
        self.monotonic = monotonic
        self.node_id = node_name()
        self.lock: Lease | None = None
        self.leading = False
        self._standby_holder: str | None = None
        self._redis_down = False
        self._sweep_at = 0.0
        self._sweep_offset = 0
        self.metrics = metrics.recorder_for(app, self.config)
        super().__init__(app, **kwargs)
        self._new_lease()

    # -- the lease (assignable, as in celery-redbeat 2.4.2) ------------------------------

    def _new_lease(self) -> None:
        """Rebuild ``lock`` after the key or timeout changed, keeping this node's token
        (a scheduler holding the lease must still recognise its own)."""
        token = self.lock.token if self.lock is not None else None
        if not self.config.lock_key:
            self.lock = None
            return
        timeout = self.config.lease_timeout()
        self.lock = Lease(self.store, self.config.lock_key, timeout, token,
                          sleep=self.poll_interval)
        self.node_id = self.lock.token

    @property
    def lock_key(self) -> str | None:
        return self.config.lock_key

    @lock_key.setter
    def lock_key(self, value: str | None) -> None:
        self.config = dataclasses.replace(self.config, lock_key=value or None)
        self._new_lease()

    @property
    def lock_timeout(self) -> float:
        """The lease timeout in force (seconds)."""
        return self.config.lease_timeout()

    @lock_timeout.setter
    def lock_timeout(self, value: float | None) -> None:
        """None: the setting's timeout again."""
        timeout = ensure_conf(self.app).lock_timeout if value is None else value
        self.config = dataclasses.replace(self.config, lock_timeout=timeout)
        self._new_lease()

    def _lease(self) -> Lease | None:
        """The lease a tick runs under; None when locking is disabled."""
        if self.config.lock_key and self.lock is None:
            # A lock key with no lease (2.4.2 code sets ``lock = None`` when it could not
            # take the lock): leading unfenced could double-send, so refuse.
            raise AttributeError(f"scheduler.lock is None while lock_key {self.config.lock_key!r} "
                                 "is set; assign a lock key again to rebuild the lease")
        if self.lock is not None and not isinstance(self.lock, Lease):
            # a redis-py Lock put here by code written for 2.4.2 (its beat_init handler
            # copied): carry on under its key and token
            self.lock = Lease.adopt(self.store, self.lock, self.lock_timeout)
        return self.lock

    @property
    def store(self) -> Any:
        return store_for(self.app)

    # -- start-up ------------------------------------------------------------------------

    def setup_schedule(self) -> None:
        """Load the scripts and check the server. Statics wait until this node leads,
        unless locking is disabled (then this is the only node: write them now)."""
        try:
            self._check_server()
        except redis.exceptions.RedisError as exc:
            if not is_auth_error(exc):  # a refused password is logged as such, by the outage
                logger.error("beat: Redis at %s unreachable at start (%s); will keep trying",
                             redact(self.config.redis_url), redact(str(exc)))
            self.store.retry.outage.failed(exc, quiet=not is_auth_error(exc))
            self._redis_down = True  # checked, and "Redis is back" logged, when it answers
            return
        if not self.config.lock_key:
            self.sync_statics(datetime.fromtimestamp(self.clock(), tz=timezone.utc))

    def _check_server(self) -> None:
        """Load the scripts and check the eviction policy: at start, or when Redis first
        answers if it was down then."""
        server_config = self.store.preload()
        self._check_eviction(server_config.get("maxmemory-policy", ""))

    def _check_eviction(self, policy: str) -> None:
        if policy not in EVICTING_POLICIES:
            return
        message = (f"Redis maxmemory-policy is {policy}: under memory pressure Redis will "
                   "silently delete schedule entries; use noeviction or a volatile-* policy")
        if self.config.refuse_evicting_redis:
            raise SystemExit(f"beat: {message} (refused by redbeat_refuse_evicting_redis)")
        logger.warning("beat: %s", message)

    def static_entries(self) -> dict[str, RedBeatSchedulerEntry]:
        """``beat_schedule`` plus Celery's default entries, as entries; a malformed one is
        logged and skipped so it cannot stop beat."""
        configured = {**celery_default_entries(self.app, self.config.schedule),
                      **self.config.schedule}
        entries = {}
        for name, spec in configured.items():
            try:
                entries[name] = self._maybe_entry(name, spec)
            except Exception as exc:
                logger.error("beat: Skipping static entry %r: %r (%r)", name, exc, spec)
        return entries

    def install_default_entries(self, data: Any) -> None:
        """Celery's defaults join the statics the leader syncs (``static_entries``)
        instead of being written by every node at start."""

    def update_from_dict(self, dict_: dict[str, Any]) -> None:
        """Write these entries now, keeping the run history of those already stored
        (celery-redbeat 2.4.2's method, for code that calls it)."""
        for name, spec in dict_.items():
            try:
                entry = self._maybe_entry(name, spec)
            except Exception as exc:
                logger.error("beat: Skipping entry %r: %r (%r)", name, exc, spec)
                continue
            try:
                stored = self.Entry.from_key(self.Entry.generate_key(self.app, name),
                                             app=self.app)
            except (KeyError, InvalidEntry):
                pass
            else:
                entry.last_run_at = stored.last_run_at
            entry.save()

    def sync_statics(self, now: datetime) -> None:
        """Write the static entries (keeping their run history) and delete the statics
        no longer configured: two round trips for any number of statics."""
        if type(self).update_from_dict is not RedBeatScheduler.update_from_dict:
            self._sync_statics_through_update_from_dict()
            return
        statics = self.static_entries()
        entries = list(statics.values())
        recorded, stored = self.store.read_statics([entry.key for entry in entries])
        writes = []
        for entry, (meta_text, score) in zip(entries, stored, strict=True):
            try:
                upcoming = self._static_score(entry, meta_text, score, now)
            except (ValueError, OverflowError) as exc:  # a schedule past its bounds
                logger.error("beat: Skipping static entry %r: %s", entry.name, exc)
                continue
            writes.append(StaticWrite(  # the meta only lands on a static seen the first time
                entry.key, entry.name, entry.definition_json(), meta_json(now, 0),
                upcoming if entry.enabled else PARKED_SCORE, changed_json("static-sync"),
                entry.policy.to_json(),
            ))
        removed = [(self.Entry.generate_key(self.app, name), name)  # the entry class's keys
                   for name in recorded - set(statics)]
        self.store.write_statics(writes, removed, self._lease())
        for _, name in removed:
            logger.info("beat: Removed static entry %r (no longer in beat_schedule)", name)
        logger.info("beat: Synced %d static entries", len(writes))

    def _sync_statics_through_update_from_dict(self) -> None:
        """2.4.2's way, for a subclass that overrides ``update_from_dict`` to shape the
        statics: the configured entries go through it, one save each."""
        configured = {**celery_default_entries(self.app, self.config.schedule),
                      **self.config.schedule}
        for name in self.store.static_names() - set(configured):
            self.store.delete(self.Entry.generate_key(self.app, name))
            self.store.forget_static(name)
            logger.info("beat: Removed static entry %r (no longer in beat_schedule)", name)
        self.update_from_dict(configured)
        self.store.record_statics(configured)
        logger.info("beat: Synced %d static entries through update_from_dict", len(configured))

    @staticmethod
    def _static_score(
        entry: RedBeatSchedulerEntry, meta_text: str | None, score: float | None, now: datetime
    ) -> float:
        """The score a static is written with: by the one rule (redbeat.nextrun), from
        its stored run history; a static seen the first time counts as having run now
        (its meta is written so), so it first runs one interval from now, as in Celery."""
        try:
            meta = decoder.loads(meta_text) if meta_text else {}
            last_run_at = meta.get("last_run_at") if isinstance(meta, dict) else None
        except ValueError:
            last_run_at = None
        if not isinstance(last_run_at, datetime):
            last_run_at = None if score is not None and score > 0 else now
        return score_of(next_run(entry.schedule, entry.policy, entry.name, last_run_at, now,
                                 score))

    # -- the loop ------------------------------------------------------------------------

    @property
    def poll_interval(self) -> float:
        return min(self.config.poll_interval, float(self.max_interval))

    @metrics.measured_tick
    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass; returns the seconds to sleep before the next."""
        # a leader's tick renews the lease first thing: what the publishing thread
        # measures its lease from (close() stops that thread; a tick starts it again)
        self._renewed_at = self.monotonic()
        self._closed = False
        if self.config.notices:
            self.config.log_notices()  # once, now that Celery's logging is in place
        try:
            with collection_paused():
                interval = self._tick()
        except LockLost as exc:
            return self._lost_lock(exc.holder)
        except redis.exceptions.RedisError as exc:
            return self._redis_unavailable(exc)
        if self._redis_down:  # "Redis is back after ..." is logged by the retry policy
            self._redis_down = False
            self._check_server()
        return interval

    def _tick(self) -> float:
        now_ts = self.clock()
        now = datetime.fromtimestamp(now_ts, tz=timezone.utc)
        lease = self._lease()
        fetch = self.store.fetch(now_ts, lease, self.config.batch_size, self.node_id)
        if fetch.status == "standby":
            return self._standby(fetch)
        if fetch.status == "acquired" or not self.leading:
            self._become_leader(now)
            if fetch.status == "acquired":
                return 0.0
        confirmed, misfires = self._publish_pending(fetch, now)
        if self.per_entry:
            self.store.confirm(confirmed, misfires)
            return self._tick_per_entry(fetch, lease, now)
        policy = TickSettings(
            node=self.node_id,
            deterministic_task_ids=self.config.deterministic_task_ids,
            at_least_once=self.config.delivery == AT_LEAST_ONCE,
            record_history=self.config.history_records > 0,
            misfire_grace_time=self.config.misfire_grace_time,
        )
        plan = plan_batch(self.app, fetch.rows, now, policy, self.Entry)
        self.metrics.dispatched("skipped", plan.skipped)
        claims = plan.claims
        skipped: set[str] = set()
        drafts: Drafts = {}
        if plan.ops:
            skipped, drafts = self._commit(plan, lease, policy.node, now_ts)
            if skipped:
                # edited between the read and the commit: nothing was recorded, so
                # nothing is sent; the next tick (at once, below) reads the new version
                claims = [claim for claim in claims if claim.entry.key not in skipped]
        sent, lost = self._publish(claims, lease, drafts)
        if policy.at_least_once:
            confirmed.extend(sent)
        # held records done with are confirmed in either mode (at-most-once holds none of
        # its own claims, but a run-now record would otherwise be re-sent every tick)
        self.store.confirm(confirmed, misfires)
        if lost:
            raise LockLost(None)
        if now_ts >= self._sweep_at:
            self._sweep_parked(now_ts)
        if skipped:
            # still due: sleeping until the plan's next score would let the next slot come
            # due too, and the two would be coalesced into one run (a slot lost to an edit)
            return 0.0
        return self._sleep_after(fetch, plan, now_ts)

    # -- the per-entry path, for subclasses written against celery-redbeat 2.4.2 ----------

    @property
    def per_entry(self) -> bool:
        """Whether this scheduler (its class or the instance) or its entry class
        overrides a hook the batched tick does not call; then every due entry goes
        through those hooks one by one, as in celery-redbeat 2.4.2."""
        own = type(self)
        if any(getattr(own, hook) is not getattr(RedBeatScheduler, hook) or hook in vars(self)
               for hook in SCHEDULER_HOOKS):
            return True
        return any(getattr(self.Entry, hook) is not getattr(RedBeatSchedulerEntry, hook)
                   for hook in ENTRY_HOOKS)

    def _tick_per_entry(self, fetch: Fetch, lease: Lease | None, now: datetime) -> float:
        """Each due entry is built through the entry class (its constructor included)
        and handed to ``maybe_due``; a sent entry is rescheduled by ``reserve``. The
        overrides decide, so this path is neither batched nor fenced, and task ids are
        Celery's own: the price of the hooks, paid only by subclasses that have them."""
        waits = [self.poll_interval]
        for row in fetch.rows:
            if row.definition is None:
                continue  # no entry hash (gone since it was scheduled): nothing to ask
            try:
                # from what the fetch read (no round trip per entry); decode builds a
                # subclass through its own constructor, as from_key does
                entry = self.Entry.decode(self.app, row.key, row.definition, row.meta,
                                          policy=row.policy)
            except InvalidEntry as exc:
                self._quarantine(row, exc.reason, lease, now)
                continue
            try:
                wait = self.maybe_due(entry, **self._maybe_due_kwargs)
            except Exception:
                # a hook's own bug must not stop beat or the entries after this one
                logger.exception("beat: Checking %s failed; skipped this tick", entry.name)
                continue
            if wait:
                waits.append(wait)
        return 0.0 if len(fetch.rows) >= self.config.batch_size else max(min(waits), 0.0)

    def _quarantine(self, row: Row, reason: str, lease: Lease | None, now: datetime) -> None:
        logger.error("beat: Quarantined %s: %s", printable(row.key), printable(reason))
        record = quarantine_reason(reason, now, self.node_id)
        self.store.commit([Op("quarantine", row.key, row.fingerprint, PARKED_SCORE,
                              ((QUARANTINE, record),))], lease, self.node_id, now.timestamp())

    def maybe_due(self, entry: RedBeatSchedulerEntry, **kwargs: Any) -> float | None:
        """Send ``entry`` if its ``is_due`` says so; returns the seconds until it is due
        next (celery-redbeat 2.4.2's hook, called only on the per-entry path)."""
        is_due, next_time_to_run = self.is_due(entry)
        if is_due:
            logger.info("Scheduler: Sending due task %s (%s)", entry.name, entry.task)
            try:
                self.apply_async(entry, **kwargs)
            except Exception as exc:
                logger.exception("Scheduler: Message Error: %s", exc)
        return next_time_to_run

    def reserve(self, entry: RedBeatSchedulerEntry) -> RedBeatSchedulerEntry:
        """Record a run of ``entry`` in Redis before it is sent; returns the next one."""
        return next(entry)

    @cached_property
    def _maybe_due_kwargs(self) -> dict[str, Any]:
        return {"producer": self.producer}

    def _sleep_after(self, fetch: Fetch, plan: Plan, now_ts: float) -> float:
        if len(fetch.rows) >= self.config.batch_size:
            return 0.0  # a backlog: the next batch at once (each batch extends the lock)
        interval = self.poll_interval
        for score in (fetch.next_score, plan.earliest_score()):
            if score is not None:
                interval = min(interval, score - now_ts)
        return max(interval, 0.0)

    def _sweep_parked(self, now_ts: float) -> None:
        """One page of parked members on taking the lead and then once a minute:
        finished entries whose time-to-live ran out leave a member no tick reads, which
        would otherwise accumulate forever."""
        self._sweep_offset, dropped = self.store.sweep_parked(self._sweep_offset, SWEEP_PAGE)
        self._sweep_at = now_ts + SWEEP_EVERY
        # a node killed without closing leaves its heartbeat behind; forget it once it is
        # older than any live node's can be
        self.store.forget_nodes_older_than(now_ts - max(SWEEP_EVERY, 10 * self.lock_timeout))
        if dropped:
            logger.info("beat: Dropped %d expired finished entries from the schedule", dropped)

    def _become_leader(self, now: datetime) -> None:
        logger.info("beat: Leading as %s", Holder.parse(self.node_id))
        self.leading = True
        self._standby_holder = None
        self.sync_statics(now)
        self._sweep_parked(now.timestamp())

    def _standby(self, fetch: Fetch) -> float:
        holder = fetch.holder or ""
        if self.leading:
            self._lost_lock(holder)
        elif holder != self._standby_holder and fetch.holder_ttl_ms == NO_EXPIRY:
            logger.error("beat: Standing by; %s holds the %s %s", Holder.parse(holder),
                         self.lock_key,
                         expiry_words(NO_EXPIRY))
        elif holder != self._standby_holder:
            logger.info("beat: Standing by; %s leads (lock expires in %s)",
                        Holder.parse(holder), humanize_seconds((fetch.holder_ttl_ms or 0) / 1000))
        self._standby_holder = holder
        return self.poll_interval

    def _lost_lock(self, holder: str | None) -> float:
        was_leading, self.leading = self.leading, False
        who = Holder.parse(holder) if holder else "nobody (it expired)"
        logger.warning("beat: Lost the lock (now held by %s); standing by", who)
        if was_leading and self.config.exit_on_lock_loss:
            raise SystemExit("beat: lock lost and redbeat_exit_on_lock_loss is set")
        return self.poll_interval

    def _redis_unavailable(self, exc: Exception) -> float:
        if not self._redis_down and not is_auth_error(exc):
            misplaced = self.store.misplaced_types(exc)
            unsupported = unsupported_lua(exc)
            if misplaced:
                logger.error("beat: %s; nothing is sent until it is deleted (another client "
                             "wrote it)", misplaced)
            elif unsupported:
                logger.error("beat: %s; nothing is sent", unsupported)
            else:
                logger.error("beat: Redis unavailable (%s); standing by until it returns",
                             redact(str(exc)))
        # counted in the outage, which logs it again at growing intervals (and a refused
        # password as the configuration error it is), never once per tick
        self.store.retry.outage.failed(exc, quiet=not is_auth_error(exc))
        self._redis_down = True
        # Whoever holds the lock when Redis returns is re-checked by the next tick.
        self.leading = False
        return self.poll_interval

    # -- publishing ----------------------------------------------------------------------
    #
    # Sends run on one thread of their own (outside the per-entry path), and a tick waits
    # for each at most half a poll interval. A broker that hangs instead of refusing then
    # costs the tick that long once: until that send ends, every other send fails at once,
    # so the slots stay pending, ticks keep their pace (renewing the lease, and claiming
    # each slot on time rather than coalescing slots a stalled tick let pass) and the
    # pending slots go out, oldest first, once the broker answers. A send that ends after
    # its tick gave up on it is remembered and confirmed, so it is not sent twice.

    _renewed_at = 0.0  # monotonic time of the lease's last renewal seen by this node
    _closed = False
    _jobs: SimpleQueue[SendJob | None] | None = None
    _publisher: threading.Thread | None = None
    _stuck: SendJob | None = None  # a send the tick stopped waiting for, still running
    _broker_answered_at = -math.inf
    _broker_down = False

    @cached_property
    def publish_timeout(self) -> float:
        """``redbeat_publish_timeout`` (seconds): the socket timeouts of beat's own
        connection to a Redis broker, so a send to a hung broker fails instead of
        waiting forever (it then stays pending and is sent again)."""
        value = conf_lookup(self.app.conf, "redbeat_publish_timeout", None)
        if value is None:
            return DEFAULT_PUBLISH_TIMEOUT
        try:
            timeout = float(value)
        except (TypeError, ValueError):
            timeout = math.nan
        if not timeout > 0:  # read on the tick's path: a bad value must not stop beat
            logger.warning("beat: redbeat_publish_timeout=%r is not a positive number; "
                           "using %ss", value, DEFAULT_PUBLISH_TIMEOUT)
            return DEFAULT_PUBLISH_TIMEOUT
        return timeout

    @cached_property
    def connection(self) -> Any:
        """Beat's broker connection. On a Redis broker its sockets time out after
        :attr:`publish_timeout` (or sooner, as ``broker_transport_options`` say): without
        a timeout, a broker that is frozen, or gone without closing the TCP connection,
        holds a publish forever. Other transports keep their own settings."""
        connection = self.app.connection_for_write()
        if connection.transport.driver_type == "redis":
            options = dict(connection.transport_options or {})
            for name in ("socket_timeout", "socket_connect_timeout"):
                given = options.get(name)
                options[name] = (self.publish_timeout if given is None
                                 else min(float(given), self.publish_timeout))
            connection.transport_options = options
        return connection

    @cached_property
    def producer(self) -> Any:
        """A producer on :attr:`connection`, connected with one retry within
        :attr:`publish_timeout` rather than Celery's ``broker_connection_max_retries``
        (a hundred, minutes apart): a broker that is down fails this send, and the next
        tick tries again."""
        connection = self.connection.ensure_connection(
            max_retries=1, interval_start=0, interval_step=0.5, interval_max=0.5,
            timeout=self.publish_timeout)
        return self.Producer(connection, auto_declare=False)

    def send_slot(self, entry: RedBeatSchedulerEntry, task_id: str) -> Any:
        """Publish one slot through Celery's ``apply_async`` with its slot task id."""
        message = entry.copy(options={**entry.options, "task_id": task_id})
        logger.info("Scheduler: Sending due task %s (%s) id=%s", entry.name, entry.task, task_id)
        return self.apply_async(message, producer=self.producer, advance=False)

    def _commit(self, plan: Plan, lease: Lease | None, node: str,
                now_ts: float) -> tuple[set[str], Drafts]:
        """commit.lua (the keys it skipped), and meanwhile the claims' messages drafted
        (``publish.Builder.draft``: no signal, no side effect). Redis runs the script on
        its own core for about as long as drafting takes here, so the commit waits on its
        socket on a thread of its own while this one drafts; nothing is announced or sent
        before the commit has recorded the claims."""
        if not plan.claims or self._broker_down or not self._batched:
            return self.store.commit(plan.ops, lease, node, now_ts), {}
        outcome: list[Any] = []

        def commit() -> None:
            try:
                outcome.append(self.store.commit(plan.ops, lease, node, now_ts))
            except BaseException as exc:  # raised on the tick's thread below
                outcome.append(exc)

        thread = threading.Thread(target=commit, name="redbeat-commit", daemon=True)
        thread.start()
        try:
            drafts = self._draft(plan.claims)
        finally:
            thread.join()
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0], drafts

    def _draft(self, claims: list[Claim]) -> Drafts:
        """The claims' drafts by task id; one that cannot be drafted is left out (built
        again after the commit, where Celery's own path takes it). When no receiver
        listens to ``before_task_publish``, nothing can tell a message sealed now from
        one sealed after the commit: then the messages are sealed here too, and their
        records encoded for a Redis broker, while the commit is still running."""
        builder = publish.Builder(self.app, self._reprs)
        early = not signals.before_task_publish.receivers
        drafts: Drafts = {}
        for claim in claims:
            try:
                draft = builder.draft(claim.entry, claim.task_id)
                drafts[claim.task_id] = builder.seal(draft) if early else draft
            except Exception:  # noqa: S112 - decided (and logged) on the publish path
                continue
        if early and publish.batch_transport(self.connection) == "redis":
            try:
                publish.encode_redis(self.producer.channel, [
                    m for m in drafts.values() if isinstance(m, publish.Outgoing)])
            except Exception:  # noqa: S110 - met again by the write, which handles it
                pass
        return drafts

    def _publish(self, claims: list[Claim], lease: Lease | None,
                 drafts: Drafts | None = None) -> tuple[list[str], bool]:
        """Publish the claimed slots (``drafts``: their messages drafted already, by
        task id); returns the ids sent and whether the lock was lost on the way (the
        sent ones are still confirmed, so they are not sent twice)."""
        if claims:
            self._renewed_at = self.monotonic()  # the commit that claimed them renewed it
        done, _, lost = self._send_all([(claim.entry, claim.task_id) for claim in claims],
                                       lease, drafts=drafts)
        self._count_sends([(claim.task_id, claim.due) for claim in claims], done)
        return done, lost

    def _count_sends(self, slots: list[tuple[str, datetime]], done: list[str]) -> None:
        """Metrics: the lag of each slot handed to the broker; the others stay held."""
        handed = set(done)
        for task_id, due in slots:
            if task_id in handed:
                self.metrics.late_by(due)
        self.metrics.dispatched("held", len(slots) - len(handed))

    def _send_all(self, slots: list[Slot], lease: Lease | None,
                  announce: Callable[[list[Slot]], None] | None = None,
                  drafts: Drafts | None = None,
                  ) -> tuple[list[str], bool, bool]:
        """Publish ``slots`` in order: PUBLISH_BATCH at a time on the batched path, one at
        a time otherwise. Returns the ids done with, whether the broker failed (the rest
        stay pending) and whether the lock was lost on the way."""
        done: list[str] = []
        batched = self._batched
        extended_at = self.monotonic()
        remaining = slots
        while remaining:
            if lease is not None and self.monotonic() - extended_at > lease.timeout / 3:
                # A slow broker must not let the lock lapse under a healthy leader. If it
                # lapsed anyway, stop: the new leader re-sends what is still pending.
                if not lease.renew():
                    return done, False, True
                extended_at = self._renewed_at = self.monotonic()
            if self._waiting_on_broker():
                return done, True, False  # do not queue behind a send still under way
            remaining = self._drop_sent_late(remaining, done)
            if not remaining:
                break
            if batched and not self._broker_down:
                unit, batch = self._build(remaining, drafts)
            else:  # one by one, or a broker that was down tried with one slot first
                unit, batch = remaining[:1], None
            remaining = remaining[len(unit):]
            sent = self._try_send(unit, announce, batch)
            done.extend(sent)
            if len(sent) < len(unit):
                return done, True, False
        return done, False, False

    def _publish_pending(
        self, fetch: Fetch, now: datetime
    ) -> tuple[list[str], list[tuple[str, int, str]]]:
        """Publish this batch of held slots, oldest due first: the hash returns them in
        no order, and a backlog released after a broker outage must reach the workers in
        the order it was due. A slot past its misfire grace is dropped instead (one log
        line; counted in its entry's misfires by confirm.lua), also while the broker is
        down, so an outage does not pile up slots that will never be sent.

        Returns the task ids done with (sent or dropped) and the misfires to count:
        (entry key, how many, the last one's due time as ISO 8601)."""
        done: list[str] = []
        held: list[tuple[str, PendingMessage]] = []
        for task_id, message in fetch.pending.items():
            try:
                held.append((task_id, read_pending(self.app, message, self.Entry, fetch.held)))
            except Exception as exc:
                # whatever a record holds (a due of 1e300, nesting past the recursion
                # limit, a bad definition, a held definition removed by hand), it must
                # not stop the node: drop it, log it
                logger.error("beat: Dropping unreadable pending slot %s: %s", printable(task_id),
                             printable(repr(exc)[:300]))
                done.append(task_id)
        held.sort(key=lambda item: (item[1].due, item[0]))
        late: dict[str, tuple[int, datetime]] = {}
        resend: list[Slot] = []
        reasons: dict[str, str] = {}
        for task_id, slot in held:
            key = slot.entry.key
            grace = held_grace(slot, fetch.policies.get(key), self.config.misfire_grace_time,
                               now)
            if grace is not None:
                logger.warning("beat: Dropping held slot %s: %.3f s late, past its misfire "
                               "grace time of %g s", printable(task_id),
                               (now - slot.due).total_seconds(), grace)
                done.append(task_id)
                self.metrics.dispatched("skipped")
                if self.config.keys.is_entry_key(key):
                    late[key] = (late.get(key, (0, slot.due))[0] + 1, slot.due)
                continue
            resend.append((slot.entry, task_id))
            reasons[task_id] = slot.reason

        def announce(unit: list[Slot]) -> None:
            for _, task_id in unit:
                if reasons[task_id] == "run-now":
                    logger.info("beat: Sending %s now, as asked (%s)", task_id, reasons[task_id])
                else:
                    logger.warning("beat: Re-sending slot %s (claimed, publish not confirmed)",
                                   task_id)

        sent = self._send_all(resend, None, announce)[0]
        self._count_sends([(task_id, held_slot.due) for task_id, held_slot in held
                           if task_id in reasons], sent)
        done.extend(sent)
        return done, [(key, count, last.isoformat()) for key, (count, last) in late.items()]

    @cached_property
    def _broker_errors(self) -> tuple[type[BaseException], ...]:
        return (OperationalError, OSError, *self.connection.connection_errors)

    @property
    def _batched(self) -> bool:
        """Whether slots go out through the batched publish (publish.py): not when a
        subclass or the instance overrides how one slot is sent, nor on a transport or
        with settings that module does not reproduce."""
        if self.per_entry or any(getattr(type(self), hook) is not getattr(RedBeatScheduler, hook)
                                 or hook in vars(self) for hook in PUBLISH_HOOKS):
            return False
        return (publish.batch_transport(self.connection) is not None
                and publish.app_supports_batch(self.app))

    def _try_send(self, unit: list[Slot], announce: Callable[[list[Slot]], None] | None = None,
                  batch: Batch | None = None) -> list[str]:
        """Publish ``unit`` on the publishing thread, waiting for it at most half a poll
        interval; returns the task ids done with. A broker that failed or has not
        answered by then leaves the rest pending: nothing is lost, and the tick keeps
        its pace."""
        if self.per_entry:
            if announce:
                announce(unit)
            return self._send_slots(unit)  # inline: the hooks own the producer there
        job = SendJob(unit, announce, batch)
        self._send_queue().put(job)
        if job.done.wait(min(self.poll_interval / 2, self.publish_timeout)) or not job.give_up():
            job.done.wait()  # finished: at most the instant until its event is set
            return job.outcome
        self._stuck = job
        if not self._broker_down:  # once an outage: its first stuck send
            logger.warning("beat: The broker has not answered for %.1fs; slots stay pending "
                           "until it does", min(self.poll_interval / 2, self.publish_timeout))
        return []

    def _waiting_on_broker(self) -> bool:
        """Whether a send the tick gave up on is still under way."""
        stuck = self._stuck
        if stuck is not None and not stuck.done.is_set():
            return True
        self._stuck = None
        return False

    def _drop_sent_late(self, slots: list[Slot], done: list[str]) -> list[Slot]:
        """``slots`` without those whose send was given up on and went out after all
        (confirmed since); their ids join ``done``. Checked before anything is built,
        so their messages are not built (nor announced to signal receivers) again."""
        if not self._sent_late:
            return slots
        late = [task_id for _, task_id in slots if task_id in self._sent_late]
        self._sent_late.difference_update(late)
        done.extend(late)
        return [slot for slot in slots if slot[1] not in late] if late else slots

    @cached_property
    def _reprs(self) -> publish.Reprs:
        """argsrepr/kwargsrepr kept from tick to tick (a third of a message's build)."""
        return publish.Reprs()

    @cached_property
    def _sent_late(self) -> set[str]:
        """Ids whose send ended (and was confirmed) after its tick gave up on it: a tick
        that read them as pending before that confirmation must not send them again."""
        return set()

    def _send_queue(self) -> SimpleQueue[SendJob | None]:
        """The publishing thread's queue, starting the thread when it is not running."""
        if self._jobs is None or self._publisher is None or not self._publisher.is_alive():
            self._jobs = SimpleQueue()
            self._publisher = threading.Thread(target=self._publishing, args=(self._jobs,),
                                               name="redbeat-publish", daemon=True)
            self._publisher.start()
        return self._jobs

    def _publishing(self, jobs: SimpleQueue[SendJob | None]) -> None:
        """The publishing thread: one job at a time, until close() queues None."""
        while (job := jobs.get()) is not None:
            outcome: list[str] = []
            try:
                outcome = self._send_checked(job)
            except BaseException:  # the thread must outlive any one send
                logger.exception("beat: Publishing %s failed", [tid for _, tid in job.slots])
            try:
                if (job.finish(outcome) and outcome
                        and self.config.delivery == AT_LEAST_ONCE):
                    self._sent_late.update(outcome)  # for a tick that read them as pending
                    self.store.confirm(outcome)  # and for whoever leads next
            except Exception:
                logger.exception("beat: Confirming %s failed", outcome)
            finally:
                job.done.set()

    def _send_checked(self, job: SendJob) -> list[str]:
        """Send ``job`` unless this node may no longer send: it stopped leading, or its
        lease may run out during the send (a tick stalled on Redis renews nothing); a
        Redis broker that has been quiet is pinged first, so a hung one is found by a
        ping that writes nothing rather than by a message it would deliver later."""
        if not self._may_send():
            return []
        if self.monotonic() - self._broker_answered_at > PROBE_AFTER:
            try:
                self._ping_broker()
            except Exception as exc:
                if not isinstance(exc, self._broker_errors):
                    raise
                if not self._broker_down:
                    logger.error("beat: Broker unavailable (%s); %s", exc,
                                 "slots stay pending and are sent when it answers"
                                 if self.config.delivery == AT_LEAST_ONCE
                                 else "at-most-once: runs due meanwhile are lost")
                self._broker_down = True
                self._drop_producer()
                return []
            if not self._may_send():
                return []
        if job.announce is not None:
            job.announce(job.slots)
        done = self._send_slots(job.slots, job.batch)
        if len(done) < len(job.slots):
            self._drop_producer()
        else:
            self._broker_answered_at = self.monotonic()
            if self._broker_down:
                logger.info("beat: Broker is back")
                self._broker_down = False
        return done

    def _may_send(self) -> bool:
        if self._closed or not self.leading:
            return False
        if self.lock is None:
            return True
        margin = min(self.publish_timeout, self.lock.timeout / 2)
        return self.monotonic() - self._renewed_at < self.lock.timeout - margin

    def _ping_broker(self) -> None:
        """PING a Redis broker (through the pool the sends use); other transports have
        no such probe and rely on their own timeouts."""
        channel = self.producer.channel
        if channel is None:
            raise OperationalError("no channel to the broker")
        acquire = getattr(channel, "conn_or_acquire", None)
        if acquire is not None:
            with acquire() as client:
                client.ping()
        self._broker_answered_at = self.monotonic()

    def _drop_producer(self) -> None:
        """Forget the broker connection after a failure: a failed publish can leave
        Celery's producer without a channel, and the next send connects afresh."""
        self.__dict__.pop("producer", None)
        connection = self.__dict__.pop("connection", None)
        if connection is not None:
            ignore_errors(connection, connection.release)

    def _send_slots(self, slots: list[Slot], batch: Batch | None = None) -> list[str]:
        """Publish ``slots``: built into ``batch`` already, or one by one through
        Celery's ``apply_async``; the ids done with."""
        if batch is not None:
            return self._send_batch(batch)
        done = []
        for entry, task_id in slots:
            if self._send(entry, task_id) is BROKER_DOWN:
                break
            done.append(task_id)
        return done

    def _build(self, slots: list[Slot],
               drafts: Drafts | None = None) -> tuple[list[Slot], Batch]:
        """The first slots' messages, built with Celery's message API
        (publish.py), up to PUBLISH_BATCH of them or PUBLISH_BYTES of payload; a slot that
        module cannot build exactly is left to Celery's own ``apply_async``. Built on the
        tick's thread, so the tick's wait on the publishing thread is for the broker;
        from its draft when there is one (taken from ``drafts``)."""
        batch, size = Batch([], []), 0
        builder = publish.Builder(self.app, self._reprs)
        drafts = drafts if drafts is not None else {}
        for entry, task_id in slots[:PUBLISH_BATCH]:
            try:
                draft = drafts.pop(task_id, None) or builder.draft(entry, task_id)
                message = draft if isinstance(draft, publish.Outgoing) else builder.seal(draft)
            except Exception:  # Celery's own path decides, and logs a refusal its way
                batch.alone.append((entry, task_id))
                continue
            batch.ready.append((entry, message))
            size += len(message.payload)
            if size >= PUBLISH_BYTES:
                break
        return slots[:len(batch.ready) + len(batch.alone)], batch

    def _send_batch(self, batch: Batch) -> list[str]:
        """Write the built messages in one go, then send the others through Celery's
        ``send_slot``."""
        ready = batch.ready
        for entry, message in ready:
            logger.info("Scheduler: Sending due task %s (%s) id=%s", entry.name, entry.task,
                        message.task_id)
        done: list[str] = []
        if ready:
            try:
                refusals = self._write([message for _, message in ready])
            except Exception as exc:
                if not isinstance(exc, self._broker_errors):
                    raise
                self._broker_failed(f"{len(ready)} slots", exc)
                return []
            accepted = []
            for (entry, message), refusal in zip(ready, refusals, strict=True):
                if refusal is None:
                    accepted.append(message)
                else:
                    self._refused(entry, message.task_id, refusal)
                done.append(message.task_id)
            self.metrics.dispatched("sent", len(accepted))
            publish.published(accepted)
        return done + self._send_slots(batch.alone)

    def _write(self, messages: list[publish.Outgoing]) -> list[BaseException | None]:
        connection = self.producer.connection
        if publish.batch_transport(connection) == "redis":
            return publish.write_redis(self.producer.channel, messages)
        return publish.write_amqp(connection, messages, self.publish_timeout)

    def _send(self, entry: RedBeatSchedulerEntry, task_id: str) -> object:
        """Publish one slot. A broker that cannot be reached stops this round (the slot
        stays pending and is retried); a message the broker or Celery refuses for what
        it is (bad options, unserialisable arguments) would fail forever and block the
        slots behind it, so it is logged and dropped."""
        try:
            self.send_slot(entry, task_id)
            self.metrics.dispatched("sent")
        except Exception as exc:
            cause = exc.__context__ or exc  # Celery wraps the error in SchedulingError
            if isinstance(cause, self._broker_errors):
                self._broker_failed(task_id, cause)
                return BROKER_DOWN
            self._refused(entry, task_id, cause)
        return SENT

    def _broker_failed(self, what: str, cause: BaseException) -> None:
        lost = self.config.delivery != AT_LEAST_ONCE
        logger.error("beat: Publishing %s failed, broker unavailable (%s); %s", what, cause,
                     "at-most-once: this run is lost" if lost
                     else "it stays pending and is retried")

    def _refused(self, entry: RedBeatSchedulerEntry, task_id: str, cause: BaseException) -> None:
        logger.error("beat: Slot %s of %s cannot be published (%r); dropped",
                     task_id, entry.name, cause)
        # recorded on the entry, so list/show/status do not count it as a run
        self.store.record_failure(entry.key, task_id, repr(cause), self.node_id)
        self.metrics.dispatched("failed")

    # -- shutdown and introspection ------------------------------------------------------

    def close(self) -> None:
        """Stop publishing, release the lock and drop the heartbeat, in a bounded time
        whatever Redis and the broker do.

        Celery calls this twice on SIGTERM (from its signal handler, then as beat's loop
        unwinds), possibly while the loop waits on a frozen Redis or broker. Redis gets
        one attempt, on a thread waited for at most CLOSE_TIMEOUT seconds, and is left
        to expire the lock otherwise; a send stuck on a hung broker is abandoned with
        its connection (its slot is still pending) rather than waited for."""
        if not self._closed:
            self._closed = True
            if self._jobs is not None:
                self._jobs.put(None)  # the publishing thread ends after its current send
                self._jobs = None  # and a scheduler used again starts another
            self._farewell(self.lock if self.leading else None)
        self.leading = False
        if self._stuck is not None and not self._stuck.done.is_set():
            self.__dict__.pop("producer", None)
            self.__dict__.pop("connection", None)
        super().close()

    def _farewell(self, lock: Lease | None) -> None:
        outcome: list[bool | BaseException] = []

        def attempt() -> None:
            try:
                outcome.append(self.store.farewell(lock, self.node_id))
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=attempt, name="redbeat-close", daemon=True)
        thread.start()
        thread.join(CLOSE_TIMEOUT)
        if lock is None:
            return  # the heartbeat goes stale by itself if Redis did not answer
        expires = humanize_seconds(lock.timeout, prefix="within ")
        if not outcome:
            logger.warning("beat: Redis did not answer within %ss; the lock is not "
                           "released and expires %s", CLOSE_TIMEOUT, expires)
        elif isinstance(outcome[0], BaseException):
            logger.warning("beat: Could not release the lock (%s); it expires %s",
                           outcome[0], expires)
        elif outcome[0]:
            logger.info("beat: Released the lock")

    @property
    def schedule(self) -> dict[str, RedBeatSchedulerEntry]:
        """The entries due now and the one due next, by name, as 2.4.2 lists them (read
        only; the tick is what runs them)."""
        entries = {}
        for key in self.store.due_keys(self.clock(), PAGE):
            try:
                entry = self.Entry.from_key(key, app=self.app)
            except (KeyError, InvalidEntry):
                continue
            entries[entry.name] = entry
        return entries

    @schedule.setter
    def schedule(self, value: Any) -> None:
        pass  # Celery's base class assigns its in-memory schedule here; ours is Redis

    @property
    def info(self) -> str:
        lines = [f"       . redis -> {redact(self.config.redis_url)}"]
        if self.lock_key:
            lines.append(f"       . lock -> `{self.lock_key}` "
                         f"{humanize_seconds(self.lock_timeout)} ({self.lock_timeout}s)")
        return "\n".join(lines)


# -- names celery-redbeat 2.4.2 exposed here ---------------------------------------------

#: The script that pushes the lock's expiry back to a full timeout (this package's
#: extend.lua, replying 1 or 0 as the one 2.4.2 exposed under this name did).
LUA_EXTEND_TO_SCRIPT = with_flag_reply("extend")
#: Attributes of the app that hold the client (and, in 2.4.2, the Sentinel object).
REDBEAT_REDIS_KEY = CLIENT_ATTRIBUTE
REDBEAT_SENTINEL_KEY = "redbeat_sentinel"
ADD_ENTRY_ERROR = "\nCouldn't add entry %r to redis schedule: %r. Contents: %r\n"


def acquire_distributed_beat_lock(sender: Any = None, **kwargs: Any) -> None:
    """Take the leader lock for ``sender.scheduler``, waiting until it is free.

    celery-redbeat 2.4.2 connected this to ``beat_init``; here it is not connected,
    because the tick takes the lock itself and a standby keeps polling (and logging)
    instead of blocking at start-up. Code that calls it still gets the lock.
    """
    scheduler = sender.scheduler
    if not scheduler.lock_key:
        return
    scheduler.lock.acquire()
    logger.info("beat: Acquired lock")


__all__ = ["ADD_ENTRY_ERROR", "LUA_EXTEND_TO_SCRIPT", "REDBEAT_REDIS_KEY",
           "REDBEAT_SENTINEL_KEY", "RedBeatConfig", "RedBeatScheduler", "RedBeatSchedulerEntry",
           "RetryingConnection", "acquire_distributed_beat_lock", "ensure_conf", "get_redis",
           "logger"]

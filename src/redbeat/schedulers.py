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
import json
import logging
import ssl
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import MINYEAR, datetime, timezone
from typing import Any

import redis.exceptions
from celery import Celery
from celery.app import app_or_default
from celery.beat import DEFAULT_MAX_INTERVAL, ScheduleEntry, Scheduler
from celery.signals import beat_init
from celery.utils.log import get_logger
from celery.utils.time import humanize_seconds
from kombu.utils.objects import cached_property
from kombu.utils.url import maybe_sanitize_url
from redis import Redis
from redis.sentinel import MasterNotFoundError, Sentinel
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from . import compat, metrics, statics
from .connection import INTERNAL_OPTIONS
from .decoder import RedBeatJSONDecoder, RedBeatJSONEncoder, to_timestamp
from .dispatch import (
    BATCHED,
    INLINE,
    ONE_BY_ONE,
    Dispatcher,
    Drafts,
    Misfire,
    OnDispatcher,
    say_sending,
)
from .entry import (
    InvalidEntry,
    RedBeatSchedulerEntry,
    node_name,
)
from .fleet_clock import FleetClock
from .keys import PARKED_SCORE, QUARANTINE
from .lock import NO_EXPIRY, Holder, Lease, expiry_words, farewell
from .memory_policy import EVICTING_POLICIES
from .planning import (
    Plan,
    TickSettings,
    plan_batch,
    printable,
    quarantine_reason,
)
from .preflight import check_app, check_redis_url
from .redaction import redact
from .retry import RetryingConnection, is_auth_error
from .runtime import CLIENT_ATTRIBUTE, get_redis, store_for
from .settings import (
    AT_LEAST_ONCE,
    DEFAULT_POLL_INTERVAL,
    RedBeatConfig,
    SettingError,
    ensure_conf,
)
from .store import Fetch, LockLost, NotReplicated, Op, Row, unsupported_lua, with_flag_reply

logger = logging.getLogger("celery.beat")


#: Entries listed by the ``schedule`` property at most.
PAGE = 1000

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


class RedBeatScheduler(Scheduler):
    Entry = RedBeatSchedulerEntry
    #: 2.4.2's class attribute; every instance has its lease here (None: no locking).
    lock: Lease | None = None

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
        *,
        fleet_clock: bool | None = None,
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
            check_redis_url(app)  # one line, not a traceback per retry in beat's log
        except SettingError as exc:  # one line naming each bad setting, not a traceback
            raise SystemExit(f"beat: {exc}") from None
        self.clock = clock
        #: This host's clock corrected to Redis's (fleet_clock.py); by default only when
        #: the clock is the host's own, so a test that drives ``clock`` keeps its time
        self.fleet_clock = FleetClock(clock is time.time if fleet_clock is None
                                      else fleet_clock)
        #: Elapsed time for the lease and the broker (both injectable: tests drive them)
        self.monotonic = monotonic
        self.node_id = node_name()
        self.lock = None
        self.leading = False
        self._standby_holder: str | None = None
        self._redis_down = False
        self._sweep_at = 0.0
        self._sweep_offset = 0
        self._statics: statics.Prepared | None = None  # made once, written on each sync
        #: Redis's refusal of this node's last writes (OOM), the evicting policy found at
        #: start, and the evicted-keys count of the last leading tick
        self._refused: str | None = None
        #: the last tick's writes were not acknowledged by the replicas (replication.py)
        self._unreplicated = False
        self._evicting_policy: str | None = None
        self._evicted_keys: int | None = None
        self.metrics = metrics.recorder_for(app, self.config)
        self.dispatcher = Dispatcher(
            app, self.config, self.metrics, store=lambda: self.store,
            node_id=lambda: self.node_id, send_one=lambda entry, task_id: self.send_slot(
                entry, task_id), producer=lambda connection: self.Producer(
                connection, auto_declare=False), may_send=self._may_send,
            monotonic=monotonic)
        super().__init__(app, **kwargs)
        self._new_lease()

    # -- the lease (assignable, as in celery-redbeat 2.4.2) ------------------------------

    def _new_lease(self) -> None:
        """Rebuild ``lock`` after the key or timeout changed, keeping this node's token
        (a scheduler holding the lease must still recognise its own)."""
        token = self.lock.token if self.lock is not None else None
        self.lock = None
        if self.config.lock_key:
            self.lock = Lease(self.store, self.config.lock_key, self.config.lease_timeout(),
                              token, sleep=self.poll_interval)
            self.node_id = self.lock.token
        self.dispatcher.bound_sends(self.lock.timeout if self.lock is not None else None)

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
            self.dispatcher.bound_sends(self.lock.timeout)
        if self.lock is not None:
            self.lock.store = self.store  # the client in force (the app may replace it)
        return self.lock

    @property
    def store(self) -> Any:
        return store_for(self.app)

    # -- start-up ------------------------------------------------------------------------

    def setup_schedule(self) -> None:
        """Load the scripts, check the server and write the statics, as 2.4.2 did at
        start-up (a subclass whose ``tick`` never reaches this package's still has its
        ``beat_schedule`` in Redis); the node that takes the lead writes them again."""
        try:
            self._check_server()
        except redis.exceptions.RedisError as exc:
            if not is_auth_error(exc):  # a refused password is logged as such, by the outage
                logger.error("beat: Redis at %s unreachable at start (%s); will keep trying",
                             redact(self.config.redis_url), redact(str(exc)))
            self.store.retry.outage.failed(exc, quiet=not is_auth_error(exc))
            self._redis_down = True  # checked, and "Redis is back" logged, when it answers
            return
        try:
            self.sync_statics(datetime.fromtimestamp(self.now_ts(), tz=timezone.utc),
                              starting=True)
        except redis.exceptions.RedisError as exc:  # said once, as a tick would say it
            self._redis_unavailable(exc)

    def _check_server(self) -> None:
        """Load the scripts and check the eviction policy: at start, or when Redis first
        answers if it was down then."""
        server_config = self.store.preload()
        self._check_eviction(server_config.get("maxmemory-policy", ""))

    def _check_eviction(self, policy: str) -> None:
        self._evicting_policy = policy if policy in EVICTING_POLICIES else None
        if not self._evicting_policy:
            return
        message = (f"Redis maxmemory-policy is {policy}: under memory pressure Redis will "
                   "silently delete schedule entries; use noeviction or a volatile-* policy")
        if self.config.refuse_evicting_redis:
            raise SystemExit(f"beat: {message} (refused by redbeat_refuse_evicting_redis)")
        logger.warning("beat: %s", message)

    def static_entries(self) -> dict[str, RedBeatSchedulerEntry]:
        """``beat_schedule`` plus Celery's default entries, as entries; a malformed one is
        logged and skipped so it cannot stop beat."""
        return statics.built(statics.configured(self.app, self.config), self._maybe_entry,
                             "static entry")

    def install_default_entries(self, data: Any) -> None:
        """Celery's defaults join the statics the leader syncs (``static_entries``)
        instead of being written by every node at start."""

    def update_from_dict(self, dict_: dict[str, Any]) -> None:
        """Write these entries now, keeping the run history of those already stored
        (celery-redbeat 2.4.2's method, for code that calls it)."""
        for name, entry in statics.built(dict_, self._maybe_entry, "entry").items():
            try:
                stored = self.Entry.from_key(self.Entry.generate_key(self.app, name),
                                             app=self.app)
            except (KeyError, InvalidEntry):
                pass
            else:
                entry.last_run_at = stored.last_run_at
            entry.save()

    def sync_statics(self, now: datetime, starting: bool = False) -> None:
        """Write the static entries (keeping their run history) and delete the statics
        no longer configured: one round trip when Redis holds them as configured (see
        statics.py). Fenced by the lease, except at start-up (``starting``), where every
        node writes its own, as in 2.4.2."""

        def key_of(name: str) -> str:  # the entry class's key
            return self.Entry.generate_key(self.app, name)

        specs = statics.configured(self.app, self.config)
        if compat.shapes_statics(self, RedBeatScheduler):
            statics.sync_through(self.store, specs, key_of, self.update_from_dict)
            return
        self._statics = statics.prepared(self._statics, specs, self.static_entries)
        statics.sync(self.store, self._statics, key_of, None if starting else self._lease(),
                     now, fresh=starting)

    # -- the loop ------------------------------------------------------------------------

    @property
    def poll_interval(self) -> float:
        return min(self.config.poll_interval, float(self.max_interval))

    @metrics.measured_tick
    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass; returns the seconds to sleep before the next."""
        # a leader's tick renews the lease first thing: what the publishing thread
        # measures its lease from (close() stops that thread; a tick starts it again)
        self.dispatcher.open()
        if self.config.notices:
            self.config.log_notices()  # once, now that Celery's logging is in place
        try:
            with collection_paused():
                interval = self._tick()
        except LockLost as exc:
            return self._lost_lock(exc.holder)
        except NotReplicated as exc:  # a failover under way: said once, not an outage
            if not self._unreplicated:
                logger.warning("beat: %s", exc)
            self._unreplicated = True
            return self.poll_interval
        except redis.exceptions.RedisError as exc:
            return self._redis_unavailable(exc)
        if self._unreplicated:
            logger.info("beat: The replicas acknowledge writes again")
            self._unreplicated = False
        if self._redis_down:  # "Redis is back after ..." is logged by the retry policy
            self._redis_down = False
            self._check_server()
        return interval

    def now_ts(self) -> float:
        """The fleet's time: this host's clock corrected to Redis's."""
        return self.fleet_clock.now(self.clock())

    def _fetch(self, lease: Lease | None) -> tuple[Fetch | None, float]:
        """The tick's read at the fleet's time, and that time; the read's round trip
        measures this host's clock against Redis's. None for a read made before the
        first measurement found a skew (possible only with locking disabled: taking the
        lock reads nothing), to be made again at once."""
        began = self.monotonic()
        if lease is not None:  # what the publishing thread measures the lease from
            lease.renewed(began)
        sent = self.clock()
        now_ts = self.fleet_clock.now(sent)
        fetch = self.store.fetch(now_ts, lease, self.config.batch_size, self.node_id,
                                 read_clock=self.fleet_clock.wanted(sent, began),
                                 read_evictions=self._evicting_policy is not None)
        first = not self.fleet_clock.measured
        self._watch_writes(fetch)
        skew = self.fleet_clock.observe(sent, self.clock(), fetch.server_time, began)
        if skew:
            logger.warning("beat: %s", skew)
            if first and fetch.status == "leader":
                return None, now_ts
        return fetch, now_ts

    def _watch_writes(self, fetch: Fetch) -> None:
        """Say once when Redis starts refusing this node's writes (out of memory under
        noeviction: no heartbeat, no free lock taken; the node stands by and takes the
        lead as soon as it can) and once when it accepts them again; say each time a
        leader's tick finds keys evicted under an allkeys-* policy."""
        if fetch.refused and self._refused is None:
            logger.error("beat: Redis refuses this node's writes (%s): no heartbeat is "
                         "written and a free lock cannot be taken until it accepts them; "
                         "standing by", fetch.refused)
        elif self._refused and not fetch.refused:
            logger.info("beat: Redis accepts writes again")
        self._refused = fetch.refused
        if fetch.evicted_keys is None:
            return  # not read: the count of the last leading tick stays the baseline
        evicted, self._evicted_keys = self._evicted_keys, fetch.evicted_keys
        if self._evicting_policy and evicted is not None and fetch.evicted_keys > evicted:
            logger.error("beat: Redis evicted %d keys since the last tick "
                         "(maxmemory-policy %s): entries of the schedule, or the schedule "
                         "itself, may have been deleted; use noeviction",
                         fetch.evicted_keys - evicted, self._evicting_policy)

    def _tick(self) -> float:
        lease = self._lease()
        fetch, now_ts = self._fetch(lease)
        if fetch is None:
            return 0.0
        now = datetime.fromtimestamp(now_ts, tz=timezone.utc)
        if fetch.status == "standby":
            return self._standby(fetch)
        if fetch.status == "acquired" or not self.leading:
            self._become_leader(now)
            if fetch.status == "acquired":
                return 0.0
        path = self._path  # once a tick: compat walks the classes for every hook
        confirmed, misfires = self.dispatcher.resend_held(fetch, now, self.Entry, path,
                                                          self.poll_interval / 2)
        if path == INLINE:  # the per-entry path
            self.store.confirm(confirmed, misfires)
            return self._tick_per_entry(fetch, lease, now)
        return self._tick_batched(fetch, lease, now_ts, path, confirmed, misfires)

    def _tick_batched(self, fetch: Fetch, lease: Lease | None, now_ts: float, path: str,
                      confirmed: list[str], misfires: list[Misfire]) -> float:
        """A leader's pass over what ``fetch`` read: plan, commit, send, then confirm
        those sent with the held slots done with (``confirmed``, ``misfires``)."""
        now = datetime.fromtimestamp(now_ts, tz=timezone.utc)
        policy = TickSettings(
            node=self.node_id,
            deterministic_task_ids=self.config.deterministic_task_ids,
            at_least_once=self.config.delivery == AT_LEAST_ONCE,
            record_history=self.config.history_records > 0,
            misfire_grace_time=self.config.misfire_grace_time,
            lost_after=self.config.lost_after,
        )
        plan = plan_batch(self.app, fetch.rows, now, policy, self.Entry)
        self.metrics.dispatched("skipped", plan.skipped)
        claims = plan.claims
        skipped: set[str] = set()
        drafts: Drafts = {}
        committed_at = self.monotonic()  # the lease counts from the asking, not the reply
        if plan.ops:  # the claims' messages are drafted, then commit.lua records them
            skipped, drafts = self.dispatcher.draft_then_commit(
                lambda: self.store.commit(plan.ops, lease, policy.node, now_ts), claims, path)
            if skipped:
                # edited between the read and the commit: nothing was recorded, so
                # nothing is sent; the next tick (at once, below) reads the new version
                claims = [claim for claim in claims if claim.entry.key not in skipped]
            # runs given up on: their outcome (the commit wrote their run field)
            self.store.append_outcomes(plan.lost, self.config.history_stream_length, skipped)
        if claims and lease is not None:
            lease.renewed(committed_at)  # the commit that claimed them renewed it
        sent = self.dispatcher.send_claims(claims, lease, path, self.poll_interval / 2, drafts)
        if policy.at_least_once:
            confirmed.extend(sent.done)
        # held records done with are confirmed in either mode (at-most-once holds none of
        # its own claims, but a run-now record would otherwise be re-sent every tick)
        self.store.confirm(confirmed, misfires)
        if sent.lease_lost:  # the sent ones are confirmed above: not sent twice
            raise LockLost(None)
        if now_ts >= self._sweep_at:
            self._sweep_parked(now_ts)
        if skipped:
            # still due: sleeping until the plan's next score would let the next slot come
            # due too, and the two would be coalesced into one run (a slot lost to an edit)
            return 0.0
        if self.dispatcher.backlog.again:  # more held slots than a batch: the next at once
            return 0.0
        return self._sleep_after(fetch, plan, now_ts)

    # -- the per-entry path, for subclasses written against celery-redbeat 2.4.2 ----------

    @property
    def per_entry(self) -> bool:
        """Whether this scheduler (its class or the instance) or its entry class
        overrides a hook the batched tick does not call; then every due entry goes
        through those hooks one by one, as in celery-redbeat 2.4.2."""
        return compat.per_entry(self, RedBeatScheduler)

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
        # a node killed without closing leaves its heartbeat behind: forgotten once it is
        # older than any live node's can be
        self._sweep_offset, dropped = self.store.sweep_parked(
            self._sweep_offset, SWEEP_PAGE, now_ts - max(SWEEP_EVERY, 10 * self.lock_timeout))
        self._sweep_at = now_ts + SWEEP_EVERY
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
        elif not holder:
            pass  # free, and Redis refused this node's SET: said by _watch_writes
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

    # -- publishing: the dispatcher (dispatch.py) sends; the scheduler says what and how

    #: Celery's attributes, kept by the dispatcher (assignable, as Celery's are)
    connection = OnDispatcher()
    producer = OnDispatcher()

    def send_slot(self, entry: RedBeatSchedulerEntry, task_id: str) -> Any:
        """Publish one slot through Celery's ``apply_async`` with its slot task id."""
        message = entry.copy(options={**entry.options, "task_id": task_id})
        say_sending(entry, task_id)
        return self.apply_async(message, producer=self.producer, advance=False)

    def _may_send(self, within: float) -> bool:
        """The dispatcher's question, asked from its thread: whether this node leads and
        its lease (if any) outlasts a send of ``within`` seconds."""
        lock = self.lock
        return self.leading and (lock is None or lock.may_send(self.monotonic(), within))

    @property
    def _path(self) -> str:
        """How slots leave (dispatch.py): one by one on the tick's thread on the
        per-entry path; one by one through ``send_slot`` when a subclass or the instance
        overrides how one slot is sent; else batched where the transport allows."""
        if self.per_entry:
            return INLINE
        if compat.sends_one_by_one(self, RedBeatScheduler):
            return ONE_BY_ONE
        return BATCHED

    # -- shutdown and introspection ------------------------------------------------------

    def close(self) -> None:
        """Stop publishing, release the lock and drop the heartbeat, in a bounded time
        whatever Redis and the broker do.

        Celery calls this twice on SIGTERM (from its signal handler, then as beat's loop
        unwinds), possibly while the loop waits on a frozen Redis or broker. Redis gets
        one attempt, on a thread waited for at most ``lock.CLOSE_TIMEOUT`` seconds, and is left
        to expire the lock otherwise; a send stuck on a hung broker is abandoned with
        its connection (its slot is still pending) rather than waited for."""
        if not self.dispatcher.closed:
            self.dispatcher.close()  # the publishing thread ends after its current send
            farewell(self.store, self.lock if self.leading else None, self.node_id)
        self.leading = False
        self.dispatcher.release()
        super().close()

    @property
    def schedule(self) -> dict[str, RedBeatSchedulerEntry]:
        """The entries due now and the one due next, by name, as 2.4.2 lists them (read
        only; the tick is what runs them)."""
        entries = {}
        for key in self.store.due_keys(self.now_ts(), PAGE):
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
#: Options consumed by redbeat itself, never handed to the Redis client.
REDBEAT_INTERNAL_OPTIONS = INTERNAL_OPTIONS


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


#: Also importable from here as from 2.4.2's module, which imported them (public code
#: imports ``RedBeatJSONEncoder``, ``get_logger``, ``DEFAULT_MAX_INTERVAL`` from here).
__all__ = ["ADD_ENTRY_ERROR", "DEFAULT_MAX_INTERVAL", "LUA_EXTEND_TO_SCRIPT", "MINYEAR",
           "REDBEAT_INTERNAL_OPTIONS", "REDBEAT_REDIS_KEY", "REDBEAT_SENTINEL_KEY",
           "MasterNotFoundError", "RedBeatConfig", "RedBeatJSONDecoder", "RedBeatJSONEncoder",
           "RedBeatScheduler", "RedBeatSchedulerEntry", "Redis", "RetryingConnection",
           "ScheduleEntry", "Sentinel", "acquire_distributed_beat_lock", "app_or_default",
           "beat_init", "ensure_conf", "get_logger", "get_redis", "json", "logger",
           "maybe_sanitize_url", "retry", "retry_if_exception_type", "ssl", "stop_after_delay",
           "to_timestamp", "wait_exponential", "warnings"]

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

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import redis.exceptions
from celery import Celery
from celery.beat import Scheduler
from celery.utils.time import humanize_seconds
from kombu.exceptions import OperationalError
from kombu.utils.objects import cached_property

from . import decoder
from .connection import get_redis, redact
from .entry import (
    RedBeatSchedulerEntry,
    changed_json,
    from_score,
    meta_json,
    node_name,
    store_for,
    to_score,
)
from .lock import Holder, new_token
from .nexttime import first_due, next_after
from .planning import Claim, Plan, Policy, plan_batch, read_pending
from .settings import AT_LEAST_ONCE, RedBeatConfig, ensure_conf
from .store import Fetch, LockLost, StaticWrite

logger = logging.getLogger("celery.beat")

SENT, BROKER_DOWN = object(), object()

EVICTING_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random")
#: Parked members checked for an expired hash per sweep, and seconds between sweeps.
SWEEP_PAGE, SWEEP_EVERY = 500, 60.0


class RedBeatScheduler(Scheduler):
    Entry = RedBeatSchedulerEntry

    def __init__(
        self,
        app: Celery,
        lock_key: str | None = None,
        lock_timeout: float | None = None,
        clock: Callable[[], float] = time.time,
        **kwargs: Any,
    ) -> None:
        self.config: RedBeatConfig = ensure_conf(app)
        if lock_key:
            self.config.lock_key = self.config.keys.__class__(self.config.key_prefix, lock_key).lock
        if lock_timeout:
            self.config.lock_timeout = float(lock_timeout)
        self.clock = clock
        self.token = new_token() if self.config.lock_key else ""
        self.node_id = self.token or node_name()
        self.leading = False
        self._standby_holder: str | None = None
        self._redis_down = False
        self._sweep_at = 0.0
        self._sweep_offset = 0
        super().__init__(app, **kwargs)
        self.config.max_loop_interval = float(self.max_interval)

    # -- compatibility with celery-redbeat 2.4.2 attribute names -------------------------

    @property
    def lock_key(self) -> str | None:
        return self.config.lock_key

    @property
    def lock_timeout(self) -> float:
        return self.config.lock_timeout

    @property
    def lock(self) -> str | None:
        """This node's lock token while it leads, else None."""
        return self.token if self.leading else None

    @property
    def store(self) -> Any:
        return store_for(self.app)

    @property
    def _lock_ms(self) -> int:
        return int(self.config.lock_timeout * 1000)

    # -- start-up ------------------------------------------------------------------------

    def setup_schedule(self) -> None:
        """Load the scripts and check the server; statics wait until this node leads."""
        try:
            server_config = self.store.preload()
        except redis.exceptions.RedisError as exc:
            logger.error("beat: Redis at %s unreachable at start (%s); will keep trying",
                         redact(self.config.redis_url), exc)
            return
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
        self._default_entries: dict[str, Any] = {}
        self.install_default_entries(self.config.schedule)
        configured = {**self._default_entries, **self.config.schedule}
        entries = {}
        for name, spec in configured.items():
            try:
                entries[name] = self._maybe_entry(name, spec)
            except Exception as exc:
                logger.error("beat: Skipping static entry %r: %r (%r)", name, exc, spec)
        return entries

    def update_from_dict(self, dict_: dict[str, Any]) -> None:
        """Celery's ``install_default_entries`` hands its defaults (such as
        ``celery.backend_cleanup``) here; they join the statics."""
        self._default_entries.update(dict_)

    def sync_statics(self, now: datetime) -> None:
        """Write the static entries (keeping their run history) and delete the statics
        no longer configured: two round trips for any number of statics."""
        statics = self.static_entries()
        entries = list(statics.values())
        recorded, stored = self.store.read_statics([entry.key for entry in entries])
        writes = []
        for entry, (meta_text, score) in zip(entries, stored, strict=True):
            due = self._static_due(entry, meta_text, score, now)
            writes.append(StaticWrite(
                entry.key, entry.name, entry.definition_json(), meta_json(None),
                to_score(due) if entry.enabled else -1.0, changed_json("static-sync"),
            ))
        removed = [(self.config.keys.entry(name), name) for name in recorded - set(statics)]
        self.store.write_statics(writes, removed, self.token)
        for _, name in removed:
            logger.info("beat: Removed static entry %r (no longer in beat_schedule)", name)
        logger.info("beat: Synced %d static entries", len(writes))

    @staticmethod
    def _static_due(
        entry: RedBeatSchedulerEntry, meta_text: str | None, score: float | None, now: datetime
    ) -> datetime | None:
        try:
            meta = decoder.loads(meta_text) if meta_text else {}
            last_run_at = meta.get("last_run_at") if isinstance(meta, dict) else None
        except ValueError:
            last_run_at = None
        if isinstance(last_run_at, datetime):
            return next_after(entry.schedule, last_run_at)
        if score is not None and score > 0:
            return from_score(score)
        return first_due(entry.schedule, now)

    # -- the loop ------------------------------------------------------------------------

    @property
    def poll_interval(self) -> float:
        return min(self.config.poll_interval, float(self.max_interval))

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass; returns the seconds to sleep before the next."""
        try:
            interval = self._tick()
        except LockLost as exc:
            return self._lost_lock(exc.holder)
        except redis.exceptions.RedisError as exc:
            return self._redis_unavailable(exc)
        if self._redis_down:
            logger.info("beat: Redis is back")
            self._redis_down = False
        return interval

    def _tick(self) -> float:
        now_ts = self.clock()
        now = datetime.fromtimestamp(now_ts, tz=timezone.utc)
        fetch = self.store.fetch(now_ts, self.token, self._lock_ms, self.config.batch_size,
                                 self.node_id)
        if fetch.status == "standby":
            return self._standby(fetch)
        if fetch.status == "acquired" or not self.leading:
            self._become_leader(now)
            if fetch.status == "acquired":
                return 0.0
        confirmed = self._publish_pending(fetch.pending)
        policy = Policy(
            node=self.node_id,
            deterministic_task_ids=self.config.deterministic_task_ids,
            at_least_once=self.config.delivery == AT_LEAST_ONCE,
            history_length=self.config.history_length,
            misfire_grace_time=self.config.misfire_grace_time,
        )
        plan = plan_batch(self.app, fetch.rows, now, policy, self.Entry)
        if plan.ops:
            self.store.commit(plan.ops, self.token, self._lock_ms, policy.node, now_ts)
        sent, lost = self._publish(plan.claims)
        confirmed.extend(sent)
        if policy.at_least_once:
            self.store.confirm(confirmed)
        if lost:
            raise LockLost(None)
        if now_ts >= self._sweep_at:
            self._sweep_parked(now_ts)
        return self._sleep_after(fetch, plan, now_ts)

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
        if not self._redis_down:
            logger.error("beat: Redis unavailable (%s); standing by until it returns", exc)
        self._redis_down = True
        # Whoever holds the lock when Redis returns is re-checked by the next tick.
        self.leading = False
        return self.poll_interval

    # -- publishing ----------------------------------------------------------------------

    def send_slot(self, entry: RedBeatSchedulerEntry, task_id: str) -> Any:
        """Publish one slot through Celery's ``apply_async`` with its slot task id."""
        message = entry.copy(options={**entry.options, "task_id": task_id})
        logger.info("Scheduler: Sending due task %s (%s) id=%s", entry.name, entry.task, task_id)
        return self.apply_async(message, producer=self.producer, advance=False)

    def _publish(self, claims: list[Claim]) -> tuple[list[str], bool]:
        """Publish the claimed slots; returns the ids sent and whether the lock was lost
        on the way (the sent ones are still confirmed, so they are not sent twice)."""
        sent: list[str] = []
        extended_at = time.monotonic()
        for claim in claims:
            if self.token and time.monotonic() - extended_at > self.config.lock_timeout / 3:
                # A slow broker must not let the lock lapse under a healthy leader. If it
                # lapsed anyway, stop: the new leader re-sends what is still pending.
                if not self.store.extend_lock(self.token, self._lock_ms):
                    return sent, True
                extended_at = time.monotonic()
            if self._try_send(claim.entry, claim.task_id) is BROKER_DOWN:
                break
            sent.append(claim.task_id)
        return sent, False

    def _publish_pending(self, pending: dict[str, str]) -> list[str]:
        done = []
        for task_id, message in pending.items():
            try:
                pending_message = read_pending(self.app, message, self.Entry)
            except (ValueError, KeyError, TypeError) as exc:  # InvalidEntry is a ValueError
                logger.error("beat: Dropping unreadable pending slot %s: %r", task_id, exc)
                done.append(task_id)
                continue
            if pending_message.reason == "run-now":
                logger.info("beat: Sending %s now, as asked (%s)", task_id, pending_message.reason)
            else:
                logger.warning("beat: Re-sending slot %s (claimed, publish not confirmed)",
                               task_id)
            if self._try_send(pending_message.entry, task_id) is BROKER_DOWN:
                break
            done.append(task_id)
        return done

    @cached_property
    def _broker_errors(self) -> tuple[type[BaseException], ...]:
        return (OperationalError, OSError, *self.connection.connection_errors)

    def _try_send(self, entry: RedBeatSchedulerEntry, task_id: str) -> object:
        """Publish one slot. A broker that cannot be reached stops this round (the slot
        stays pending and is retried); a message the broker or Celery refuses for what
        it is (bad options, unserialisable arguments) would fail forever and block the
        slots behind it, so it is logged and dropped."""
        try:
            self.send_slot(entry, task_id)
        except Exception as exc:
            cause = exc.__context__ or exc  # Celery wraps the error in SchedulingError
            if isinstance(cause, self._broker_errors):
                lost = self.config.delivery != AT_LEAST_ONCE
                logger.error("beat: Publishing %s failed, broker unavailable (%s); %s",
                             task_id, cause, "at-most-once: this run is lost" if lost
                             else "it stays pending and is retried")
                return BROKER_DOWN
            logger.error("beat: Slot %s of %s cannot be published (%r); dropped",
                         task_id, entry.name, cause)
        return SENT

    # -- shutdown and introspection ------------------------------------------------------

    def close(self) -> None:
        if self.leading and self.token:
            try:
                if self.store.release_lock(self.token):
                    logger.info("beat: Released the lock")
            except redis.exceptions.RedisError as exc:
                logger.warning("beat: Could not release the lock: %s", exc)
        try:
            self.store.forget_node(self.node_id)
        except redis.exceptions.RedisError:
            pass  # the heartbeat goes stale by itself
        self.leading = False
        super().close()

    @property
    def schedule(self) -> dict[str, RedBeatSchedulerEntry]:
        """The entries due now (read only; the tick is what runs them)."""
        from .manage import due_entries

        return {entry.name: entry for entry in due_entries(self.app, self.clock())}

    @schedule.setter
    def schedule(self, value: Any) -> None:
        pass  # Celery's base class assigns its in-memory schedule here; ours is Redis

    @property
    def info(self) -> str:
        lines = [f"       . redis -> {redact(self.config.redis_url)}"]
        if self.config.lock_key:
            lines.append(f"       . lock -> `{self.config.lock_key}` "
                         f"{humanize_seconds(self.config.lock_timeout)} "
                         f"({self.config.lock_timeout}s)")
        return "\n".join(lines)


__all__ = ["RedBeatConfig", "RedBeatScheduler", "RedBeatSchedulerEntry", "ensure_conf",
           "get_redis"]

"""The leader lock's value: who holds it, readable by operators.

The lock is a plain string key with a PX expiry (the 2.4.2 layout). Its value is
``<host>:<pid>:<random hex>``: unique per scheduler process, and enough for an operator
(or ``redbeat status``) to see which node leads. celery-redbeat 2.4.2 stores a bare
random hex token; both implementations only ever compare their own token before
extending or deleting, so they can share the key. Taking, extending and checking the
lock happen inside tick.lua and commit.lua, atomically with the work they guard;
releasing is release.lua. :class:`Lease` keeps the key, token and timeout together.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from celery.utils.time import humanize_seconds
from redis.exceptions import LockNotOwnedError

if TYPE_CHECKING:
    from .store import ScheduleStore


logger = logging.getLogger("celery.beat")

#: PTTL of a key that has no time to live.
NO_EXPIRY = -1
#: Seconds a closing scheduler waits for Redis to release the lock; then the lock is
#: left to expire, so SIGTERM ends beat well inside a supervisor's grace period.
CLOSE_TIMEOUT = 2.0


def expiry_words(ttl_ms: int) -> str:
    """How the lock's PTTL reads to an operator. A lock without one (another client's
    SET without PX) is never released: no beat can lead until someone deletes it, which
    read as "expires in -0.0s"."""
    if ttl_ms == NO_EXPIRY:
        return "lock never expires: no beat can take the lead until the key is deleted"
    return f"lock expires in {max(ttl_ms, 0) / 1000:.1f}s"


def new_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class Holder:
    token: str
    host: str | None = None
    pid: int | None = None

    @classmethod
    def parse(cls, token: str) -> Holder:
        parts = token.rsplit(":", 2)
        if len(parts) == 3 and parts[1].isdigit():
            return cls(token, parts[0], int(parts[1]))
        return cls(token)  # a token written by celery-redbeat 2.4.2: no host, no pid

    @property
    def process(self) -> str:
        """``<host>:<pid>``, the token without its random part (the whole token when it
        has no host): how dispatch records name a node, in a few bytes."""
        return self.token if self.host is None else f"{self.host}:{self.pid}"

    def __str__(self) -> str:
        if self.host is None:  # any text another client SET: shown escaped if unprintable
            token = self.token if self.token.isprintable() else ascii(self.token)[1:-1]
            return f"token {token}"
        return f"{self.host} pid {self.pid}"


class Lease:
    """The leader lock as one object: its key, this node's token and its timeout.

    It answers to the redis-py ``Lock`` methods that code written against
    celery-redbeat 2.4.2 calls on ``scheduler.lock`` (``acquire``, ``extend``,
    ``reacquire``, ``release``, ``owned``, ``locked``, ``token``, ``name``), but the
    scheduler itself never needs them: tick.lua takes and renews the lease atomically
    with its reads, commit.lua checks it atomically with its writes. ``extend`` sets the
    remaining time rather than adding to it, as 2.4.2's replacement script did, because
    every caller passes the full timeout.
    """

    def __init__(self, store: ScheduleStore, name: str, timeout: float,
                 token: str | None = None, sleep: float = 1.0) -> None:
        self.store = store
        self.name = name
        self.timeout = float(timeout)
        self.token = token or new_token()
        self.sleep = sleep
        #: when (on the scheduler's monotonic clock) this node last renewed the lease,
        #: as far as it knows: what a send on another thread is measured against
        self.renewed_at = -math.inf

    @classmethod
    def adopt(cls, store: ScheduleStore, lock: Any, default_timeout: float) -> Lease:
        """The lease of a redis-py ``Lock`` (its name, token and timeout)."""
        token = getattr(getattr(lock, "local", None), "token", None)
        if isinstance(token, bytes):
            token = token.decode()
        name = lock.name.decode() if isinstance(lock.name, bytes) else lock.name
        return cls(store, name, lock.timeout or default_timeout, token or None)

    @property
    def timeout_ms(self) -> int:
        return int(self.timeout * 1000)

    def renewed(self, at: float) -> None:
        """Note that the lease was renewed (by a script that took or extended it) at
        ``at``, on the clock :meth:`may_send` is asked with."""
        self.renewed_at = at

    def may_send(self, now: float, within: float) -> bool:
        """Whether a send that may last ``within`` seconds (counted as at most half the
        timeout) still ends inside the lease as last renewed: a node whose renewals
        stalled (a tick stuck on Redis) stops sending before another can take over."""
        return now - self.renewed_at < self.timeout - min(within, self.timeout / 2)

    def renew(self) -> bool:
        """Push the expiry back to the full timeout if this node holds the lease."""
        return self.store.extend_lock(self)

    def acquire(self, blocking: bool | None = None, blocking_timeout: float | None = None,
                token: str | None = None, sleep: float | None = None) -> bool:
        """Take the lease (or keep it, when this node holds it already). Blocks until
        then unless ``blocking`` is False or ``blocking_timeout`` runs out."""
        if token is not None:
            self.token = token
        deadline = None if blocking_timeout is None else time.monotonic() + blocking_timeout
        while not (self.renew() or self.store.take_lock(self)):
            if blocking is False or (deadline is not None and time.monotonic() >= deadline):
                return False
            time.sleep(self.sleep if sleep is None else sleep)
        return True

    def extend(self, additional_time: float | None = None, replace_ttl: bool = True) -> bool:
        """Set the remaining time to ``additional_time`` seconds (default: the timeout);
        LockNotOwnedError when another node holds the lease, as redis-py raises."""
        ms = self.timeout_ms if additional_time is None else int(additional_time * 1000)
        if not self.store.extend_lock(self, ms):
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned",
                                    lock_name=self.name)
        return True

    def reacquire(self) -> bool:
        return self.extend()

    def release(self) -> None:
        if not self.store.release_lock(self):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned",
                                    lock_name=self.name)

    def holder(self) -> tuple[str | None, int]:
        """The lock's value and remaining milliseconds (-2 when nobody holds it)."""
        return self.store.lock_holder(self.name)

    def owned(self) -> bool:
        return self.holder()[0] == self.token

    def locked(self) -> bool:
        return self.holder()[0] is not None

    def __repr__(self) -> str:
        return f"<Lease {self.name} {Holder.parse(self.token)} {self.timeout}s>"


def farewell(store: ScheduleStore, lease: Lease | None, node_id: str,
             within: float = CLOSE_TIMEOUT) -> None:
    """Release ``lease`` (None: this node does not lead) and drop ``node_id``'s
    heartbeat, giving Redis one attempt on a thread waited for at most ``within``
    seconds: a frozen or stopped Redis must not hold a closing beat, and the lock then
    expires by itself (logged, with when)."""
    outcome: list[bool | BaseException] = []

    def attempt() -> None:
        try:
            outcome.append(store.farewell(lease, node_id))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=attempt, name="redbeat-close", daemon=True)
    thread.start()
    thread.join(within)
    if lease is None:
        return  # the heartbeat goes stale by itself if Redis did not answer
    expires = humanize_seconds(lease.timeout, prefix="within ")
    if not outcome:
        logger.warning("beat: Redis did not answer within %ss; the lock is not released "
                       "and expires %s", within, expires)
    elif isinstance(outcome[0], BaseException):
        logger.warning("beat: Could not release the lock (%s); it expires %s", outcome[0],
                       expires)
    elif outcome[0]:
        logger.info("beat: Released the lock")

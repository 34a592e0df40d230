"""The one retry policy every Redis round trip of the scheduler goes through.

A Redis restart, a Sentinel failover or a dropped connection shows up as a
``ConnectionError``/``TimeoutError`` (or ``BusyLoadingError`` while the restarted server
reads its data back). Each is retried with capped exponential backoff for
``retry_period`` seconds (``redbeat_redis_options['retry_period']``; -1 retries forever).
Without a setting the default rides out a restart of several seconds; the scheduler
loop then goes back to standby rather than exiting if Redis stays away longer.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis.exceptions
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    stop_never,
    wait_exponential,
)

from .redaction import redact

logger = logging.getLogger("celery.beat")

T = TypeVar("T")

DEFAULT_RETRY_PERIOD = 10.0
#: Seconds before the first retry; each next wait doubles, up to ``max_wait``.
FIRST_WAIT = 0.05

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ReadOnlyError,
)


#: Refusals of this client's credentials or rights: redis-py raises them as
#: ConnectionErrors, but no retry fixes a wrong password, so they are not retried and
#: are reported as the configuration error they are.
AUTH_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthorizationError,
    redis.exceptions.NoPermissionError,
)

#: Seconds into an outage at which it is logged again (then every last-step seconds):
#: a beat cut off from Redis for hours says so a few dozen times, not every retry.
REPORT_AFTER = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def is_auth_error(error: BaseException | None) -> bool:
    return isinstance(error, AUTH_ERRORS)


def is_transient(error: BaseException) -> bool:
    return isinstance(error, TRANSIENT_ERRORS) and not is_auth_error(error)


def _duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Outage:
    """One stretch of failing Redis round trips, as the log tells it: the first failure
    at once, then again at growing intervals (:data:`REPORT_AFTER`) with the time since
    it began and the attempts so far, and the end once. Every retry of every round trip
    used to log a line, with a counter that restarted at 1 on each tick: a beat cut off
    from Redis logged a warning every second or two forever. A refused password is told
    as a configuration error (and not retried: see :data:`AUTH_ERRORS`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started: float | None = None
        self.attempts = 0
        self.auth = False
        self._reports = 0

    def failed(self, error: BaseException | None, quiet: bool = False) -> None:
        """Count one failed attempt; log it if it starts an outage (or changes its
        kind), unless ``quiet`` (the caller said it already), or the next report is due."""
        now = self.clock()
        auth = is_auth_error(error)
        if self.started is None or auth != self.auth:
            self.started, self.attempts, self.auth, self._reports = now, 1, auth, 1
            if quiet:
                return
            if auth:
                logger.error("beat: Redis refused the credentials (%s: %s): a configuration "
                             "error, not an outage; check the username and password of "
                             "redbeat_redis_url / redbeat_redis_options. Trying again each "
                             "poll, logged at growing intervals", type(error).__name__,
                             redact(str(error)))
            else:
                logger.warning("beat: Redis unavailable (%s: %s); retrying, logged again at "
                               "growing intervals", type(error).__name__, redact(str(error)))
            return
        self.attempts += 1
        elapsed = now - self.started
        step = min(self._reports - 1, len(REPORT_AFTER) - 1)
        due = REPORT_AFTER[step] + REPORT_AFTER[-1] * max(0, self._reports - len(REPORT_AFTER))
        if elapsed >= due:
            self._reports += 1
            if self.auth:
                logger.error("beat: Redis still refuses the credentials after %s (%d attempts): "
                             "%s", _duration(elapsed), self.attempts, redact(str(error)))
            else:
                logger.warning("beat: Redis still unavailable after %s (%d attempts): %s: %s",
                               _duration(elapsed), self.attempts, type(error).__name__,
                               redact(str(error)))

    def ended(self) -> None:
        """A round trip succeeded: log the end of an outage, if one was under way."""
        if self.started is None:
            return
        elapsed = self.clock() - self.started
        logger.info("beat: Redis is back after %s (%d failed attempts)",
                    _duration(elapsed) if elapsed >= 1 else f"{elapsed:.1f}s", self.attempts)
        self.started, self.attempts, self.auth, self._reports = None, 0, False, 0


class RetryPolicy:
    """Retries a callable on transient Redis errors; everything else raises at once."""

    def __init__(self, retry_period: float | None = None, max_wait: float = 2.0) -> None:
        self.retry_period = DEFAULT_RETRY_PERIOD if retry_period is None else float(retry_period)
        self.max_wait = max_wait
        #: Kept across calls, so an outage spanning many ticks is one outage in the log.
        self.outage = Outage()

    def _log_retry(self, state: RetryCallState) -> None:
        outcome = state.outcome
        self.outage.failed(outcome.exception() if outcome is not None else None)

    def _retrying(self, period: float) -> Retrying:
        """The attempts after the first failed: for ``period`` more seconds, the waits
        going on from the first one (FIRST_WAIT, doubling up to ``max_wait``)."""
        stop = stop_never if self.retry_period < 0 else stop_after_delay(period)
        return Retrying(
            retry=retry_if_exception(is_transient),
            wait=wait_exponential(multiplier=2 * FIRST_WAIT, max=self.max_wait),
            stop=stop,
            before_sleep=self._log_retry,
            reraise=True,
        )

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``, retried on transient errors for ``retry_period`` seconds.

        The first attempt is a plain call: nearly every round trip succeeds at once,
        and building the retry machinery for it cost about as much as a small
        command's round trip (20 µs, on every save). The first transient failure hands
        over to it, counted and waited for as any failed attempt."""
        started = time.monotonic()
        try:
            result = fn()
        except BaseException as exc:
            if not is_transient(exc):
                raise
            elapsed = time.monotonic() - started
            if 0 <= self.retry_period <= elapsed:
                raise
            self.outage.failed(exc)
            time.sleep(FIRST_WAIT)
            result = self._retrying(self.retry_period - elapsed - FIRST_WAIT)(fn)
        if self.outage.started is not None:
            self.outage.ended()
        return result


class RetryingConnection:
    """A Redis client whose every method call goes through :class:`RetryPolicy`.

    celery-redbeat 2.4.2's ``get_redis`` returns one when ``retry_period`` is set, and
    code written against it calls the client directly; this package's own round trips
    go through the store, which retries on its own.
    """

    #: The longest wait between two attempts, in seconds (2.4.2's attribute; it waited up
    #: to 30 s, so a Redis back after a restart went unnoticed that long).
    RETRY_MAX_WAIT = 2.0

    def __init__(self, retry_period: float | None, wrapped_connection: Any) -> None:
        self.wrapped_connection = wrapped_connection
        self.policy = RetryPolicy(retry_period, max_wait=self.RETRY_MAX_WAIT)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.wrapped_connection, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def retried(*args: Any, **kwargs: Any) -> Any:
            return self.policy.call(lambda: attribute(*args, **kwargs))

        return retried

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
from collections.abc import Callable
from typing import Any, TypeVar

import redis.exceptions
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential,
)

logger = logging.getLogger("celery.beat")

T = TypeVar("T")

DEFAULT_RETRY_PERIOD = 10.0

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ReadOnlyError,
)


def _log_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0
    logger.warning(
        "beat: Redis unavailable (%s: %s); retry %d in %.1fs",
        type(error).__name__, error, state.attempt_number, wait,
    )


class RetryPolicy:
    """Retries a callable on transient Redis errors; everything else raises at once."""

    def __init__(self, retry_period: float | None = None, max_wait: float = 2.0) -> None:
        self.retry_period = DEFAULT_RETRY_PERIOD if retry_period is None else float(retry_period)
        self.max_wait = max_wait

    def _retrying(self) -> Retrying:
        stop = stop_never if self.retry_period < 0 else stop_after_delay(self.retry_period)
        return Retrying(
            retry=retry_if_exception_type(TRANSIENT_ERRORS),
            wait=wait_exponential(multiplier=0.05, max=self.max_wait),
            stop=stop,
            before_sleep=_log_retry,
            reraise=True,
        )

    def call(self, fn: Callable[[], T]) -> T:
        return self._retrying()(fn)


class RetryingConnection:
    """A Redis client whose every method call goes through :class:`RetryPolicy`.

    celery-redbeat 2.4.2's ``get_redis`` returns one when ``retry_period`` is set, and
    code written against it calls the client directly; this package's own round trips
    go through the store, which retries on its own.
    """

    def __init__(self, retry_period: float | None, wrapped_connection: Any) -> None:
        self.wrapped_connection = wrapped_connection
        self.policy = RetryPolicy(retry_period)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.wrapped_connection, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def retried(*args: Any, **kwargs: Any) -> Any:
            return self.policy.call(lambda: attribute(*args, **kwargs))

        return retried

"""The retry policy's first attempt is a plain call; a transient failure hands over to
the retries for the rest of ``retry_period``, counted and logged as one outage. Real
redis-servers: one stopped and started again under a call."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redbeat.retry import RetryPolicy
from support.redis_server import RedisServer, require_redis_server


def test_a_call_through_a_redis_restart_is_retried_and_logged_once(caplog):
    require_redis_server()
    server = RedisServer().start()
    try:
        # redis-py's own retries off: the policy is what is tested
        client = redis.Redis(port=server.port, socket_connect_timeout=1,
                             retry=Retry(NoBackoff(), 0))
        client.set("k", "v")
        policy = RetryPolicy(retry_period=30)
        caplog.set_level(logging.INFO, logger="celery.beat")
        server.stop()
        threading.Timer(1.0, server.start).start()
        started = time.monotonic()
        assert policy.call(lambda: client.get("k")) is None  # no persistence: a new server
        assert 0.9 < time.monotonic() - started < 30
        messages = [record.getMessage() for record in caplog.records]
        assert sum("Redis unavailable" in m for m in messages) == 1, messages
        assert messages[-1].startswith("beat: Redis is back after"), messages
        assert policy.outage.started is None
    finally:
        server.cleanup()


def test_no_retry_period_means_one_attempt_and_other_errors_are_not_retried(caplog):
    attempts = []

    def refused() -> None:
        attempts.append(1)
        raise redis.exceptions.ConnectionError("refused")

    caplog.set_level(logging.INFO, logger="celery.beat")
    with pytest.raises(redis.exceptions.ConnectionError):
        RetryPolicy(retry_period=0).call(refused)
    assert attempts == [1] and caplog.text == ""

    def wrong() -> None:
        attempts.append(2)
        raise redis.exceptions.ResponseError("WRONGTYPE")

    with pytest.raises(redis.exceptions.ResponseError):
        RetryPolicy(retry_period=30).call(wrong)
    assert attempts == [1, 2]


def test_a_short_retry_period_is_kept(caplog):
    attempts = []

    def refused() -> None:
        attempts.append(time.monotonic())
        raise redis.exceptions.ConnectionError("refused")

    started = time.monotonic()
    with pytest.raises(redis.exceptions.ConnectionError):
        RetryPolicy(retry_period=1.0).call(refused)
    took = time.monotonic() - started
    # kept: not the default 10-s period (the upper bound leaves a loaded machine room)
    assert 1.0 <= took < 9.0, took
    waits = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
    assert len(attempts) >= 4 and waits[0] >= 0.05 and waits[1] >= 0.1, waits

"""broker_errors.verdict as a table: every error the publish can meet, held ("not now":
re-sent under the same task id when the broker accepts) or dropped (the message
itself is refused). Redis replies are parsed from their wire text by redis-py's own
parser, as the broker's answers reach the publish. The real-server side is in
tests/test_broker_refusals.py."""

from __future__ import annotations

import amqp.exceptions as amqp_errors
import pytest
import redis.exceptions as redis_errors
from celery.beat import SchedulingError
from kombu.exceptions import EncodeError, OperationalError
from kombu.transport import redis as kombu_redis

from redbeat.broker_errors import DROP, HOLD, cause_of, verdict
from redbeat.publish import MessageNacked
from support.replies import error_reply as reply

TABLE = [
    # a Redis broker's state, not the message
    (reply("OOM command not allowed when used memory > 'maxmemory'."), HOLD),
    (reply("READONLY You can't write against a read only replica."), HOLD),
    (reply("LOADING Redis is loading the dataset in memory"), HOLD),
    (reply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
     HOLD),
    (reply("TRYAGAIN Multiple keys request during rehashing of slot"), HOLD),
    (reply("CLUSTERDOWN The cluster is down"), HOLD),
    (reply("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to "
           "persist to disk."), HOLD),
    (reply("NOREPLICAS Not enough good replicas to write."), HOLD),
    (reply("NOPERM User beat has no permissions to run the 'lpush' command"), HOLD),
    (reply("WRONGTYPE Operation against a key holding the wrong kind of value"), HOLD),
    (reply("BUSY Redis is busy running a script."), HOLD),
    (reply("MOVED 3999 127.0.0.1:6381"), HOLD),
    (redis_errors.ConnectionError("Error 111 connecting to 127.0.0.1:6379."), HOLD),
    (redis_errors.TimeoutError("Timeout reading from socket"), HOLD),
    (redis_errors.AuthenticationError("invalid username-password pair"), HOLD),
    # RabbitMQ refusing for now, or the link to it failing
    (MessageNacked(), HOLD),
    (amqp_errors.MessageNacked(), HOLD),
    (amqp_errors.ResourceError("connection closed: flow control"), HOLD),
    (amqp_errors.ConnectionForced("CONNECTION_FORCED - broker forced connection closure"),
     HOLD),
    (amqp_errors.RecoverableConnectionError("connection already closed"), HOLD),
    (amqp_errors.NotFound("NOT_FOUND - no exchange 'tasks' in vhost '/'"), HOLD),
    (amqp_errors.AccessRefused("ACCESS_REFUSED - write access to exchange denied"), HOLD),
    (amqp_errors.PreconditionFailed("PRECONDITION_FAILED - inequivalent arg 'x-max-length'"),
     HOLD),
    (OperationalError("[Errno 111] Connection refused"), HOLD),
    (ConnectionResetError(104, "Connection reset by peer"), HOLD),
    (BrokenPipeError(32, "Broken pipe"), HOLD),
    (TimeoutError("timed out"), HOLD),
    # the message itself: serialisation, the task's signature, its size
    (EncodeError("Object of type set is not JSON serializable"), DROP),
    (TypeError("add() missing 1 required positional argument: 'y'"), DROP),
    (ValueError("soft_time_limit must be less than or equal to time_limit"), DROP),
    (redis_errors.DataError("Invalid input of type: 'dict'"), DROP),
    (reply("ERR Protocol error: invalid bulk length"), DROP),
    (reply("ERR string exceeds maximum allowed size (proto_max_bulk_len)"), DROP),
    (amqp_errors.ContentTooLarge("message too large"), DROP),
    (amqp_errors.PreconditionFailed(
        "PRECONDITION_FAILED - message size 134217729 is larger than configured max size "
        "134217728"), DROP),
    (RuntimeError("a bug in a subclass's send_slot"), DROP),
]


@pytest.mark.parametrize(("error", "expected"), TABLE, ids=lambda v: (
    f"{type(v).__name__}:{str(v)[:40]}" if isinstance(v, BaseException) else v))
def test_each_error_is_held_or_dropped(error, expected):
    assert verdict(error) == expected


def test_a_transports_own_connection_errors_are_held():
    """What a transport counts among its connection errors is held: kombu's Redis
    transport counts KeyError (a queue vanishing under it) since kombu 5.4."""
    errors = (*kombu_redis.Transport.connection_errors, KeyError)
    assert verdict(KeyError("celery"), errors) == HOLD
    assert verdict(KeyError("celery")) == DROP
    assert verdict(EncodeError("x"), errors) == DROP


def test_celerys_scheduling_error_is_judged_by_what_it_wraps():
    try:
        try:
            raise reply("OOM command not allowed when used memory > 'maxmemory'.")
        except Exception:
            raise SchedulingError("Couldn't apply scheduled task job") from None
    except SchedulingError as wrapped:
        error = wrapped
    # the OOM reply itself (redis-py 4.x has no OutOfMemoryError: a ResponseError)
    assert isinstance(cause_of(error), redis_errors.ResponseError)
    assert "command not allowed when used memory" in str(cause_of(error))
    assert verdict(cause_of(error)) == HOLD
    plain = TypeError("x")
    assert cause_of(plain) is plain

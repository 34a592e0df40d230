"""What an error met while publishing a slot means for that slot: hold it, or drop it.

A broker that says "not now" (a Redis broker out of memory under ``noeviction``, a
master demoted to a read-only replica during a failover, a server still loading its
data, a cluster without a master for the slot, a RabbitMQ queue full under
``x-overflow=reject-publish``, a connection reset or closed by flow control) refuses the
message for a while, not for what it is: the slot stays held and is re-sent under the
same task id when the broker accepts again, within its misfire grace, exactly as through
an outage (nothing was written, so nothing is sent twice). Only what is wrong with the
message itself (it cannot be serialised, its arguments do not fit the task's signature,
the broker refuses its size) would fail the same way forever and block the slots behind
it: that slot is dropped and the failure recorded on its entry.

:data:`RULES` is the whole decision, first match wins; :func:`verdict` applies it.
"""

from __future__ import annotations

from collections.abc import Callable

import amqp.exceptions as amqp_errors
import redis.exceptions as redis_errors
from celery.beat import SchedulingError
from kombu.exceptions import OperationalError

from .publish import MessageNacked

HOLD, DROP = "hold", "drop"


def _names_its_size(error: BaseException) -> bool:
    """Whether a broker's reply says the message is too large (Redis's
    ``proto-max-bulk-len``, RabbitMQ's ``max_message_size``)."""
    text = str(error).lower()
    return ("bulk length" in text or "too large" in text or "larger than" in text
            or "exceeds maximum" in text)


def _always(error: BaseException) -> bool:
    return True


#: (error classes, a test of the error, verdict, what it stands for), in order.
RULES: tuple[tuple[tuple[type[BaseException], ...], Callable[[BaseException], bool], str, str],
             ...] = (
    ((amqp_errors.ContentTooLarge,), _always, DROP, "RabbitMQ refuses the message's size"),
    ((amqp_errors.PreconditionFailed, redis_errors.ResponseError), _names_its_size, DROP,
     "the broker refuses the message's size"),
    ((redis_errors.ResponseError,), _always, HOLD,
     "a Redis reply about its state, not the message: OOM, READONLY, MASTERDOWN, TRYAGAIN, "
     "CLUSTERDOWN, MISCONF, NOREPLICAS, NOPERM, WRONGTYPE at a queue"),
    ((redis_errors.ConnectionError, redis_errors.TimeoutError), _always, HOLD,
     "Redis unreachable, timed out, or LOADING its data"),
    ((MessageNacked, amqp_errors.MessageNacked), _always, HOLD,
     "a RabbitMQ nack: a full queue under reject-publish, a broker refusing for now"),
    ((amqp_errors.ChannelError, amqp_errors.ConnectionError), _always, HOLD,
     "RabbitMQ closed the channel or the connection (flow control, a forced close)"),
    ((OperationalError, OSError), _always, HOLD,
     "the broker cannot be reached: refused, reset, timed out"),
)


def verdict(error: BaseException,
            connection_errors: tuple[type[BaseException], ...] = ()) -> str:
    """HOLD or DROP for ``error`` (unwrapped from Celery's ``SchedulingError``). What no
    rule names is the message's own fault (kombu's ``EncodeError``, a ``TypeError`` from
    the task's signature, ``ValueError``), unless the transport counts it among its
    ``connection_errors``."""
    for kinds, applies, answer, _ in RULES:
        if isinstance(error, kinds) and applies(error):
            return answer
    return HOLD if isinstance(error, connection_errors) else DROP


def cause_of(error: BaseException) -> BaseException:
    """The error a publish really met: Celery's beat wraps it in ``SchedulingError``."""
    if isinstance(error, SchedulingError) and error.__context__ is not None:
        return error.__context__
    return error

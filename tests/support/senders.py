"""Which redbeat module sent each Redis command: the check that the store owns them all.

docs/design.md says every Redis round trip of the package is in ``redbeat.store``. This
module holds that claim during the test suite: it wraps redis-py's
``AbstractConnection.send_packed_command`` (every command, pipeline and script call of
every client, fakeredis included, is written through it) and, on each write, walks the
calling thread's stack from the innermost frame outward to the first frame that is not
redis-py's (or fakeredis's, or the retry plumbing's). When that frame is in the
``redbeat`` package and outside the modules allowed to talk to Redis, the write is
recorded as a violation. Writes whose first such frame is elsewhere (a test, kombu's
broker transport, a user's code) are not redbeat's and are ignored, and so are the
scheduler's PING of a Redis broker (``BROKER_PROBES``) and the batched publish's writes
(``BROKER_MODULES``), which go to the broker.

``conftest.py`` installs it for the whole session and fails the test during which a
violation happened, naming the module, the function and the command.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any, NamedTuple

from redis.connection import AbstractConnection

#: The only modules of the package that may send a Redis command: the store, and the
#: connection plumbing, because building a Redis Cluster client asks the cluster for its
#: slots and commands (redis-py does it in the constructor; nothing else there sends).
ALLOWED = frozenset({"redbeat.store", "redbeat.connection"})

#: Functions that talk to the *broker*, not to the schedule's Redis: a PING on a client
#: from kombu's pool, when the broker is Redis (wherever the publish code keeps it).
BROKER_PROBES = frozenset({"_ping_broker"})
#: Modules that talk only to the broker: the batched publish writes a Redis broker's
#: queues through a client of kombu's pool, never the schedule's Redis.
BROKER_MODULES = frozenset({"redbeat.publish"})

#: Frames skipped on the way out: the client library, and redbeat's pass-through
#: wrappers, which send for whoever called them (``RetryingConnection`` is the
#: retrying client 2.4.2 code gets as ``app.redbeat_redis``; the retry policy calls the
#: function it is given).
PASS_THROUGH = ("redis", "fakeredis", "redbeat.retry")


class Violation(NamedTuple):
    module: str
    function: str
    line: int
    command: str

    def __str__(self) -> str:
        return f"{self.module}.{self.function} (line {self.line}) sent {self.command}"


_lock = threading.Lock()
_violations: list[Violation] = []


#: Module name -> whether it passes through: every command walks several frames, and the
#: answer for a module never changes (a dictionary look-up instead of three prefix tests
#: per frame; the walk was 7% of the simulator's CPU).
_through: dict[str, bool] = {}


def _passes_through(module: str) -> bool:
    found = _through.get(module)
    if found is None:
        found = _through[module] = any(module == name or module.startswith(name + ".")
                                       for name in PASS_THROUGH)
    return found


def sender(frame: FrameType | None) -> tuple[str, str, int] | None:
    """Module, function and line of the first frame outside the pass-through modules."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not _passes_through(module):
            return module, frame.f_code.co_name, frame.f_lineno
        frame = frame.f_back
    return None


def _command_name(packed: Any) -> str:
    """The first command's name, read from the RESP text (``*N\\r\\n$len\\r\\nNAME``)."""
    first = packed[0] if isinstance(packed, (list, tuple)) and packed else packed
    if isinstance(first, str):
        first = first.encode()
    parts = bytes(first[:200]).split(b"\r\n") if isinstance(first, (bytes, bytearray,
                                                                     memoryview)) else []
    return parts[2].decode(errors="replace").upper() if len(parts) > 2 else "?"


def _note(packed: Any) -> None:
    found = sender(sys._getframe(2))
    if found is None:
        return
    module, function, line = found
    if function in BROKER_PROBES or module in BROKER_MODULES:
        return
    if (module == "redbeat" or module.startswith("redbeat.")) and module not in ALLOWED:
        with _lock:
            _violations.append(Violation(module, function, line, _command_name(packed)))


def install() -> None:
    """Wrap the connection's write once per process."""
    if getattr(AbstractConnection.send_packed_command, "_redbeat_senders", False):
        return
    original = AbstractConnection.send_packed_command

    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> Any:
        _note(command)
        return original(self, command, check_health)

    send_packed_command._redbeat_senders = True  # type: ignore[attr-defined]
    AbstractConnection.send_packed_command = send_packed_command  # type: ignore[method-assign]


def take() -> list[Violation]:
    """The violations recorded since the last call, forgotten once returned."""
    with _lock:
        found = list(_violations)
        _violations.clear()
    return found

"""Counts round trips to Redis on the client side (one per request written), and
commands (``counting_commands``).

A pipeline or a script call writes all its commands at once and is one round trip;
``send_packed_command`` is called once per such request, so counting its calls counts
round trips exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.connection import AbstractConnection


class CountingConnection(redis.Connection):
    round_trips = 0

    def send_packed_command(self, command, check_health=True):  # type: ignore[no-untyped-def]
        type(self).round_trips += 1
        return super().send_packed_command(command, check_health)


def counting_client(url: str) -> redis.Redis:
    """A client whose round trips are counted on a fresh CountingConnection subclass."""
    counter = type("Counter", (CountingConnection,), {"round_trips": 0})
    pool = redis.ConnectionPool.from_url(
        url, connection_class=counter, decode_responses=True, encoding_errors="surrogateescape"
    )
    client = redis.Redis(connection_pool=pool)
    client.counter = counter  # type: ignore[attr-defined]
    return client


class CommandCount:
    """Commands written by every client of this process while counting, by name."""

    def __init__(self) -> None:
        self.by_name: dict[str, int] = {}

    def add(self, args: tuple[Any, ...]) -> None:
        name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        name = name.upper()
        self.by_name[name] = self.by_name.get(name, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.by_name.values())


@contextmanager
def counting_commands() -> Iterator[CommandCount]:
    """Count the commands (not round trips) every connection of this process writes:
    single commands and each command of a pipeline, the connection handshake included."""
    count = CommandCount()
    send_command = AbstractConnection.send_command
    pack_commands = AbstractConnection.pack_commands

    def counted_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        count.add(args)
        return send_command(self, *args, **kwargs)

    def counted_pack(self: Any, commands: Any) -> Any:
        commands = list(commands)
        for args in commands:
            count.add(args)
        return pack_commands(self, commands)

    AbstractConnection.send_command = counted_send  # type: ignore[method-assign]
    AbstractConnection.pack_commands = counted_pack  # type: ignore[method-assign]
    try:
        yield count
    finally:
        AbstractConnection.send_command = send_command  # type: ignore[method-assign]
        AbstractConnection.pack_commands = pack_commands  # type: ignore[method-assign]

"""Counts round trips to Redis on the client side: one per request written.

A pipeline or a script call writes all its commands at once and is one round trip;
``send_packed_command`` is called once per such request, so counting its calls counts
round trips exactly.
"""

from __future__ import annotations

import redis


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

"""One clock for the fleet: Redis's.

Every node decides what is due, stamps its heartbeat and judges the others' from its
own wall clock, and a host's clock can be off by seconds or minutes (no NTP in a
container, a VM resumed from a snapshot). A node 30 s ahead would send every slot 30 s
early once it leads and count 30 s of slots as missed on taking over; one 30 s behind
would look stuck to a probe. So each node measures how far its clock is from the
server's (``TIME``, read inside the round trip a tick makes anyway) and adds that offset
to its own clock: every node then reads the same time, the schedule's Redis's.

A sample is taken from a round trip: the server's time lies between the moments the
request left and the reply came back, so the midpoint is off by at most half the round
trip; a sample from a slow round trip (a large batch, a loaded server) is less exact
than the offset already known and is not taken.

The offset changes only when a clock is set (NTP stepping it, a VM resumed, an operator)
or by the slow drift NTP leaves; so ``TIME`` is read only when a sample may tell
something new: until one is taken, once a minute, and as soon as this host's clock has
moved apart from its monotonic clock (which nobody sets) since the last sample. An idle
tick does not pay for it otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

#: A skew at least this large (seconds) is logged, once when it appears and once when
#: it is gone: smaller ones are what NTP leaves between hosts.
SKEW_LOGGED = 1.0
#: Samples from round trips longer than this (seconds) are not taken once an offset is
#: known: their midpoint may be off by half of it.
EXACT_ROUND_TRIP = 0.2
#: Seconds after a sample when the next is taken though no clock was seen to be set:
#: what NTP's slewing (at most 500 ppm) can move a clock by then is a few milliseconds.
RESAMPLE_EVERY = 60.0
#: How far (seconds) this host's clock may move from its monotonic clock between two
#: samples before it is taken to have been set, and the offset measured again.
STEP = 0.05


@dataclass
class FleetClock:
    """The offset from this host's clock to Redis's (pure: the caller reads both)."""

    #: Off: the caller's clock is taken as is (a test driving the scheduler's time).
    enabled: bool = True
    offset: float = 0.0
    measured: bool = False
    logged: bool = False
    #: (host time, monotonic time) when the offset was last measured
    anchor: tuple[float, float] | None = None

    def now(self, host: float) -> float:
        """Redis's time at the host time ``host``."""
        return host + self.offset if self.enabled else host

    def wanted(self, host: float, monotonic: float) -> bool:
        """Whether a round trip leaving at host time ``host`` (``monotonic`` on the
        monotonic clock) should read the server's clock: no offset yet, the last one
        measured ``RESAMPLE_EVERY`` ago, or this host's clock set since."""
        if not self.enabled:
            return False
        if self.anchor is None:
            return True
        elapsed = monotonic - self.anchor[1]
        return elapsed >= RESAMPLE_EVERY or abs(host - self.anchor[0] - elapsed) >= STEP

    def observe(
        self, sent: float, received: float, server: float | None, monotonic: float
    ) -> str | None:
        """Take the sample of a round trip that left at host time ``sent`` (at
        ``monotonic`` on the monotonic clock) and came back at ``received``, the server
        reading ``server``; returns a line to log when the skew becomes, or stops being,
        large enough to matter."""
        if not self.enabled or server is None:
            return None
        round_trip = received - sent
        if self.measured and not 0 <= round_trip <= EXACT_ROUND_TRIP:
            return None
        self.offset, self.measured = server - (sent + received) / 2, True
        self.anchor = (sent, monotonic)
        large = abs(self.offset) >= SKEW_LOGGED
        if large == self.logged:
            return None
        self.logged = large
        if large:
            way = "ahead of" if self.offset < 0 else "behind"
            return (
                f"this host's clock is {abs(self.offset):.1f}s {way} Redis's; due times, "
                "heartbeats and lease ages are taken from Redis's clock"
            )
        return "this host's clock agrees with Redis's again"

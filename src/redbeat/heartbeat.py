"""A scheduler's heartbeat as tick.lua writes it (``<prefix>:nodes``, a sorted set:
node id, scored with the epoch seconds of its last tick, negated for a standby), read
defensively, as ``"<role> <epoch seconds>"`` per node.

Any process can write that key (an operator's ``ZADD``, another release, a bug), and
its readers are the probes supervisors act on: ``redbeat check``, ``redbeat status``,
the /metrics gauges, the web view's Nodes page. So a field that does not read as a
role and a finite, positive time is no heartbeat at all: its readers skip it (the
leader's sweep deletes it), and the other nodes' heartbeats keep their meaning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The roles tick.lua writes.
ROLES = frozenset({"leader", "standby"})
#: How far ahead of Redis's clock a heartbeat may be stamped (seconds) and still count:
#: nodes stamp Redis's time (fleet_clock.py), give or take a round trip. One further
#: ahead comes from a clock nobody corrected, and would look fresh for as long as it is
#: ahead, however stuck its node is.
FUTURE_SLACK = 2.0


@dataclass(frozen=True)
class Heartbeat:
    role: str
    #: epoch seconds of the tick that wrote it (Redis's clock since tick.lua stamps it)
    at: float

    @classmethod
    def parse(cls, text: object) -> Heartbeat | None:
        """The heartbeat ``text`` holds, or None when it holds none."""
        if not isinstance(text, str) or len(text) > 64:
            return None
        role, _, at = text.partition(" ")
        if role not in ROLES:
            return None
        try:
            seconds = float(at)
        except ValueError:
            return None
        if not math.isfinite(seconds) or seconds <= 0:
            return None
        return cls(role, seconds)


def stale(at: float, now: float, max_age: float) -> str | None:
    """Why a heartbeat stamped ``at`` is no sign of life at ``now`` (Redis's clock), or
    None when it is one: older than ``max_age``, or stamped in the future."""
    if now - at > max_age:
        return f"last ticked {now - at:.1f}s ago (> {max_age}s)"
    if at - now > FUTURE_SLACK:
        return (f"heartbeat stamped {at - now:.1f}s ahead of Redis's clock (a clock "
                "ahead, whose node may be stuck)")
    return None


def readable_node(node: object) -> bool:
    """Whether a node id can be shown (a page, a metric label, a log line): printable
    text, which a non-UTF-8 field read back through ``surrogateescape`` is not."""
    return isinstance(node, str) and 0 < len(node) <= 512 and node.isprintable()


def node_fields(members: list[tuple[str, float]]) -> dict[str, str]:
    """The nodes sorted set's ``(node, score)`` members as ``node -> "<role> <epoch
    seconds>"``: a negative score is a standby's."""
    return {node: f"{'leader' if score >= 0 else 'standby'} {abs(score)!r}"
            for node, score in members}


def heartbeats(fields: dict[str, str]) -> dict[str, Heartbeat]:
    """The readable heartbeats of the nodes hash's ``fields``; the rest are left out."""
    found = {}
    for node, text in fields.items():
        beat = Heartbeat.parse(text)
        if beat is not None and readable_node(node):
            found[node] = beat
    return found

"""Is this host's scheduler healthy? The answer ``redbeat check`` gives supervisors.

Every tick writes a heartbeat (``<prefix>:nodes``: node id -> "<role> <epoch>"), so a
probe run next to a beat process can tell a working leader or standby from a process
that is wedged, cut off from Redis, or gone, without talking to the process itself.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from celery import Celery

from .lock import NO_EXPIRY, Holder, expiry_words
from .manage import status


@dataclass(frozen=True)
class Health:
    healthy: bool
    reason: str


def check(app: Celery, host: str | None = None, pid: int | None = None,
          max_age: float | None = None, now: float | None = None) -> Health:
    """Healthy when a scheduler on ``host`` (this machine by default; ``pid`` narrows it)
    ticked within ``max_age`` seconds and is the lock holder, or a standby while another
    node holds a live lock and ticks too."""
    host = host or socket.gethostname()
    now = time.time() if now is None else now
    from .settings import ensure_conf

    config = ensure_conf(app)
    max_age = max_age if max_age is not None else config.poll_interval * 3 + 2
    state = status(app, now=now, upcoming=0)
    mine = {
        node: beat for node, beat in state.nodes.items()
        if Holder.parse(node).host == host and (pid is None or Holder.parse(node).pid == pid)
    }
    if not mine:
        return Health(False, f"no scheduler heartbeat from {host}"
                             + (f" pid {pid}" if pid else ""))
    node, (role, at) = max(mine.items(), key=lambda item: item[1][1])
    age = now - at
    if age > max_age:
        return Health(False, f"{Holder.parse(node)} last ticked {age:.1f}s ago (> {max_age}s)")
    if not config.lock_key:
        return Health(True, f"{Holder.parse(node)} ticking (locking disabled)")
    if state.lock_holder == node:
        return Health(True, f"{Holder.parse(node)} leads; {expiry_words(state.lock_ttl_ms)}")
    if state.lock_holder and state.lock_ttl_ms == NO_EXPIRY:
        return Health(False, f"{Holder.parse(node)} stands by: {Holder.parse(state.lock_holder)}"
                             f" holds the lock and its {expiry_words(NO_EXPIRY)}")
    if not state.lock_holder or state.lock_ttl_ms <= 0:
        return Health(False, f"{Holder.parse(node)} stands by but nobody holds the lock")
    leader_beat = state.nodes.get(state.lock_holder)
    if leader_beat is not None and now - leader_beat[1] > max_age:
        return Health(False, f"leader {Holder.parse(state.lock_holder)} last ticked "
                             f"{now - leader_beat[1]:.1f}s ago")
    return Health(True, f"{Holder.parse(node)} stands by; "
                        f"{Holder.parse(state.lock_holder)} leads")

"""Is this host's scheduler healthy? The answer ``redbeat check`` gives supervisors.

Every tick writes a heartbeat (``<prefix>:nodes``: node id -> "<role> <epoch>"), so a
probe run next to a beat process can tell a working leader or standby from a process
that is wedged, cut off from Redis, or gone, without talking to the process itself.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from celery import Celery

from .failures import failing_summary
from .heartbeat import stale
from .lock import NO_EXPIRY, Holder, expiry_words
from .manage import QUARANTINE_SAMPLE, Status, status
from .runtime import store_for
from .settings import ensure_conf


@dataclass(frozen=True)
class Health:
    healthy: bool
    reason: str
    #: quarantined entries (how many), and entries whose last dispatch was refused
    #: (names, newest first, at most ``manage.QUARANTINE_SAMPLE``): a beat can be
    #: healthy while entries of its schedule do not run
    quarantined: int = 0
    failing: tuple[str, ...] = ()
    #: ``quarantined`` counts a sample: at least that many are
    quarantined_at_least: bool = False
    #: entries whose last N runs failed or were lost, as the workers reported them
    #: (redbeat_worker_outcomes), with how many in a row, most first
    failing_runs: tuple[tuple[str, int], ...] = ()

    @property
    def attention(self) -> str:
        """The entries that need an operator, in words ("" when none)."""
        parts = []
        if self.quarantined:
            parts.append(f"{'at least ' if self.quarantined_at_least else ''}"
                         f"{self.quarantined} quarantined entr"
                         f"{'y' if self.quarantined == 1 else 'ies'} "
                         "(redbeat list --state quarantined; redbeat unquarantine --all)")
        if self.failing:
            shown = ", ".join(self.failing[:5]) + (", ..." if len(self.failing) > 5 else "")
            parts.append(f"{len(self.failing)} failing ({shown}: redbeat list --state failing)")
        if self.failing_runs:
            shown = ", ".join(f"{name} x{count}" for name, count in self.failing_runs[:5])
            parts.append(f"{len(self.failing_runs)} whose latest runs failed ({shown}"
                         f"{', ...' if len(self.failing_runs) > 5 else ''}: redbeat show NAME)")
        return "; ".join(parts)


def _entries_needing_attention(app: Celery, state: Status) -> tuple[int, bool, tuple[str, ...]]:
    """How many entries are quarantined (and whether that is a lower bound), and which
    are failing. The status read already holds the first parked entries with their
    quarantine reasons: when it holds every parked entry, or found a quarantined one,
    that answers "does any entry need attention" at a constant cost; only when it
    found none and more entries are parked are those counted, inside Redis a window
    of members per round trip."""
    store = store_for(app)
    quarantined, partial = len(state.quarantined), state.parked > QUARANTINE_SAMPLE
    if partial and not quarantined:
        quarantined, partial = store.count_quarantined(), False
    summary = failing_summary(store.failure_rows(QUARANTINE_SAMPLE), ensure_conf(app).keys)
    return quarantined, partial, tuple(name for name, _ in summary.failing)


#: ``redbeat check``: an entry whose last this many runs failed needs attention.
FAILED_RUNS = 3


def check(app: Celery, host: str | None = None, pid: int | None = None,
          max_age: float | None = None, now: float | None = None,
          failed_runs: int = FAILED_RUNS) -> Health:
    """Healthy when a scheduler on ``host`` (this machine by default; ``pid`` narrows it)
    ticked within ``max_age`` seconds and is the lock holder, or a standby while another
    node holds a live lock and ticks too. A healthy answer also says which entries
    need attention (quarantined, failing, or whose last ``failed_runs`` runs failed as
    the workers reported them; 0: not asked). Ages are measured on Redis's clock (``now``
    overrides it), so neither the probe's host clock nor a beat's can skew them."""
    state = status(app, now=now, upcoming=0)
    now = state.server_time if now is None else now
    if state.evicting:  # no node can keep a schedule Redis deletes
        return Health(False, state.evicting)
    result = _beat_health(app, state, host or socket.gethostname(), pid, max_age, now)
    if not result.healthy:
        return result
    quarantined, at_least, failing = _entries_needing_attention(app, state)
    runs: tuple[tuple[str, int], ...] = ()
    if failed_runs > 0:
        keys = ensure_conf(app).keys
        runs = tuple(sorted(((keys.name_of(key), count) for key, count
                             in store_for(app).failing_runs(failed_runs)),
                            key=lambda item: -item[1]))
    return Health(True, result.reason, quarantined, failing, at_least, runs)


def _beat_health(app: Celery, state: Status, host: str, pid: int | None,
                 max_age: float | None, now: float) -> Health:
    config = ensure_conf(app)
    max_age = max_age if max_age is not None else config.poll_interval * 3 + 2
    mine = {
        node: beat for node, beat in state.nodes.items()
        if Holder.parse(node).host == host and (pid is None or Holder.parse(node).pid == pid)
    }
    if not mine:
        return Health(False, f"no scheduler heartbeat from {host}"
                             + (f" pid {pid}" if pid else ""))
    node, (role, at) = max(mine.items(), key=lambda item: item[1][1])
    why = stale(at, now, max_age)
    if why and state.refuses_writes and at <= now:
        # no node can write a heartbeat (nor take a free lock) while Redis refuses
        # writes: restarting this one cannot help, and it takes the lead when it can
        return Health(True, f"{Holder.parse(node)} {why}: {state.refuses_writes}")
    if why:
        return Health(False, f"{Holder.parse(node)} {why}")
    if not config.lock_key:
        return Health(True, f"{Holder.parse(node)} ticking (locking disabled)")
    if state.lock_holder == node:
        return Health(True, f"{Holder.parse(node)} leads; {expiry_words(state.lock_ttl_ms)}")
    if state.lock_holder and state.lock_ttl_ms == NO_EXPIRY:
        return Health(False, f"{Holder.parse(node)} stands by: {Holder.parse(state.lock_holder)}"
                             f" holds the lock and its {expiry_words(NO_EXPIRY)}")
    if (not state.lock_holder or state.lock_ttl_ms <= 0) and state.refuses_writes:
        return Health(True, f"{Holder.parse(node)} stands by; nobody can take the lock: "
                            f"{state.refuses_writes}")
    if not state.lock_holder or state.lock_ttl_ms <= 0:
        return Health(False, f"{Holder.parse(node)} stands by but nobody holds the lock")
    leader_beat = state.nodes.get(state.lock_holder)
    why = stale(leader_beat[1], now, max_age) if leader_beat is not None else None
    if why and not state.refuses_writes:  # a leader cannot beat either while it refuses
        return Health(False, f"leader {Holder.parse(state.lock_holder)} {why}")
    return Health(True, f"{Holder.parse(node)} stands by; "
                        f"{Holder.parse(state.lock_holder)} leads")

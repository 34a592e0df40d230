"""What Redis's memory state means for the schedule, read from ``INFO memory`` and
``INFO stats`` (pure): whether it refuses writes now (out of memory under
``noeviction``), and whether it deletes the schedule's keys (an ``allkeys-*`` policy
that has evicted). ``redbeat check`` and ``status`` judge from these, beat from the
evicted-keys count its leading tick reads (docs/deployments.md, "Eviction")."""

from __future__ import annotations

from typing import Any

#: maxmemory policies under which Redis deletes keys that have no expiry: any entry of
#: the schedule, or the schedule's sorted set itself.
EVICTING_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random")


def refusing_writes(memory: dict[str, Any]) -> str | None:
    """Why Redis refuses writes, from INFO memory: over its maxmemory under noeviction."""
    used, limit = int(memory.get("used_memory", 0)), int(memory.get("maxmemory", 0))
    if limit and used > limit and memory.get("maxmemory_policy") == "noeviction":
        return (f"Redis is out of memory ({used} of {limit} bytes, maxmemory-policy "
                "noeviction) and refuses writes")
    return None


def evicting(memory: dict[str, Any], stats: dict[str, Any]) -> str | None:
    """Why the schedule can vanish, from INFO memory and stats: an allkeys-* policy
    under which Redis has evicted keys."""
    policy, evicted = memory.get("maxmemory_policy"), int(stats.get("evicted_keys", 0))
    if policy in EVICTING_POLICIES and evicted:
        return (f"Redis has evicted {evicted} keys under maxmemory-policy {policy}: "
                "entries of the schedule, or the schedule itself, can vanish; use "
                "noeviction")
    return None

"""How many replicas a leader's writes must reach before its slots are sent (pure).

Redis replicates asynchronously: a failover (Sentinel's ``SENTINEL FAILOVER``, a master
that died) promotes a replica that may lack the last writes, and a master that is being
replaced keeps accepting writes until it is demoted, which are then thrown away. A slot
whose claim is thrown away that way is claimed again on the new master and sent a second
time under the same task id. So on a Redis that has replicas, the leader's tick and
commit are each followed, in the same round trip, by ``WAIT <replicas> <timeout>``, and
nothing is sent from a round trip that not every replica acknowledged: the slot stays
held where it was claimed, and is sent once its claim is known to survive, or claimed
again on the new master.

Every replica, not one: the failover promotes one replica, and until the sentinel points
the others at it, they still acknowledge the old master's writes, which they then drop
on resyncing. And the number waited for is the most replicas seen lately: a master
being replaced loses its replicas one by one. Only once fewer have been seen for
``REPLICA_GRACE`` seconds (longer than Sentinel takes to demote a replaced master: a
replica was removed, or is down) is the lower number waited for, with one log line;
meanwhile nothing is sent. A Redis without replicas is never waited for.
"""

from __future__ import annotations

from dataclasses import dataclass

#: How long a WAIT for one replica's acknowledgement lasts (milliseconds): a healthy
#: replica acknowledges within a few; a replica-less master being replaced never does.
WAIT_MS = 1000
#: Seconds without any replica after which commits are no longer waited for.
REPLICA_GRACE = 30.0


@dataclass
class ReplicaWatch:
    """How many replicas this node waits for (the caller reads the count and clock)."""

    #: replicas every write must reach before what it claimed is sent (0: none)
    expected: int = 0
    fewer_since: float | None = None

    def seen(self, connected: int | None, now: float) -> str | None:
        """Take the master's ``connected`` replica count read at ``now`` (monotonic
        seconds; None: not read); returns a line to log when the number waited for
        changes."""
        if connected is None:
            return None
        if connected >= self.expected:
            self.fewer_since = None
            if connected == self.expected:
                return None
            self.expected = connected
            return (f"Redis has {connected} replica(s): each tick and commit waits for "
                    "every one to acknowledge it before its slots are sent")
        if self.fewer_since is None:
            self.fewer_since = now
            return None
        if now - self.fewer_since < REPLICA_GRACE:
            return None
        self.expected, self.fewer_since = connected, None
        if connected:
            return (f"Redis has had {connected} replica(s) for {REPLICA_GRACE:.0f}s: "
                    "writes wait for those")
        return (f"Redis has had no replica for {REPLICA_GRACE:.0f}s: slots are sent "
                "without waiting for one (a failover now can lose the last commits)")

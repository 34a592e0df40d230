"""How many replicas a leader's writes wait for (replication.ReplicaWatch), as a table:
the most seen lately, lowered only after REPLICA_GRACE seconds with fewer."""

from __future__ import annotations

import pytest

from redbeat.replication import REPLICA_GRACE, ReplicaWatch


@pytest.mark.parametrize(("counts", "expected", "lines"), [
    ([(0, 0.0)], 0, 0),                                    # no replicas: never waited for
    ([(2, 0.0)], 2, 1),                                    # replicas found: said once
    ([(2, 0.0), (2, 1.0)], 2, 1),
    ([(2, 0.0), (1, 1.0), (0, 2.0)], 2, 1),                # a master being replaced
    ([(2, 0.0), (1, 1.0), (1, 1.0 + REPLICA_GRACE)], 1, 2),  # one gone for good
    ([(2, 0.0), (0, 1.0), (0, 1.0 + REPLICA_GRACE)], 0, 2),
    ([(2, 0.0), (0, 1.0), (2, 5.0), (0, 6.0), (0, 6.0 + REPLICA_GRACE - 1)], 2, 1),
    ([(1, 0.0), (3, 1.0)], 3, 2),                          # more: waited for at once
    ([(2, 0.0), (None, 100.0)], 2, 1),                     # not read: nothing changes
])
def test_the_replicas_waited_for(counts, expected, lines) -> None:
    watch = ReplicaWatch()
    said = [watch.seen(connected, now) for connected, now in counts]
    assert watch.expected == expected
    assert len([line for line in said if line]) == lines

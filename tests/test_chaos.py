"""Chaos: three beat nodes, the leader killed, terminated or frozen every few seconds,
and the broker down for a few seconds in the middle. At-least-once delivery must send
every slot of a 1-second entry, never under two ids, with every gap inside a window
where no node led."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from support.processes import LIVENESS, Cluster
from support.redis_server import RedisServer
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

LOCK_TIMEOUT = 3
DURATION = 45.0


def leader_of(nodes):
    """The node whose log last says it leads and that runs unfrozen."""
    best, best_count = None, 0
    for node in nodes:
        if node.process.poll() is None and not node.paused:
            count = node.log().count("Leading as")
            lost = node.log().count("Lost the lock")
            if count > lost and count >= best_count:
                best, best_count = node, count
    return best


def test_chaos(tmp_path, redis_server):
    rng = random.Random(20261122)
    with RedisServer(persistent=True) as broker:
        cluster = Cluster(tmp_path, redis_server.url, broker.url,
                          redbeat_lock_timeout=LOCK_TIMEOUT, broker_connection_timeout=1,
                          task_publish_retry=False)
        app = make_app(redis_server.url)
        RedBeatSchedulerEntry("every-second", "beatapp.record", 1.0, app=app).save()
        RedBeatSchedulerEntry("every-3s", "beatapp.record", 3.0, app=app).save()
        nodes = [cluster.beat(f"beat{i}") for i in range(3)]
        windows: list[tuple[float, float]] = []  # wall-clock spans with a disruption
        try:
            wait_until(lambda: leader_of(nodes) is not None, 120, "a first leader")
            started = time.time()
            broker_down_done = False
            serial = 3
            while time.time() - started < DURATION:
                time.sleep(rng.uniform(2.0, 4.0))
                leader = leader_of(nodes)
                if leader is None:
                    continue
                begin = time.time()
                if not broker_down_done and time.time() - started > DURATION / 2:
                    broker.stop()
                    time.sleep(3)
                    broker.start()
                    windows.append((begin, time.time() + 2))
                    broker_down_done = True
                    continue
                action = rng.choice(["kill", "term", "freeze"])
                if action == "freeze":
                    leader.freeze()
                    time.sleep(LOCK_TIMEOUT + 1.5)
                    leader.thaw()
                elif action == "kill":
                    leader.kill()
                else:
                    leader.terminate()
                if action != "freeze":
                    nodes.remove(leader)
                    nodes.append(cluster.beat(f"beat{serial}"))
                    serial += 1
                wait_until(lambda old=leader: leader_of(nodes) not in (None, old),
                           LIVENESS, "a new leader")
                windows.append((begin, time.time() + 1.5))
            time.sleep(3)  # let pending slots be re-sent
        finally:
            cluster.stop()
        ids = cluster.queued_task_ids()
        logs = "".join(p.log() for p in cluster.processes)
    counts = Counter(ids)
    every_second = sorted(int(i.split(":")[1]) for i in counts if i.startswith("every-second:"))
    grid_ok = all((b - a) % 1000 == 0 for a, b in zip(every_second, every_second[1:],
                                                       strict=False))
    gaps = [(a, b) for a, b in zip(every_second, every_second[1:], strict=False) if b - a > 1000]
    unexplained = [
        (a, b) for a, b in gaps
        if not any(start - 1.5 <= a / 1000 <= end + 1.5 or start - 1.5 <= b / 1000 <= end + 1.5
                   or (a / 1000 <= start and b / 1000 >= end) for start, end in windows)
    ]
    same_id_resends = sum(n - 1 for n in counts.values())
    print(f"\nchaos: {len(every_second)} every-second slots, {len(windows)} disruptions, "
          f"{len(gaps)} gaps (all inside takeover windows: {not unexplained}), "
          f"{same_id_resends} same-id duplicates, {logs.count('Re-sending slot')} re-sends logged")
    assert grid_ok, "a slot was sent under an id off its schedule grid"
    assert not unexplained, (unexplained, windows)
    assert len(every_second) >= DURATION * 0.6

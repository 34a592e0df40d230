"""Chaos: three beat nodes; the leader killed, terminated and frozen, and the broker down
for a few seconds, in a seeded order, each once a leader has sent a few slots of the
1-second entry since the last. At-least-once delivery must send every slot of that
entry, never under two ids, with every gap inside a window where no node led."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest
import redis

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from support.held import held_ids
from support.processes import LIVENESS, Cluster
from support.redis_server import RedisServer
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

LOCK_TIMEOUT = 3
PLAN = ("kill", "term", "freeze", "outage")
#: slots of the 1-second entry sent between two disruptions: a leader ran meanwhile
LEAD_SLOTS = 3


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


def every_second_slots(queue: redis.Redis) -> int:
    """Slots of the 1-second entry in the broker's queue (a re-send counted once)."""
    ids = {json.loads(raw)["headers"]["id"] for raw in queue.lrange("celery", 0, -1)}
    return sum(task_id.startswith("every-second:") for task_id in ids)


def lead(broker_url: str) -> None:
    """Return once LEAD_SLOTS more slots of the 1-second entry reached the broker."""
    queue = redis.Redis.from_url(broker_url)  # a new client: the broker may have restarted
    try:
        base = every_second_slots(queue)
        wait_until(lambda: every_second_slots(queue) >= base + LEAD_SLOTS, LIVENESS,
                   f"{LEAD_SLOTS} slots sent", interval=0.1)
    finally:
        queue.close()


def test_chaos(tmp_path, redis_server):
    rng = random.Random(20261122)
    with RedisServer(persistent=True) as broker:
        cluster = Cluster(tmp_path, redis_server.url, broker.url,
                          redbeat_lock_timeout=LOCK_TIMEOUT, broker_connection_timeout=1,
                          task_publish_retry=False)
        app = make_app(redis_server.url)
        client = redis_server.client()
        RedBeatSchedulerEntry("every-second", "beatapp.record", 1.0, app=app).save()
        RedBeatSchedulerEntry("every-3s", "beatapp.record", 3.0, app=app).save()
        nodes = [cluster.beat(f"beat{i}") for i in range(3)]
        windows: list[tuple[float, float]] = []  # wall-clock spans with a disruption
        try:
            wait_until(lambda: leader_of(nodes) is not None, LIVENESS, "a first leader")
            plan = list(PLAN)
            rng.shuffle(plan)
            serial = 3
            for action in plan:
                lead(broker.url)
                wait_until(lambda: leader_of(nodes) is not None, LIVENESS, "a leader")
                leader = leader_of(nodes)
                begin = time.time()
                if action == "outage":
                    broker.stop()
                    time.sleep(3)
                    broker.start()
                    windows.append((begin, time.time() + 2))
                    continue
                if action == "freeze":
                    leader.freeze()
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
                if action == "freeze":
                    # thawed once a standby leads (before, a loaded machine's standby may
                    # not have asked for the expired lock yet, and the frozen one takes it
                    # back), and frozen past its lock whatever the takeover took
                    time.sleep(max(0.0, begin + LOCK_TIMEOUT + 1.5 - time.time()))
                    leader.thaw()
                windows.append((begin, time.time() + 1.5))
            lead(broker.url)
            until = time.time()
            # the slots held over a disruption are re-sent
            wait_until(lambda: not [i for i in held_ids(client) if i.startswith("every-second:")
                                    and int(i.split(":")[1]) <= until * 1000],
                       LIVENESS, "the held slots re-sent")
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

"""Sentinel planned failover during 1,000-entry bursts (issue 22, item 3): a master,
two replicas and a sentinel started here, a real ``celery beat`` on the Sentinel URL,
and every slot's task id counted in the broker's queue, which is what a consumer
receives. ``SENTINEL FAILOVER`` leaves the old master writable until the sentinel
demotes it; commits made there meanwhile are thrown away. The leader waits (WAIT) for a
replica to acknowledge each tick and commit before sending, so such a commit is never
published: no slot is sent twice, and none is lost (the entries catch up)."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.keys import KeyLayout
from redbeat.policy import EntryPolicy
from redbeat.runtime import store_for
from redbeat.settings import ensure_conf
from support.deployments import SentinelDeployment, require_programs
from support.processes import CeleryProcess, Cluster
from support.redis_server import RedisServer

pytestmark = pytest.mark.e2e

ENTRIES = 1000
EVERY = 5  # seconds between bursts


def sentinel_settings(deployment: SentinelDeployment) -> dict[str, object]:
    return {"redbeat_redis_url": "redis-sentinel://127.0.0.1/0",
            "redbeat_redis_options": {"sentinels": [["127.0.0.1", deployment.sentinel_port]],
                                      "service_name": deployment.service,
                                      "retry_period": 60, "socket_timeout": 5}}


def queued(broker: RedisServer) -> list[str]:
    client = broker.client()
    return [json.loads(raw)["headers"]["id"] for raw in client.lrange("celery", 0, -1)]


def queue_length(broker: RedisServer) -> int:
    """How many messages :func:`queued` would read (what the waits poll: reading and
    parsing every message, thousands of them, five times a second cost the test process
    more CPU than beat's sends)."""
    return int(broker.client().llen("celery"))


def hold_still_between_bursts(beat: CeleryProcess, deployment: SentinelDeployment,
                              keys: KeyLayout) -> None:
    """Freeze beat (SIGSTOP) at a moment when every slot it claimed is confirmed (none
    pending on the master). A burst sent just as the failover promotes a replica is
    at-least-once's own window (its confirmation goes to the old master and is lost, so
    the new master re-sends it: docs/deployments.md); the failover's fencing is proved on
    the bursts after it, whose claims the old master takes. Waiting for a natural gap
    between bursts failed on a loaded machine (beat still catching up after two
    minutes); a frozen beat makes the gap, and keeps its connections to the old master."""
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, "beat never stood with nothing pending"
        beat.freeze()
        master = deployment.node_at(deployment.master_port())
        if master.probe(lambda client: client.zcard(keys.pending)) == 0:
            return
        beat.thaw()
        time.sleep(0.1)


def test_a_planned_failover_during_bursts_sends_no_slot_twice(tmp_path: Path) -> None:
    require_programs("redis-server")  # the sentinel is redis-server --sentinel
    deployment = SentinelDeployment(replicas=2).start()
    broker = RedisServer().start()
    cluster = None
    try:
        settings = sentinel_settings(deployment)
        app = make_app(str(settings["redbeat_redis_url"]),
                       redbeat_redis_options=settings["redbeat_redis_options"])
        policy = EntryPolicy(coalesce=False, max_catch_up=20)  # late, never skipped
        # saved as save() saves each, in batches (save_request is what save writes)
        store_for(app).save_many([
            RedBeatSchedulerEntry(f"burst-{number:04d}", "beatapp.record", float(EVERY),
                                  app=app, policy=policy).save_request()
            for number in range(ENTRIES)])
        cluster = Cluster(tmp_path, broker.url, broker.url, beat_max_loop_interval=1,
                          redbeat_lock_timeout=10, **settings)
        beat = cluster.beat("beat")
        deadline = time.monotonic() + 120
        while queue_length(broker) < ENTRIES:  # the first burst sent: beat leads and ticks
            assert time.monotonic() < deadline, beat.log()[-3000:]
            time.sleep(0.2)
        hold_still_between_bursts(beat, deployment, ensure_conf(app).keys)
        took = deployment.force_failover()
        beat.thaw()
        print(f"failover took {took:.2f}s")
        # The old master stays writable some 10 s (until the sentinel demotes it): the
        # bursts beat commits there meanwhile are held, then caught up on the new master.
        # Three bursts' worth after the failover is the held ones and at least one after
        # them, so a held slot that were lost would show as a gap in its entry's slots.
        wanted = queue_length(broker) + 3 * ENTRIES
        deadline = time.monotonic() + 120
        while queue_length(broker) < wanted:
            assert time.monotonic() < deadline, beat.log()[-3000:]
            time.sleep(0.2)
        assert beat.terminate() == 0
    finally:
        if cluster is not None:
            cluster.stop()
        ids = queued(broker)
        broker.cleanup()
        deployment.stop()
    counts = Counter(ids)
    twice = sum(count - 1 for count in counts.values())
    slots: dict[str, list[int]] = defaultdict(list)
    for task_id in counts:
        name, _, due = task_id.rpartition(":")
        slots[name].append(int(due))
    missing = sum(len(range(min(dues), max(dues), EVERY * 1000)) + 1 - len(dues)
                  for dues in slots.values())
    print(json.dumps({"messages": len(ids), "distinct": len(counts), "twice": twice,
                      "missing": missing, "entries": len(slots)}))
    assert len(slots) == ENTRIES
    assert (twice, missing) == (0, 0)

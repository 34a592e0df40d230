"""The schedule's Redis out of memory (issue 22, item 7), with real beat processes and
a real worker: under ``noeviction`` a standby says so once, keeps answering
``redbeat check`` as healthy, and takes the lead as soon as Redis accepts writes again
(one line when the refusal starts, one when it ends); under ``allkeys-lru`` every
eviction the leader sees is logged as an error and ``redbeat check`` fails while the
policy evicts. The pure rules are tables."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.memory_policy import evicting, refusing_writes
from support.processes import Cluster
from support.redis_server import RedisServer
from support.waiting import wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("memory", "refused"), [
    ({"used_memory": 2000, "maxmemory": 1000, "maxmemory_policy": "noeviction"}, True),
    ({"used_memory": 900, "maxmemory": 1000, "maxmemory_policy": "noeviction"}, False),
    ({"used_memory": 2000, "maxmemory": 0, "maxmemory_policy": "noeviction"}, False),
    ({"used_memory": 2000, "maxmemory": 1000, "maxmemory_policy": "allkeys-lru"}, False),
    ({}, False),
])
def test_when_redis_refuses_writes(memory, refused) -> None:
    assert (refusing_writes(memory) is not None) == refused


@pytest.mark.parametrize(("policy", "evicted", "said"), [
    ("allkeys-lru", 3, True), ("allkeys-lfu", 1, True), ("allkeys-random", 1, True),
    ("allkeys-lru", 0, False), ("volatile-lru", 5, False), ("noeviction", 0, False),
])
def test_when_the_schedule_can_vanish(policy, evicted, said) -> None:
    found = evicting({"maxmemory_policy": policy}, {"evicted_keys": evicted})
    assert (found is not None) == said


def check(url: str, pid: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "redbeat", "--url", url, "check",
                           "--pid", str(pid)], capture_output=True, text=True, timeout=60)


def errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if "ERROR/" in line]


def test_a_standby_under_noeviction_oom_stays_healthy_and_takes_over(
        tmp_path: Path, redis_server: RedisServer) -> None:
    url = redis_server.url
    client = redis_server.client()
    cluster = Cluster(tmp_path, url, url[:-1] + "1", beat_max_loop_interval=1,
                      redbeat_lock_timeout=3)
    RedBeatSchedulerEntry("every-second", "beatapp.record", 1.0, args=["tick"],
                          app=make_app(url)).save()
    try:
        cluster.worker()
        leader = cluster.beat("leader")
        leader.wait_for("Sending due task every-second", count=2)
        standby = cluster.beat("standby")
        standby.wait_for("Standing by")
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "1")  # every write refused from now on
        time.sleep(8)  # past max_age (3 polls + 2 s): no heartbeat written meanwhile
        during = check(url, standby.pid)
        leader.kill()  # the lock expires; the standby cannot take it while Redis refuses
        time.sleep(5)
        assert "Leading as" not in standby.log()
        still = check(url, standby.pid)
        errors_during = errors(standby.log())
        client.config_set("maxmemory", "0")
        standby.wait_for("Leading as")
        standby.wait_for("Sending due task every-second", count=2)
    finally:
        client.config_set("maxmemory", "0")
        cluster.stop()
    assert during.returncode == 0, during.stdout + during.stderr
    assert still.returncode == 0, still.stdout + still.stderr
    assert "refuses writes" in during.stdout
    assert len(errors_during) == 1 and "refuses this node's writes" in errors_during[0], \
        errors_during
    assert "Redis accepts writes again" in standby.log()
    ids = Counter(run["id"] for run in cluster.executions())
    assert ids and max(ids.values()) == 1, ids


def test_eviction_under_allkeys_is_logged_each_time_and_fails_the_check(
        tmp_path: Path, redis_server: RedisServer) -> None:
    url = redis_server.url
    client = redis_server.client()
    client.config_set("maxmemory-policy", "allkeys-lru")
    cluster = Cluster(tmp_path, url, url[:-1] + "1", beat_max_loop_interval=1)
    app = make_app(url)
    for number in range(50):
        RedBeatSchedulerEntry(f"hourly-{number}", "beatapp.record", 3600.0,
                              args=["x" * 500], app=app).save()
    try:
        leader = cluster.beat("leader")
        leader.wait_for("Leading as")
        healthy = check(url, leader.pid)
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", str(used + 200_000))
        for round_ in range(2):  # two waves of evictions, a few ticks apart
            for number in range(600):
                client.set(f"filler:{round_}:{number}", "y" * 1000)
            wait_until(lambda r=round_: len([line for line in errors(leader.log())
                                             if "evicted" in line]) >= r + 1,
                       30, f"eviction wave {round_ + 1} logged")
            time.sleep(2)
        evicting_check = check(url, leader.pid)
    finally:
        client.config_set("maxmemory", "0")
        client.config_set("maxmemory-policy", "noeviction")
        cluster.stop()
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert evicting_check.returncode == 1, evicting_check.stdout
    assert "evicted" in evicting_check.stdout and "allkeys-lru" in evicting_check.stdout
    logged = [line for line in errors(leader.log()) if "evicted" in line]
    assert len(logged) >= 2, leader.log()

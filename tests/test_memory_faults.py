"""The schedule's Redis out of memory (issue 22, item 7), with real beat processes (what
they send counted in the broker's queue): under ``noeviction`` a standby says so once,
keeps answering ``redbeat check`` as healthy, and takes the lead as soon as Redis accepts
writes again (one line when the refusal starts, one when it ends); under ``allkeys-lru`` every
eviction the leader sees is logged as an error and ``redbeat check`` fails while the
policy evicts. The pure rules are tables."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from redis import Redis

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.cli import main
from redbeat.memory_policy import evicting, refusing_writes
from support.processes import LIVENESS, Cluster
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


def check(url: str, pid: int, *options: str) -> Result:
    """``redbeat check --pid`` in this process (the command's logic is the point here)."""
    return CliRunner().invoke(main, ["--url", url, "check", "--pid", str(pid), *options],
                              prog_name="redbeat")


def refused_lock_takes(client: Redis) -> int:
    """How many times Redis refused a SET (out of memory). Once the leader is gone the
    only SETs are a standby's tick script taking a free lock (no worker runs: its broker
    client sets a mutex now and then; the messages are counted in the queue instead)."""
    return int(client.info("commandstats").get("cmdstat_set", {}).get("rejected_calls", 0))


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
        leader = cluster.beat("leader")
        leader.wait_for("Leading as")
        standby = cluster.beat("standby")  # starts while the leader sends
        leader.wait_for("Sending due task every-second", count=2)
        standby.wait_for("Standing by")
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "1")  # every write refused from now on
        # no heartbeat is written meanwhile: asked until the standby's is older than
        # --max-age (2 s, not the default 3 polls + 2 s: the same rule, less waiting), the
        # check says why it is still healthy
        wait_until(lambda: "last ticked" in check(url, standby.pid, "--max-age", "2").stdout,
                   LIVENESS, "the standby's heartbeat to be older than max_age")
        during = check(url, standby.pid, "--max-age", "2")
        leader.kill()  # the lock expires; the standby cannot take it while Redis refuses
        wait_until(lambda: not client.exists("redbeat::lock"), LIVENESS,
                   "the killed leader's lock to expire")
        # two of the standby's ticks found the lock free and were refused taking it
        refused = refused_lock_takes(client)  # the leader's refused SETs before it died
        wait_until(lambda: refused_lock_takes(client) >= refused + 2, LIVENESS,
                   "the standby to try the free lock twice")
        assert "Leading as" not in standby.log()
        still = check(url, standby.pid)
        errors_during = errors(standby.log())
        client.config_set("maxmemory", "0")
        standby.wait_for("Leading as")
        standby.wait_for("Sending due task every-second", count=2)
    finally:
        client.config_set("maxmemory", "0")
        cluster.stop()
    assert during.exit_code == 0, during.output
    assert still.exit_code == 0, still.output
    assert "refuses writes" in during.stdout
    assert len(errors_during) == 1 and "refuses this node's writes" in errors_during[0], \
        errors_during
    assert "Redis accepts writes again" in standby.log()
    ids = Counter(cluster.queued_task_ids())  # what a worker would receive
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
            # each wave is filled after the previous one was logged: a later tick's
            wait_until(lambda r=round_: len([line for line in errors(leader.log())
                                             if "evicted" in line]) >= r + 1,
                       LIVENESS, f"eviction wave {round_ + 1} logged")
        evicting_check = check(url, leader.pid)
    finally:
        client.config_set("maxmemory", "0")
        client.config_set("maxmemory-policy", "noeviction")
        cluster.stop()
    assert healthy.exit_code == 0, healthy.output
    assert evicting_check.exit_code == 1, evicting_check.output
    assert "evicted" in evicting_check.stdout and "allkeys-lru" in evicting_check.stdout
    logged = [line for line in errors(leader.log()) if "evicted" in line]
    assert len(logged) >= 2, leader.log()

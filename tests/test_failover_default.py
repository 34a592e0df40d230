"""The failover a user gets without configuring the lock: two real ``celery beat``
processes started with ``--max-interval 10`` and no ``redbeat_lock_timeout``. The lease
is 5 poll intervals (5 s) whatever the loop interval says (celery-redbeat 2.4.2 made it
5 x max interval, here 50 s), so a SIGKILLed leader is replaced within seconds."""

from __future__ import annotations

import re
import signal
import time

import pytest
import redis

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from support.processes import CeleryProcess, Cluster
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

MAX_INTERVAL = 10
DEFAULT_LEASE = 5.0
LOCK_KEY = "redbeat::lock"


class MaxIntervalCluster(Cluster):
    """Beats started with ``--max-interval`` on the command line."""

    def beat(self, name: str, max_interval: int = MAX_INTERVAL, **settings) -> CeleryProcess:
        args = ["beat", "-S", "redbeat.RedBeatScheduler", "-l", "info",
                "--max-interval", str(max_interval),
                "-s", str(self.directory / f"{name}-schedule")]
        return self._start(name, args, settings)


@pytest.fixture
def cluster(tmp_path, redis_server):
    running = MaxIntervalCluster(tmp_path, redis_server.url, redis_server.url[:-1] + "1")
    assert not any("lock" in name for name in running.conf), running.conf  # nothing forced
    RedBeatSchedulerEntry("every-second", "beatapp.record", 1.0, args=["tick"],
                          app=make_app(redis_server.url)).save()
    yield running
    running.stop()


def banner_lock_seconds(log: str) -> float:
    match = re.search(r"\. lock -> `([^`]+)` .*\(([\d.]+)s\)", log)
    assert match, log
    assert match.group(1) == LOCK_KEY
    return float(match.group(2))


def test_a_killed_leader_is_replaced_within_seconds_without_a_lock_setting(cluster):
    first = cluster.beat("beat0")
    first.wait_for("Leading as")
    second = cluster.beat("beat1")
    second.wait_for("Standing by")
    for node in (first, second):
        log = node.log()
        assert re.search(r"maxinterval -> 10\.00 seconds \(10s\)", log), log
        assert banner_lock_seconds(log) == DEFAULT_LEASE
        assert "5.00 seconds (5.0s)" in log
    client = redis.Redis.from_url(cluster.redis_url, decode_responses=True)
    assert 0 < client.pttl(LOCK_KEY) <= DEFAULT_LEASE * 1000
    first.wait_for("Sending due task every-second", count=2)

    killed_at = time.monotonic()
    first.signal(signal.SIGKILL)
    first.process.wait(10)
    assert client.exists(LOCK_KEY)  # a killed leader releases nothing: the lease runs out
    took = second.wait_for("Leading as") - killed_at
    print(f"\ntakeover after SIGKILL with no lock setting (--max-interval {MAX_INTERVAL}): "
          f"{took:.2f}s (lease {DEFAULT_LEASE:g}s)")
    # bounded by the lease (its TTL was checked above to be at most DEFAULT_LEASE, not
    # 2.4.2's 25 minutes); the wall-clock bound is liveness on a loaded machine
    assert took > 1  # the lease had to run out: nobody released it
    holder = client.get(LOCK_KEY)
    assert holder is not None and holder.split(":")[1] == str(second.pid)
    count = second.log().count("Sending due task every-second")
    second.wait_for("Sending due task every-second", count=count + 2)
    wait_until(lambda: client.pttl(LOCK_KEY) > 3000, 60, "the new leader renewing its lease")

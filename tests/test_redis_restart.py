"""Redis restarted under a running leader: beat survives, re-checks the lock,
continues, and no entry is lost (the server keeps an append-only file)."""

from __future__ import annotations

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from support.processes import Cluster
from support.redis_server import RedisServer

pytestmark = pytest.mark.e2e


def test_beat_rides_out_a_redis_restart(tmp_path, redis_server):
    with RedisServer(persistent=True) as schedule_redis:
        app = make_app(schedule_redis.url)
        for i in range(20):
            RedBeatSchedulerEntry(f"job{i}", "beatapp.record", 3600.0, app=app).save()
        RedBeatSchedulerEntry("every-second", "beatapp.record", 1.0, app=app).save()
        cluster = Cluster(tmp_path, schedule_redis.url, redis_server.url,
                          redbeat_lock_timeout=10)
        beat = cluster.beat("beat")
        try:
            beat.wait_for("Sending due task every-second", count=2)
            schedule_redis.stop()
            beat.wait_for("Redis unavailable")  # down for as long as beat needs to see it
            schedule_redis.start()
            before = beat.log().count("Sending due task every-second")
            beat.wait_for("Sending due task every-second", count=before + 2)
            assert beat.process.poll() is None
            client = schedule_redis.client()
            members = set(client.zrange("redbeat::schedule", 0, -1))
            assert {f"redbeat:job{i}" for i in range(20)} | {"redbeat:every-second"} <= members
            assert all(client.exists(f"redbeat:job{i}") for i in range(20))
            holder = client.get("redbeat::lock")
            assert holder and holder.split(":")[1] == str(beat.pid)  # it leads again
        finally:
            cluster.stop()

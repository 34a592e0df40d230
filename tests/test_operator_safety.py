"""What an operator sees and relies on: no secret in a log line or error, dead nodes
leave the heartbeat hash, the eviction check runs when Redis first answers, and
``check`` has one failure code."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from conftest import make_app
from redbeat import RedBeatScheduler
from redbeat.connection import RedisConfigError, build_client
from redbeat.redaction import redact
from redbeat.schedulers import get_redis
from redbeat.settings import RedBeatConfig
from support.redis_server import RedisServer, free_port


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
    ("redis://user:pw@h", "redis://user:***@h"),
    ("sentinel://:p1@h1:26379;sentinel://:p2@h2:26379",
     "sentinel://:***@h1:26379;sentinel://:***@h2:26379"),
    ("mongodb://user:secret@db/x", "mongodb://user:***@db/x"),
    ("redis://:p@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
    ("redis://h:1/0", "redis://h:1/0"),
])
def test_redact_hides_every_password(url, shown):
    assert redact(url) == shown


def test_an_unsupported_url_is_reported_without_its_password():
    with pytest.raises(RedisConfigError) as error:
        build_client(RedBeatConfig(redis_url="mongodb://admin:hunter2@db:27017/x"))
    assert "hunter2" not in str(error.value)


def test_heartbeats_of_dead_nodes_are_forgotten_by_the_leader(redis_server):
    app = make_app(redis_server.url)
    client = get_redis(app)
    client.zadd("redbeat::nodes", {"dead:1:a": -1000, "junk": float("inf")})
    scheduler = RedBeatScheduler(app)
    scheduler.tick()  # takes the lock, sweeps once
    nodes = dict(client.zrange("redbeat::nodes", 0, -1, withscores=True))
    assert "dead:1:a" not in nodes and "junk" not in nodes
    assert scheduler.node_id in nodes
    scheduler.close()


def test_eviction_check_runs_when_redis_first_answers(caplog):
    port = free_port()
    app = make_app(f"redis://127.0.0.1:{port}/0",
                   redbeat_redis_options={"retry_period": 0})
    caplog.set_level(logging.INFO, logger="celery.beat")
    scheduler = RedBeatScheduler(app)  # Redis not started yet: start-up check fails
    assert "unreachable at start" in caplog.text
    with RedisServer(port=port, extra_args=["--maxmemory-policy", "allkeys-lru"]):
        scheduler.tick()
        assert "Redis is back" in caplog.text
        assert "maxmemory-policy is allkeys-lru" in caplog.text
        scheduler.close()


def test_check_says_unhealthy_with_exit_1_when_redis_is_down():
    url = f"redis://127.0.0.1:{free_port()}/0"
    run = subprocess.run([sys.executable, "-m", "redbeat", "--url", url, "--timeout", "1",
                          "check"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "unhealthy" in run.stdout

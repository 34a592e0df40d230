"""Data other processes write (heartbeats, the lock's value) is read defensively: one
bad field is ignored, never an error of ``redbeat check``, ``redbeat status``, beat's
/metrics or the web view's Nodes page (issue 22, item 4).

The real-process test runs two beat nodes and writes a garbage heartbeat next to
theirs; the table gives each reader hostile values one at a time."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from conftest import make_app
from redbeat import manage
from redbeat.cli import main
from redbeat.health import check
from redbeat.heartbeat import Heartbeat
from redbeat.settings import ensure_conf
from support.processes import LIVENESS, Cluster
from support.redis_server import RedisServer, free_port
from support.waiting import wait_until
from support.web import fetch

#: Heartbeat texts that do not read as one (the shape the nodes key is read as).
HOSTILE_BEATS = [
    "standby not-a-time", "", "leader", "leader ", " 12", "leader nan", "leader inf",
    "leader -inf", "leader 1e400", "leader 12 13", "leader\udcff 5", "x" * 100_000,
    "leader 0x10", "standby -5",
]


@pytest.mark.parametrize("value", HOSTILE_BEATS)
def test_a_heartbeat_that_cannot_be_read_is_no_heartbeat(value: str) -> None:
    assert Heartbeat.parse(value) is None


@pytest.mark.parametrize(("value", "role", "at"), [
    ("leader 1700000000.25", "leader", 1700000000.25),
    ("standby 1700000000", "standby", 1700000000.0),
    ("leader 1.7e9", "leader", 1.7e9),
])
def test_a_heartbeat_reads_as_role_and_time(value: str, role: str, at: float) -> None:
    assert Heartbeat.parse(value) == Heartbeat(role, at)


def _run(url: str, *args: str) -> Result:
    """The ``redbeat`` command, in this process (click's runner)."""
    return CliRunner().invoke(main, ["--url", url, *args])


#: Scores another process (or an operator's ZADD) can leave in the nodes sorted set that
#: are no time: a standby's is negative, so neither sign of these reads as a tick.
HOSTILE_SCORES = [0.0, float("inf"), float("-inf"), -0.0]


@pytest.mark.parametrize("score", HOSTILE_SCORES)
def test_every_reader_ignores_a_hostile_heartbeat(redis_server: RedisServer,
                                                  score: float) -> None:
    app = make_app(redis_server.url)
    keys = ensure_conf(app).keys
    client = redis_server.client(encoding_errors="surrogateescape")
    now = time.time()
    client.zadd(keys.nodes, {"good:1:aa": now, "bad:2:bb": score})
    client.set(keys.lock, "good:1:aa", px=30_000)
    state = manage.status(app, now=now)
    assert set(state.nodes) == {"good:1:aa"}
    assert check(app, host="good", now=now).healthy
    assert not check(app, host="bad", now=now).healthy


@pytest.mark.parametrize("value", ["\udcff\udcfe", ":::", "a:b:c:d", "host:-1:x", "x" * 10_000])
def test_a_lock_value_of_any_text_is_read(redis_server: RedisServer, value: str) -> None:
    app = make_app(redis_server.url)
    keys = ensure_conf(app).keys
    client = redis_server.client(encoding_errors="surrogateescape")
    client.set(keys.lock, value, px=30_000)
    client.zadd(keys.nodes, {"me:1:aa": -time.time()})  # a standby's
    state = manage.status(app)
    assert state.lock_holder == value
    # a lock held by a token without heartbeat is celery-redbeat 2.4.2's: the standby is
    # healthy, and the reason prints whatever the token holds
    health = check(app, host="me")
    assert health.healthy and health.reason.encode()


def test_a_garbage_heartbeat_while_two_nodes_run(tmp_path: Path,
                                                 redis_server: RedisServer) -> None:
    """``redbeat check`` on both nodes, ``redbeat status``, beat's /metrics and the web
    Nodes page all answer while ``x`` holds "standby not-a-time". The beats are real
    processes; the command and the web view read Redis from this one."""
    url = redis_server.url
    metrics_port = free_port()
    cluster = Cluster(tmp_path, url, url.replace("/0", "/1"), beat_max_loop_interval=1,
                      redbeat_lock_timeout=5)
    try:
        first = cluster.beat("first", redbeat_metrics_port=metrics_port)
        second = cluster.beat("second")
        app = make_app(url)
        keys = ensure_conf(app).keys
        client = redis_server.client()
        pids = {str(first.pid), str(second.pid)}
        wait_until(lambda: {node.split(":")[-2] for node in client.zrange(keys.nodes, 0, -1)}
                   == pids, LIVENESS, "both nodes' heartbeats")
        client.zadd(keys.nodes, {"x": float("-inf")})
        for process in (first, second):
            run = _run(url, "check", "--pid", str(process.pid))
            assert run.exit_code == 0, run.output
        run = _run(url, "status")
        assert run.exit_code == 0, run.output
        def metrics() -> tuple[int, str]:
            return fetch(f"http://127.0.0.1:{metrics_port}/metrics")

        wait_until(metrics, LIVENESS, "beat's /metrics listening", ignoring=(OSError,))
        status, body = metrics()
        assert status == 200 and "redbeat_schedule_up 1.0" in body, body
        assert "redbeat_entries{" in body
        from redbeat.web import create_app

        page = create_app(app).test_client().get("/nodes", headers={"Host": "127.0.0.1"})
        body = page.get_data(as_text=True)
        assert page.status_code == 200, body
        assert str(first.pid) in body and str(second.pid) in body
    finally:
        cluster.stop()


def test_heartbeat_time_must_be_finite() -> None:
    assert all(Heartbeat.parse(f"leader {value}") is None
               for value in (math.nan, math.inf, -math.inf))


@pytest.mark.parametrize("text", [
    "[]", "{}", "null", '{"start": "nan", "width": 60, "counts": [1]}',
    '{"start": 1e400, "width": 60, "counts": [1]}',
    '{"start": 1700000000, "width": 0, "counts": [1]}',
    '{"start": 1700000000, "width": 60, "counts": "abc"}',
    '{"start": 1700000000, "width": 60, "counts": [1e400], "computed_at": 1, "expanded": 1,'
    ' "counted_once": 0, "capped": 0, "unreadable": 0, "seconds": 0}',
    "[" * 100_000, "\udcff",
])
def test_a_cached_timeline_another_process_left_is_computed_again(
        redis_server: RedisServer, text: str) -> None:
    from redbeat.web import create_app

    app = make_app(redis_server.url)
    keys = ensure_conf(app).keys
    redis_server.client(encoding_errors="surrogateescape").set(keys.view_timeline, text,
                                                              px=30_000)
    page = create_app(app).test_client().get("/timeline", headers={"Host": "127.0.0.1"})
    assert page.status_code == 200


@pytest.mark.parametrize(("lock", "node"), [
    ("\udcff\udcfe", "me:1:aa"), ("<script>", "me:1:aa"), ("me:1:aa", "\udcffhost:1:aa"),
])
def test_the_nodes_page_shows_what_it_can_read(redis_server: RedisServer, lock: str,
                                               node: str) -> None:
    from redbeat.web import create_app

    app = make_app(redis_server.url)
    keys = ensure_conf(app).keys
    client = redis_server.client(encoding_errors="surrogateescape")
    client.set(keys.lock, lock, px=30_000)
    client.zadd(keys.nodes, {node: time.time(), "other:2:bb": -time.time()})
    page = create_app(app).test_client().get("/nodes", headers={"Host": "127.0.0.1"})
    assert page.status_code == 200
    assert "other pid 2" in page.get_data(as_text=True)
    assert "<script>" not in page.get_data(as_text=True)

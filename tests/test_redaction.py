"""No secret of a URL is shown anywhere (issue 22, item 5): every form a Redis password
takes in a URL, then every place redbeat shows a URL, with real processes: beat's banner
and logs (the schedule's URL, the broker URL it falls back to), its /metrics, the web
view's Nodes page and error page, the CLI's errors and its check."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from redbeat.cli import main
from redbeat.redaction import redact
from support.processes import LIVENESS, Cluster
from support.redis_server import RedisServer, free_port
from support.web import WebServer, fetch

SECRET = "s3cr3t-Pw"


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://h/0?password=pw", "redis://h/0?password=***"),
    ("unix:///run/redis.sock?password=pw&db=2", "unix:///run/redis.sock?password=***&db=2"),
    ("rediss://h:6380/0?ssl_cert_reqs=none&password=pw",
     "rediss://h:6380/0?ssl_cert_reqs=none&password=***"),
    ("redis://h/0?username=u&password=pw", "redis://h/0?username=u&password=***"),
    ("redis-sentinel://:p1@h1:26379/0;redis-sentinel://h2:26379/0?sentinel_password=p2",
     "redis-sentinel://:***@h1:26379/0;redis-sentinel://h2:26379/0?sentinel_password=***"),
    ("redis://h/0?backend=redis%3A%2F%2F%3Apw%40h2%2F1",
     "redis://h/0?backend=redis://:***@h2/1"),
    ("redis://h/0?backend=redis://:pw@h2/1", "redis://h/0?backend=redis://:***@h2/1"),
    ("redis://u:p/w@h/0", "redis://u:***@h/0"),
    ("redis://u:p@w@h/0?db=1", "redis://u:***@h/0?db=1"),
    ("redis://pw@h", "redis://***@h"),
    ("redis://h/0?password=p&w", "redis://h/0?***"),  # cannot be taken apart: all hidden
    ("redis://h/0?token=pw&client_secret=pw", "redis://h/0?token=***&client_secret=***"),
    ("Error connecting to redis://:pw@h:1/0 (refused)",
     "Error connecting to redis://:***@h:1/0 (refused)"),
    ("redis://h:1/0?db=3", "redis://h:1/0?db=3"),
    ("no url here: a@b", "no url here: a@b"),
])
def test_redact_hides_every_form_of_secret(url: str, shown: str) -> None:
    assert redact(url) == shown


def _redbeat(*args: str) -> Result:
    """The standalone ``redbeat`` command in this process: what it prints is the point,
    not its start-up."""
    return CliRunner().invoke(main, list(args), prog_name="redbeat")


def test_no_place_shows_the_password(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every place a URL appears, each with the password in the URL's query (and the
    broker's in its userinfo), against a Redis that requires it. The beats and web views
    start together, then each is waited for."""
    shown: dict[str, str] = {}
    with RedisServer() as server:
        server.client().config_set("requirepass", SECRET)
        query_url = f"redis://127.0.0.1:{server.port}/0?password={SECRET}"
        broker = f"redis://:{SECRET}@127.0.0.1:{server.port}/1"
        dead = f"redis://127.0.0.1:{free_port()}/0?password={SECRET}"
        metrics_port = free_port()
        cluster = Cluster(tmp_path, query_url, broker, beat_max_loop_interval=1)
        web = dead_web = None
        try:
            leader = cluster.beat("leader", redbeat_metrics_port=metrics_port)
            # no redbeat_redis_url: the schedule is the broker's Redis (its banner line)
            fallback = cluster.beat("fallback", redbeat_redis_url=None)
            # it says "unreachable at start" once its retries at start are over: 1 s of them
            unreachable = cluster.beat("unreachable", redbeat_redis_url=dead,
                                       redbeat_redis_options={"retry_period": 1})
            web = WebServer(query_url, directory=tmp_path)
            dead_web = WebServer(dead, directory=tmp_path)
            leader.wait_for("Leading as")
            fallback.wait_for("Leading as")
            unreachable.wait_for("unreachable at start")
            for process in (leader, fallback, unreachable):
                shown[f"beat log {process.name}"] = process.log()
            assert "password=***" in shown["beat log leader"]  # the banner's redis line
            shown["beat /metrics"] = fetch(f"http://127.0.0.1:{metrics_port}/metrics")[1]
            web.wait_ready(LIVENESS)
            status, shown["web /nodes"] = fetch(web.url + "/nodes")
            assert status == 200 and "password=***" in shown["web /nodes"]
            dead_web.wait_ready(LIVENESS)
            status, shown["web /nodes, Redis unreachable"] = fetch(dead_web.url + "/nodes")
            assert status == 503
            for command in (["status"], ["check"], ["list"]):
                run = _redbeat("--url", dead, "--timeout", "1", *command)
                assert run.exit_code != 0
                shown[f"redbeat {command[0]}, Redis unreachable"] = run.output
            run = _redbeat("--url", f"mongodb://127.0.0.1/x?password={SECRET}", "status")
            shown["redbeat status, unsupported URL"] = run.output
            assert "mongodb://127.0.0.1/x?password=***" in run.stderr
            shown["what the commands logged"] = caplog.text
        finally:
            for server_process in (web, dead_web):
                if server_process is not None:
                    server_process.stop()
                    shown[f"web log {server_process.port}"] = server_process.log()
            cluster.stop()
    assert len(shown) == 13
    leaked = [place for place, text in shown.items() if SECRET in text]
    assert leaked == [], {place: shown[place] for place in leaked}

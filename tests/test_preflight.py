"""A fault of the app's own settings stops beat and the CLI at start, with one line and a
non-zero exit, and blames no entry; a quarantine is lifted in bulk (Python and CLI);
``redbeat check`` says when entries need attention, with its own exit code.

Real ``celery beat`` and ``celery -A ... redbeat`` processes against a real redis-server
where the point is what a user sees (exit codes, the log), each forked from the session's
forker (support/forked.py); the release in Python.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery import Celery
from click.testing import CliRunner

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.cli import EXIT_ATTENTION, EXIT_SETTINGS, main
from redbeat.entry import store_for
from redbeat.manage import get_entry, release_quarantined
from redbeat.planning import quarantine_reason
from redbeat.preflight import UnrunnableApp, app_problems, check_app
from redbeat.schedules import crontab
from support import forked
from support.processes import Cluster, write_app

TYPO = "Europe/Pariss"


@pytest.mark.parametrize(("conf", "problem"), [
    ({"timezone": "Europe/Paris"}, None),
    ({"timezone": None, "enable_utc": True}, None),
    ({"timezone": TYPO}, "timezone='Europe/Pariss' is not a time zone"),
    ({"timezone": "UTC", "task_serializer": "jsn"}, "task_serializer='jsn' cannot encode"),
    ({"timezone": "UTC", "task_compression": "zipp"}, "task_compression='zipp' is not a"),
    ({"timezone": "UTC", "task_compression": "gzip"}, None),
])
def test_app_problems_name_the_setting(conf, problem):
    app = Celery("preflight", set_as_current=False)
    app.conf.update(conf)
    found = app_problems(app)
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(problem), found
        with pytest.raises(UnrunnableApp, match="invalid Celery setting: " + problem):
            check_app(app)


def entry_state(client, key: str) -> tuple[dict[str, str], float | None]:
    return client.hgetall(key), client.zscore("redbeat::schedule", key)


@pytest.mark.redis_server
def test_beat_refuses_an_unknown_app_zone_in_one_line_and_changes_no_entry(tmp_path,
                                                                           redis_server):
    good = make_app(redis_server.url, timezone="Europe/Paris")
    RedBeatSchedulerEntry("nine", "beatapp.record", crontab(minute=0, hour=9),
                          app=good).save()
    client = redis_server.client()
    before = entry_state(client, "redbeat:nine")
    cluster = Cluster(tmp_path, redis_server.url, redis_server.url, timezone=TYPO)
    beat = cluster.beat("typo")
    try:
        assert beat.process.wait(60) == 1
    finally:
        cluster.stop()
    log = beat.log()
    assert ("beat: invalid Celery setting: timezone='Europe/Pariss' is not a time zone"
            in log), log
    assert "Traceback" not in log and "Leading" not in log
    after = entry_state(client, "redbeat:nine")
    assert after == before and "quarantine" not in after[0]
    assert not client.exists("redbeat::lock")


@pytest.mark.redis_server
def test_the_celery_cli_refuses_an_unknown_app_zone_with_exit_8(tmp_path, redis_server):
    """A real ``celery -A`` process for ``list`` (its whole standard error is the one
    line); the other commands in this process, the app handed over as celery hands it."""
    write_app(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path),
                                                         os.environ.get("PYTHONPATH", "")]),
           "BEATAPP_CONF": json.dumps({"broker_url": redis_server.url, "timezone": TYPO,
                                       "redbeat_redis_url": redis_server.url}),
           "BEATAPP_RESULTS_URL": redis_server.url}
    line = ("error: invalid Celery setting: timezone='Europe/Pariss' is not a time zone "
            "(ZoneInfoNotFoundError); give an IANA name such as 'Europe/Paris' (every "
            "entry without a zone of its own runs in it)")
    result = forked.run(["-m", "celery", "-A", "beatapp", "redbeat", "list"], str(tmp_path),
                        env, timeout=120)
    assert result.returncode == EXIT_SETTINGS, result.stderr
    assert result.stderr.strip().splitlines() == [line]
    for args in (["add", "x", "beatapp.record", "--cron", "0 9 * * *"],
                 ["unquarantine", "--all"]):
        app = make_app(redis_server.url, timezone=TYPO)
        invoked = CliRunner().invoke(main, args, obj=SimpleNamespace(app=app))
        assert invoked.exit_code == EXIT_SETTINGS, invoked.output
        assert invoked.stderr.strip().splitlines() == [line]
    assert redis_server.client().keys("*") == []


def quarantine_as_an_earlier_release_did(client, app: Celery, name: str) -> None:
    """The record a tick of an earlier release wrote when the app's zone was misspelled:
    the entry parked at -1 with the planner's reason."""
    key = f"redbeat:{name}"
    client.hset(key, "quarantine", quarantine_reason(
        f"planning failed: ZoneInfoNotFoundError('No time zone found with key {TYPO}')",
        datetime.now(timezone.utc), "old-node:1"))
    client.zadd("redbeat::schedule", {key: -1})


@pytest.mark.redis_server
def test_a_bulk_release_lifts_every_quarantine_the_entries_did_not_cause(app, redis_server):
    client = redis_server.client()
    for number in range(7):
        RedBeatSchedulerEntry(f"daily-{number}", "tasks.x", crontab(minute=0, hour=9),
                              app=app).save()
        quarantine_as_an_earlier_release_did(client, app, f"daily-{number}")
    RedBeatSchedulerEntry("paused", "tasks.x", 60.0, app=app, enabled=False).save()
    quarantine_as_an_earlier_release_did(client, app, "paused")
    client.hset("redbeat:broken", mapping={"definition": "{not json",
                                           "quarantine": '{"reason": "bad json"}'})
    client.zadd("redbeat::schedule", {"redbeat:broken": -1})

    preview = release_quarantined(app, dry_run=True)
    assert sorted(preview.released) == sorted([f"daily-{n}" for n in range(7)] + ["paused"])
    assert client.hexists("redbeat:daily-0", "quarantine")

    done = release_quarantined(app)
    assert sorted(done.released) == sorted(preview.released)
    assert [name for name, _ in done.kept] == ["broken"]
    for number in range(7):
        info = get_entry(app, f"daily-{number}")
        assert info.state == "enabled" and info.next_run is not None
        assert info.next_run.astimezone(timezone.utc).minute == 0
    assert get_entry(app, "paused").state == "disabled"  # released, still paused
    assert get_entry(app, "broken").state == "quarantined"
    assert release_quarantined(app).released == []


@pytest.mark.redis_server
def test_unquarantine_on_the_command_line(app, redis_server):
    client = redis_server.client()
    for name in ("report-a", "report-b", "other"):
        RedBeatSchedulerEntry(name, "tasks.x", 60.0, app=app).save()
        quarantine_as_an_earlier_release_did(client, app, name)
    runner = CliRunner()
    base = ["--url", redis_server.url]
    usage = runner.invoke(main, [*base, "unquarantine"])
    assert usage.exit_code == 2
    missing = runner.invoke(main, [*base, "unquarantine", "nothing"])
    assert missing.exit_code == 3
    dry = runner.invoke(main, [*base, "unquarantine", "--pattern", "report-*", "--dry-run"])
    assert dry.exit_code == 0 and "would release 2, still quarantined 0" in dry.output
    assert client.hexists("redbeat:report-a", "quarantine")
    some = runner.invoke(main, [*base, "unquarantine", "--pattern", "report-*"])
    assert some.exit_code == 0 and "released 2, still quarantined 0" in some.output
    assert not client.hexists("redbeat:report-b", "quarantine")
    assert client.hexists("redbeat:other", "quarantine")
    named = runner.invoke(main, [*base, "unquarantine", "other"])
    assert named.exit_code == 0 and "released 1" in named.output
    assert client.zscore("redbeat::schedule", "redbeat:other") > 0


@pytest.mark.redis_server
def test_check_exits_9_while_entries_are_quarantined_or_failing(app, redis_server):
    client = redis_server.client()
    RedBeatSchedulerEntry("fine", "tasks.x", 3600.0, app=app).save()
    beat = RedBeatScheduler(app=app)
    runner = CliRunner()
    check = ["--url", redis_server.url, "check"]
    try:
        beat.tick()
        healthy = runner.invoke(main, check)
        assert healthy.exit_code == 0 and healthy.output.startswith("healthy:"), healthy.output
        client.hset("redbeat:bad", mapping={"definition": "{", "quarantine":
                                            '{"reason": "definition is not JSON"}'})
        client.zadd("redbeat::schedule", {"redbeat:bad": -1})
        beat.tick()
        attention = runner.invoke(main, check)
        assert attention.exit_code == EXIT_ATTENTION, attention.output
        assert "1 quarantined entry" in attention.output
        client.delete("redbeat:bad")
        client.zrem("redbeat::schedule", "redbeat:bad")
        # many parked entries before a quarantined one: counted past the status sample
        for number in range(120):
            RedBeatSchedulerEntry(f"a-paused-{number:03d}", "tasks.x", 60.0, app=app,
                                  enabled=False).save()
        client.hset("redbeat:z-bad", mapping={"definition": "{", "quarantine":
                                              '{"reason": "definition is not JSON"}'})
        client.zadd("redbeat::schedule", {"redbeat:z-bad": -1})
        beat.tick()
        late = runner.invoke(main, check)
        assert late.exit_code == EXIT_ATTENTION and "1 quarantined entry" in late.output
        client.delete("redbeat:z-bad")
        client.zrem("redbeat::schedule", "redbeat:z-bad")
        beat.tick()
        assert runner.invoke(main, check).exit_code == 0
        store_for(app).record_failure("redbeat:fine", "fine:1", "queue refused", "n:1")
        failing = runner.invoke(main, check)
        assert failing.exit_code == EXIT_ATTENTION, failing.output
        assert "1 failing (fine:" in failing.output
    finally:
        beat.close()


def test_the_exit_codes_are_documented():
    text = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    for code, meaning in ((8, "invalid settings"), (9, "need attention"), (130, "Ctrl-C")):
        assert f"| {code} |" in text and meaning in text, (code, meaning)


# -- operator errors: one line and the documented exit code ------------------------------


@pytest.mark.parametrize(("url", "problem"), [
    ("redis://127.0.0.1:6379/0?socket_timout=5",
     "unknown parameter 'socket_timout' in redis://127.0.0.1:6379/0?socket_timout=5; "
     "did you mean socket_timeout?"),
    ("redis://:pw@127.0.0.1:6379/0?socket_timeout=abc",
     "Invalid value for 'socket_timeout' in connection URL. "
     "(redis://:***@127.0.0.1:6379/0?socket_timeout=abc)"),
    ("redis://127.0.0.1:6379/abc", "the database must be a number, not 'abc'"),
    ("redis://127.0.0.1:6379/2?socket_timeout=3&health_check_interval=10", None),
    ("unix:///run/redis.sock?db=1&password=x", None),
    ("rediss://h:6380/0?ssl_cert_reqs=required", None),
    ("redis-sentinel://h:26379/0", None),  # its query is redbeat's, not redis-py's
])
def test_url_problems(url, problem):
    from redbeat.connection import url_problem

    found = url_problem(url)
    assert found == problem if problem is None else found.startswith(problem), found


def redbeat_command(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m redbeat ...``, forked from the session's forker (support/forked.py)."""
    return forked.run(["-m", "redbeat", *args], os.getcwd(), timeout=120)


@pytest.mark.redis_server
def test_a_typo_in_a_redis_url_parameter_is_one_line_in_the_cli_and_in_beat(tmp_path,
                                                                            redis_server):
    typo = redis_server.url + "?socket_timout=5"
    result = redbeat_command("--url", typo, "list")
    assert result.returncode == EXIT_SETTINGS
    assert result.stderr.splitlines() == [
        f"error: invalid Redis URL: unknown parameter 'socket_timout' in {typo}; did you "
        "mean socket_timeout?"]
    cluster = Cluster(tmp_path, typo, redis_server.url)
    beat = cluster.beat("typo")
    try:
        assert beat.process.wait(60) == 1
    finally:
        cluster.stop()
    log = beat.log()
    assert "beat: invalid Redis URL: unknown parameter 'socket_timout'" in log, log
    assert "Traceback" not in log and len(log.splitlines()) < 20, log


def test_web_on_a_port_in_use_is_one_line_and_exit_1(redis_server):
    pytest.importorskip("waitress")
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = redbeat_command("--url", redis_server.url, "web", "--port", str(port))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use"]


@pytest.mark.redis_server
def test_an_import_file_that_cannot_be_read_or_parsed_is_one_line_and_exit_5(redis_server,
                                                                             tmp_path):
    (tmp_path / "bad.txt").write_text("not json at all: [\n")
    runner = CliRunner()
    for name, message in (("missing.json", "error: cannot read "),
                          ("bad.txt", "is neither JSON nor YAML: ")):
        result = runner.invoke(main, ["--url", redis_server.url, "import",
                                      str(tmp_path / name)])
        assert result.exit_code == 5, result.output
        (line,) = result.output.splitlines()  # a parser's message joined onto one line
        assert line.startswith("error: ") and message in line, line


def test_web_on_a_port_out_of_range_is_bad_usage():
    """redbeat web --port 99999 served on 34463 (the port modulo 65536) without a word."""
    result = CliRunner().invoke(main, ["--url", "redis://127.0.0.1:1/0", "web", "--port",
                                       "99999"])
    assert result.exit_code == 2 and "99999 is not in the range 1<=x<=65535" in result.output

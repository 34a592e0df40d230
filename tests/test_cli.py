"""The real commands against a real Redis: standalone, `python -m`, and `celery -A`."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
from celery import Celery
from click.testing import CliRunner, Result

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.cli import main
from redbeat.schedulers import get_redis
from support import forked
from support.recording import Clock, Recording, leader


def json_lines(output: str) -> list[dict]:
    """`list --json`: one JSON object per line."""
    return [json.loads(line) for line in output.splitlines()]


@pytest.fixture
def run(redis_server):
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(main, ["--url", redis_server.url, *args], input=input,
                             catch_exceptions=False)
    return invoke


def test_add_list_show(run, redis_server):
    assert run("add", "ping", "tasks.ping", "--every", "30s", "--args", '[1, "a"]').exit_code == 0
    assert run("add", "nightly", "tasks.report", "--cron", "0 3 * * *", "--tz",
               "Europe/London", "--queue", "batch").exit_code == 0
    assert run("add", "standup", "tasks.remind", "--rrule",
               "FREQ=WEEKLY;BYDAY=MO,WE;BYHOUR=9;BYMINUTE=30").exit_code == 0
    listing = run("list")
    assert listing.exit_code == 0
    lines = listing.output.splitlines()
    assert lines[0].split() == ["NAME", "TASK", "SCHEDULE", "NEXT", "RUN", "LAST", "RUN", "RUNS",
                                "STATE"]
    assert any("ping" in line and "every 30s" in line for line in lines)
    assert any("cron 0 3 * * * (Europe/London)" in line for line in lines)
    records = json_lines(run("list", "--json", "--pattern", "n*").output)
    assert [r["name"] for r in records] == ["nightly"]
    shown = run("show", "standup", "--raw").output
    assert '"__type__": "rrule"' in shown and "next runs:" in shown
    entry = RedBeatSchedulerEntry.from_key("redbeat:nightly", app=make_app(redis_server.url))
    assert entry.options == {"queue": "batch"} and entry.schedule.timezone == "Europe/London"
    changed = json.loads(get_redis(make_app(redis_server.url)).hget("redbeat:ping", "changed"))
    assert changed["by"] == "cli"


#: 2030-01-01 00:00:00.5 UTC: the score an entry written by hand is stored with
HAND_SCORE = 1893456000.5
HAND_RUNS = ["2030-01-01 00:00:00 UTC", "2030-01-01 00:01:00 UTC", "2030-01-01 00:02:00 UTC"]


def test_a_hand_written_entrys_next_runs_are_from_its_score_as_beat_sends_them(run,
                                                                              redis_server):
    """An interval written by hand (a definition, no meta) with a score: beat sends it at
    the score, then every minute from its whole second. show and the entry page listed
    runs from now, years before the first."""
    from redbeat.web import create_app

    client = redis_server.client()
    client.hset("redbeat:hand", "definition", json.dumps({
        "name": "hand", "task": "tasks.x", "args": [], "kwargs": {}, "options": {},
        "enabled": True, "schedule": {"__type__": "interval", "every": 60.0,
                                      "relative": False}}))
    client.zadd("redbeat::schedule", {"redbeat:hand": HAND_SCORE})
    shown = run("show", "hand", "--runs", "3").output
    assert shown.split("next runs:\n")[1].splitlines() == [f"  {run}" for run in HAND_RUNS]
    app = make_app(redis_server.url)
    page = create_app(app).test_client().get("/entry?name=hand", headers={"Host": "127.0.0.1"})
    listed = re.findall(r"<li><time [^>]*>([^<]*)</time>", page.get_data(as_text=True))
    assert listed[:len(HAND_RUNS)] == HAND_RUNS
    clock = Clock(HAND_SCORE)
    scheduler = leader(app, clock)
    scheduler.tick()
    assert scheduler.task_ids == ["hand:1893456000500"]
    assert client.zscore("redbeat::schedule", "redbeat:hand") == 1893456060.0


def test_enable_disable_delete(run, redis_server):
    run("add", "job", "tasks.job", "--every", "1m")
    assert run("disable", "job").exit_code == 0
    assert json_lines(run("list", "--json").output)[0]["state"] == "disabled"
    assert run("enable", "job").exit_code == 0
    assert json_lines(run("list", "--json").output)[0]["state"] == "enabled"
    assert run("delete", "job").exit_code == 0
    assert run("show", "job").exit_code == 3


def test_run_now_is_published_by_the_leader_with_its_own_id(run, redis_server):
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("daily", "tasks.daily", 86400.0, app=app,
                          last_run_at=datetime.now(timezone.utc)).save()
    scheduler = Recording(app)
    scheduler.tick()
    scheduler.tick()
    assert scheduler.task_ids == []
    result = run("run-now", "daily")
    assert result.exit_code == 0
    scheduler.tick()
    sent = scheduler.task_ids
    assert len(sent) == 1 and sent[0].startswith("daily:run-now:")
    assert RedBeatSchedulerEntry.from_key("redbeat:daily", app=app).total_run_count == 0
    scheduler.close()


def test_export_import_round_trip_to_another_prefix(run, redis_server, tmp_path):
    run("add", "a", "tasks.a", "--every", "10s")
    run("add", "b", "tasks.b", "--cron", "*/5 * * * *")
    client = get_redis(make_app(redis_server.url))
    client.hset("redbeat:a", "meta", '{"last_run_at": null, "total_run_count": 7}')
    exported = run("export").stdout
    path = tmp_path / "schedule.json"
    path.write_text(exported)
    runner = CliRunner()
    moved = runner.invoke(main, ["--url", redis_server.url, "--prefix", "other:", "import",
                                 str(path)])
    assert moved.exit_code == 0 and "created 2, updated 0" in moved.output
    again = runner.invoke(main, ["--url", redis_server.url, "--prefix", "other:", "import",
                                 str(path)])
    assert "created 0, updated 0, unchanged 2" in again.output  # idempotent
    for name in ("a", "b"):
        for field in ("definition", "meta"):
            assert client.hget(f"other:{name}", field) == client.hget(f"redbeat:{name}", field)
    assert client.zscore("other::schedule", "other:a") == client.zscore("redbeat::schedule",
                                                                       "redbeat:a")
    yaml_text = run("export", "--format", "yaml").stdout
    (tmp_path / "schedule.yaml").write_text(yaml_text)
    run("delete", "b")
    dry = run("import", str(tmp_path / "schedule.yaml"), "--dry-run")
    assert "would create 1" in dry.output and not client.exists("redbeat:b")
    pruned = runner.invoke(main, ["--url", redis_server.url, "--prefix", "other:", "import",
                                  "--prune", str(tmp_path / "schedule.yaml")])
    assert "pruned 0" in pruned.output


def test_status_and_check(run, redis_server):
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("e", "tasks.e", 60.0, app=app).save()
    client = get_redis(app)
    client.hset("redbeat:bad", mapping={"definition": "{", "quarantine": json.dumps(
        {"reason": "definition: JSONDecodeError"})})
    client.zadd("redbeat::schedule", {"redbeat:bad": -1})
    unhealthy = run("check")
    assert unhealthy.exit_code == 1 and "no scheduler heartbeat" in unhealthy.output
    scheduler = RedBeatScheduler(app)
    scheduler.tick()
    scheduler.tick()
    status = run("status")
    assert status.exit_code == 0
    assert f"pid {os.getpid()}" in status.output
    assert "quarantined: bad: definition: JSONDecodeError" in status.output
    assert "maxmemory-policy noeviction" in status.output
    attention = run("check")  # beat leads; the quarantined entry needs an operator
    assert attention.exit_code == 9 and "leads" in attention.output
    assert "1 quarantined entry" in attention.output
    run("delete", "bad")
    healthy = run("check")
    assert healthy.exit_code == 0 and "leads" in healthy.output
    scheduler.close()


def test_errors_have_exit_codes(run):
    assert run("show", "missing").exit_code == 3
    assert run("add", "x", "t", "--every", "soon").exit_code == 5
    assert run("add", "x", "t", "--every", "1s", "--args", "{").exit_code == 5
    assert run("add", "x", "t", "--cron", "* * *").exit_code == 5
    assert run("add", "x", "t").exit_code == 2
    unreachable = CliRunner().invoke(main, ["--url", "redis://127.0.0.1:1/0", "--timeout", "1",
                                            "list"])
    assert unreachable.exit_code == 4 and "unreachable" in unreachable.output


def test_module_and_celery_subcommand(redis_server, tmp_path):
    """``python -m redbeat`` and ``celery -A proj redbeat`` as real processes (forked from
    the session's forker, support/forked.py: the module run as ``-m`` runs it)."""
    (tmp_path / "proj.py").write_text(
        "from celery import Celery\n"
        "app = Celery('proj', broker='memory://')\n"
        f"app.conf.redbeat_redis_url = {redis_server.url!r}\n"
    )
    RedBeatSchedulerEntry("visible", "tasks.v", 5.0, app=make_app(redis_server.url)).save()
    env_path = str(Path(__file__).parent.parent)
    via_module = forked.run(["-m", "redbeat", "--url", redis_server.url, "list"], env_path)
    assert via_module.returncode == 0 and "visible" in via_module.stdout
    via_celery = forked.run(["-m", "celery", "-A", "proj", "redbeat", "list"], str(tmp_path))
    assert via_celery.returncode == 0, via_celery.stderr
    assert "visible" in via_celery.stdout


def test_add_with_semantics_options(run, redis_server):
    result = run("add", "once", "tasks.once", "--at", "2030-01-02T09:00:00", "--tz",
                 "Europe/Paris", "--ttl", "3600")
    assert result.exit_code == 0 and "once at 2030-01-02T09:00:00+01:00" in result.output
    assert run("add", "windowed", "tasks.w", "--every", "1h", "--start", "2030-01-01T00:00:00",
               "--end", "2030-02-01T00:00:00", "--jitter", "30", "--misfire-grace", "60",
               "--no-coalesce").exit_code == 0
    app = make_app(redis_server.url)
    entry = RedBeatSchedulerEntry.from_key("redbeat:windowed", app=app)
    policy = entry.policy
    assert (policy.jitter, policy.misfire_grace_time, policy.coalesce) == (30, 60, False)
    assert entry.due_at == datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert RedBeatSchedulerEntry.from_key("redbeat:once", app=app).policy.ttl == 3600


def test_list_show_export_survive_a_deeply_nested_and_an_out_of_range_entry(run, redis_server):
    """One entry nobody can decode must not make a backup impossible or crash `show`."""
    client = redis_server.client(decode_responses=True)
    interval = {"__type__": "interval", "every": 5, "relative": False}
    deep = json.dumps({"name": "deep", "task": "t", "schedule": interval})[:-1] + \
        ', "args": ' + "[" * 50_000 + "]" * 50_000 + "}"
    huge = json.dumps({"name": "huge", "task": "t",
                       "schedule": {**interval, "every": 1e13}})
    client.hset("redbeat:deep", "definition", deep)
    client.hset("redbeat:huge", "definition", huge)
    client.zadd("redbeat::schedule", {"redbeat:deep": 0, "redbeat:huge": 0})
    for args in (["list"], ["show", "deep"], ["show", "huge"], ["export"]):
        result = run(*args)
        assert result.exit_code == 0, (args, result.output)
    assert "RecursionError" in run("show", "deep").output
    assert "cannot be computed" in run("show", "huge").output
    exported = json.loads(run("export").stdout)
    assert {record["name"] for record in exported["entries"]} >= {"deep", "huge"}


# -- the global options under `celery -A proj redbeat` -----------------------------------


def celery_redbeat(project: Callable[[], Celery], *args: str) -> Result:
    """``celery -A proj redbeat ARGS`` in this process: click's runner, a new app of the
    project (as each process imports its own) handed over as Celery's command line hands
    it (``ctx.obj.app``). What is tested is how the command reads the app's settings and
    its own options; the real ``celery -A`` process (the plugin found, the app imported)
    is test_module_and_celery_subcommand's."""
    return CliRunner().invoke(main, list(args), obj=SimpleNamespace(app=project()),
                              catch_exceptions=False)


def project_app(url: str, **conf: object) -> Celery:
    """A project's app as its module would configure it: its own zone, and kombu's
    ``visibility_timeout``, which must never reach redis-py (it refuses unknown keyword
    arguments)."""
    return make_app(url, timezone="Europe/Paris",
                    broker_transport_options={"visibility_timeout": 3600}, **conf)


#: The project's settings fall back to broker_transport_options, which redbeat says is
#: deprecated (as a process prints on standard error)
FALLBACK_WARNED = pytest.mark.filterwarnings(
    "ignore:redbeat_redis_options is not set:DeprecationWarning")


@pytest.fixture
def project(redis_server) -> Callable[[], Celery]:
    for name in ("live-a", "live-b"):
        RedBeatSchedulerEntry(name, "tasks.live", 3600.0,
                              app=make_app(redis_server.url)).save()
    return lambda: project_app(redis_server.url)


@FALLBACK_WARNED
def test_celery_form_works_with_broker_transport_options(project):
    listing = celery_redbeat(project, "list")
    assert listing.exit_code == 0, listing.stderr
    assert "live-a" in listing.stdout and "TypeError" not in listing.stderr


@FALLBACK_WARNED
def test_celery_form_honours_prefix(project, redis_server, tmp_path):
    export = tmp_path / "big.json"
    export.write_text(json.dumps({"format": "redbeat-export/1", "prefix": "x", "entries": [
        {"name": "new-one", "score": 0, "static": False, "meta": None, "definition": {
            "name": "new-one", "task": "tasks.new", "schedule": {
                "__type__": "interval", "every": 60, "relative": False}}}]}))
    dry = celery_redbeat(project, "--prefix", "newprefix:", "import", str(export), "--prune",
                         "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert "would create 1, would update 0, unchanged 0, would prune 0" in dry.stdout, dry.stdout
    assert "live-a" not in dry.stdout
    done = celery_redbeat(project, "--prefix", "newprefix:", "import", str(export), "--prune")
    assert done.exit_code == 0 and "pruned 0" in done.stdout
    client = redis_server.client()
    assert client.exists("newprefix:new-one") and client.exists("redbeat:live-a")
    assert "new-one" in celery_redbeat(project, "--prefix", "newprefix:", "list").stdout
    assert "new-one" not in celery_redbeat(project, "list").stdout


@FALLBACK_WARNED
def test_celery_form_honours_url_and_timezone(project, redis_server):
    other = redis_server.url[:-1] + "3"  # db 3 of the same server
    RedBeatSchedulerEntry("elsewhere", "tasks.e", 60.0, app=make_app(other)).save()
    listing = celery_redbeat(project, "--url", other, "list", "--json")
    assert listing.exit_code == 0, listing.stderr
    assert [record["name"] for record in json_lines(listing.stdout)] == ["elsewhere"]
    client = redis_server.client()
    client.zadd("redbeat::schedule", {"redbeat:live-a": 1_900_000_000})  # 2030-03-17T17:46:40Z
    shown = {zone: celery_redbeat(project, *args, "list").stdout for zone, args in (
        ("app", ()), ("tokyo", ("--timezone", "Asia/Tokyo")))}
    assert "2030-03-17 18:46:40" in shown["app"]  # the app's zone, Europe/Paris
    assert "2030-03-18 02:46:40" in shown["tokyo"]
    bad = celery_redbeat(project, "--timezone", "Nowhere/Zone", "list")
    assert bad.exit_code == 5 and "--timezone: unknown time zone" in bad.stderr


def test_celery_form_honours_timeout():
    """A server that accepts connections and never answers: --timeout bounds the wait,
    even when the app's settings retry forever."""
    import socket
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    try:
        started = time.monotonic()
        result = celery_redbeat(lambda: make_app(
            f"redis://127.0.0.1:{port}/0",
            redbeat_redis_options={"retry_period": -1, "socket_timeout": 60}),
            "--timeout", "1", "list")
        took = time.monotonic() - started
    finally:
        silent.close()
    assert result.exit_code == 4 and "unreachable" in result.stderr, result.stderr
    # one attempt of 1 s (a loaded machine adds seconds), far from the 60 s the app's own
    # socket timeout would wait
    assert took < 30, took


def test_the_apps_settings_object_is_never_changed(redis_server):
    from redbeat.cli import for_cli
    from redbeat.settings import ensure_conf

    app = make_app(redis_server.url, broker_transport_options={"visibility_timeout": 3600})
    original = ensure_conf(app)
    before = (dict(original.redis_options), original.redis_options_from_redbeat,
              original.key_prefix)
    for_cli(app, None, "other:", 2.0)
    assert (dict(original.redis_options), original.redis_options_from_redbeat,
            original.key_prefix) == before
    copy = ensure_conf(app)
    assert copy is not original and copy.key_prefix == "other:"
    assert copy.lock_key == "other::lock"
    assert copy.redis_options == {"retry_period": 0, "socket_connect_timeout": 2.0,
                                  "socket_timeout": 2.0}


@FALLBACK_WARNED
def test_celery_form_warns_about_unknown_settings(redis_server):
    listing = celery_redbeat(lambda: project_app(redis_server.url, redbeat_lock_timout=30),
                             "list")
    assert listing.exit_code == 0, listing.stderr
    assert ("warning: unknown setting redbeat_lock_timout is ignored; did you mean "
            "redbeat_lock_timeout?") in listing.stderr


# -- help, --version and the documentation ----------------------------------------------


def every_command() -> list[str]:
    return sorted(main.commands)


@pytest.mark.parametrize("name", every_command())
def test_every_command_has_help_without_url_or_redis(name):
    """In this process (click's runner, prog name as ``python -m redbeat`` sets it); the
    real process is tested by test_version_needs_no_redis."""
    result = CliRunner().invoke(main, [name, "--help"], prog_name="redbeat",
                                env={"REDBEAT_REDIS_URL": None}, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    usage, _, rest = result.stdout.partition("\n\n")
    assert usage.startswith(f"Usage: redbeat {name}")
    description = rest.split("\n\nOptions:")[0].strip()
    assert len(description) > 20, result.stdout  # real help text, not nothing


def test_version_needs_no_redis():
    import redbeat

    result = forked.run(["-m", "redbeat", "--version"], os.getcwd(), timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"redbeat {redbeat.__version__}"


def test_celery_form_has_help_and_version():
    """Under celery, help and the version need no Redis (the app's is unreachable)."""
    def unreachable() -> Celery:
        return make_app("redis://127.0.0.1:1/0")

    assert "Send an entry once now" in celery_redbeat(unreachable, "run-now", "--help").stdout
    assert celery_redbeat(unreachable, "--version").stdout.startswith("redbeat ")


def test_a_command_without_url_still_says_so():
    result = CliRunner().invoke(main, ["list"], env={"REDBEAT_REDIS_URL": None})
    assert result.exit_code == 2 and "give --url" in result.stderr


def test_docs_cli_lists_every_command_and_option():
    """docs/cli.md is checked against the CLI itself, so neither can drift."""
    doc = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    for param in main.params:
        for opt in param.opts:
            assert f"`{opt}" in doc or f" {opt}" in doc, opt
    assert "`--version`" in doc
    for name, cmd in main.commands.items():
        rows = [line for line in doc.splitlines() if line.startswith(f"| `{name}")]
        assert rows, f"docs/cli.md has no row for {name}"
        for param in cmd.params:
            if isinstance(param, click.Option):
                for opt in param.opts:
                    assert opt in rows[0], f"{name} {opt} missing from docs/cli.md"


GENERATED_START = "<!-- generated from the CLI's own --help: do not edit by hand -->"
GENERATED_END = "<!-- end of generated reference -->"


def cli_reference() -> str:
    """Every command's ``--help``, as `redbeat` prints it at 88 columns."""
    runner = CliRunner()
    parts = ["## Reference: every command's --help", ""]
    for args in [[], *([name] for name in sorted(main.commands))]:
        result = runner.invoke(main, [*args, "--help"], terminal_width=88,
                               max_content_width=88)
        assert result.exit_code == 0, result.output
        parts += [f"### redbeat {' '.join(args)}".rstrip(), "", "```", result.output.rstrip(),
                  "```", ""]
    return "\n".join(parts)


def test_docs_cli_reference_is_the_clis_own_help():
    """docs/cli.md ends with the CLI's --help output, checked here so it cannot drift.
    Regenerate it with: REDBEAT_WRITE_DOCS=1 pytest tests/test_cli.py -k reference"""
    path = Path(__file__).parent.parent / "docs" / "cli.md"
    doc = path.read_text()
    head, start, rest = doc.partition(GENERATED_START)
    _, end, tail = rest.partition(GENERATED_END)
    expected = f"{head}{GENERATED_START}\n{cli_reference()}{GENERATED_END}{tail}"
    if os.environ.get("REDBEAT_WRITE_DOCS") == "1":
        path.write_text(expected if start else
                        f"{doc.rstrip()}\n\n{GENERATED_START}\n{cli_reference()}"
                        f"{GENERATED_END}\n")
        return
    assert start and end, "docs/cli.md has no generated reference"
    assert doc == expected, ("docs/cli.md differs from the CLI's --help: REDBEAT_WRITE_DOCS=1 "
                             "pytest tests/test_cli.py -k reference")


def test_run_now_says_when_no_beat_leads_and_times_carry_their_zone(run, redis_server):
    assert run("add", "ping", "tasks.ping", "--every", "30s").exit_code == 0
    queued = run("run-now", "ping")
    assert queued.exit_code == 0 and "no beat is leading now" in queued.output
    redis_server.client().set("redbeat::lock", "host:1:abc", px=5000)  # a leader
    assert "the leader sends it within a second" in run("run-now", "ping").output
    listing = run("list").output.splitlines()
    assert " UTC" in listing[1]  # next run shown with its zone


@pytest.mark.parametrize(("every", "seconds"), [
    ("30", 30), ("30s", 30), ("1m30s", 90), ("1h 30m", 5400), ("1w", 604800), ("1.5h", 5400)])
def test_durations(every, seconds):
    from redbeat.schedule_text import parse_every

    assert parse_every(every) == seconds


@pytest.mark.parametrize("every", ["abc", "1x", "m", "30s5", "", "-5s"])
def test_bad_durations_are_refused(every):
    from redbeat.schedule_text import parse_every

    with pytest.raises(ValueError):
        parse_every(every)


@pytest.mark.parametrize(("cron", "fields"), [
    ("@daily", "0 0 * * *"), ("@hourly", "0 * * * *"), ("@weekly", "0 0 * * 0"),
    ("0 9 * * 7", "0 9 * * 0"), ("0 9 * * 5-7", "0 9 * * 5-6,0")])
def test_cron_shorthands_and_sunday_as_7(cron, fields):
    from redbeat.schedule_text import parse_cron

    parsed = parse_cron(cron, None)
    expected = parse_cron(fields, None)
    assert parsed == expected


def test_an_empty_entry_name_is_refused(run):
    result = run("add", "", "tasks.x", "--every", "30s")
    assert result.exit_code == 5 and "empty" in result.output


def test_standalone_cron_without_tz_runs_in_the_zone_beat_evaluates_it_in(run, redis_server):
    """Issue 12, item 5: the standalone command does not know the app's zone, so a
    crontab without --tz was scored in UTC (or --timezone) and ran off by the zone's
    offset. Now beat works out its first run: the same as the entry saved from the app."""
    import time

    from celery.schedules import crontab

    from redbeat.entry import meta_json

    app = make_app(redis_server.url, timezone="America/New_York")
    assert run("--timezone", "Asia/Tokyo", "add", "cli-daily", "tasks.d", "--cron",
               "0 3 * * *").exit_code == 0
    client = get_redis(app)
    saved = RedBeatSchedulerEntry.from_key("redbeat:cli-daily", app=app)
    assert getattr(saved.schedule, "timezone", None) is None  # zoneless, as 2.4.2 stores it
    RedBeatSchedulerEntry("app-daily", "tasks.d", crontab(minute=0, hour=3), app=app,
                          last_run_at=saved.last_run_at).save()
    scheduler = RedBeatScheduler(app)
    sent = []
    scheduler.apply_async = lambda entry, *args, **kwargs: sent.append(entry.name)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and client.zscore(
                "redbeat::schedule", "redbeat:cli-daily") != client.zscore(
                "redbeat::schedule", "redbeat:app-daily"):
            scheduler.tick()
    finally:
        scheduler.close()
    score = client.zscore("redbeat::schedule", "redbeat:cli-daily")
    assert score == client.zscore("redbeat::schedule", "redbeat:app-daily")
    due = datetime.fromtimestamp(score, tz=timezone.utc).astimezone(app.timezone)
    assert (due.hour, due.minute) == (3, 0) and sent == []
    assert client.hget("redbeat:cli-daily", "meta") == meta_json(saved.last_run_at)


def test_standalone_show_does_not_list_app_zone_runs_it_cannot_know(run):
    assert run("add", "zoneless", "tasks.z", "--cron", "0 3 * * *").exit_code == 0
    shown = run("show", "zoneless").output
    assert "in the app's time zone, which this command does not know" in shown
    assert run("add", "zoned", "tasks.z", "--cron", "0 3 * * *", "--tz", "UTC").exit_code == 0
    assert "03:00:00 UTC" in run("show", "zoned").output


def test_add_a_solar_entry_with_priority_and_expires(run, redis_server):
    result = run("add", "dawn", "tasks.dawn", "--solar", "sunrise 48.85,2.35",
                 "--priority", "7", "--expires", "5m")
    assert result.exit_code == 0, result.output
    entry = RedBeatSchedulerEntry.from_key("redbeat:dawn", app=make_app(redis_server.url))
    assert (entry.schedule.event, entry.schedule.lat, entry.schedule.lon) == (
        "sunrise", 48.85, 2.35)
    assert entry.options == {"priority": 7, "expires": 300.0}
    assert 'as options:  --solar \'sunrise 48.85,2.35\'' in run("show", "dawn").output
    refused = run("add", "dusk", "tasks.dusk", "--solar", "moonrise 1,2")
    assert refused.exit_code == 5 and "--solar: the event must be one of" in refused.output
    assert run("add", "p", "t", "--every", "1m", "--priority", "300").exit_code == 5

"""Changing entries from the command line: statics guarded, fields edited in place, task
names checked against the app, listings paged, imports summarised, `show` readable.

The commands run in this process (click's runner), against the suite's own redis-server;
the `celery -A proj redbeat` cases hand the project's app over as celery's command line
hands it (the app's tasks and ``beat_schedule`` are the point there; the real ``celery
-A`` process is tests/test_cli.py's).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from celery import Celery
from click.testing import CliRunner

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry, legacy
from redbeat.cli import main
from redbeat.guards import static_message, statics_among, task_problem
from redbeat.schedule_text import as_options, parse_cron, parse_every, parse_rrule, parse_time
from redbeat.schedules import clocked

BACK = "a beat next takes the lead or restarts"


def redbeat(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``redbeat --url URL ...`` in this process (click's runner: its exit code, stdout
    and stderr apart); one process per command cost seconds each on a loaded machine."""
    argv = ["--url", url, *args]
    result = CliRunner().invoke(main, argv, input=stdin, catch_exceptions=False)
    return subprocess.CompletedProcess(argv, result.exit_code, result.stdout, result.stderr)


def celery_redbeat(project: Callable[[], Celery], *args: str
                   ) -> subprocess.CompletedProcess[str]:
    """``celery -A proj redbeat ...`` in this process: a new app of the project (as each
    process imports its own) handed over as ``ctx.obj.app``."""
    result = CliRunner().invoke(main, list(args), obj=SimpleNamespace(app=project()),
                                catch_exceptions=False)
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout,
                                       result.stderr)


def definition(redis_server, name: str) -> dict:
    """The stored definition (unwrapped from the stub 2.4.2 is shown, when there is one)."""
    return json.loads(legacy.real_text(redis_server.client().hget(f"redbeat:{name}",
                                                                  "definition")))


# -- 1. static entries -------------------------------------------------------------------


def test_statics_are_refused_without_force_and_come_back_as_the_message_says(redis_server,
                                                                           tmp_path):
    app = make_app(redis_server.url, beat_schedule={
        "nightly": {"task": "tasks.nightly", "schedule": 3600.0}})
    scheduler = RedBeatScheduler(app)  # the leader writes beat_schedule: nightly is a static
    scheduler.tick()
    url = redis_server.url
    export = tmp_path / "schedule.json"
    export.write_text(redbeat(url, "export").stdout.replace("tasks.nightly", "tasks.other"))
    for args in (["delete", "nightly"], ["disable", "nightly"], ["enable", "nightly"],
                 ["edit", "nightly", "--every", "5m"],
                 ["add", "nightly", "tasks.x", "--every", "1m"],
                 ["import", str(export)]):
        refused = redbeat(url, *args)
        assert refused.returncode == 7, (args, refused.stderr)
        assert "'nightly' is a static entry (from beat_schedule)" in refused.stderr
        assert BACK in refused.stderr and "--force" in refused.stderr
        assert definition(redis_server, "nightly")["task"] == "tasks.nightly"
        assert definition(redis_server, "nightly")["schedule"]["every"] == 3600
    dry = redbeat(url, "import", str(export), "--dry-run")
    assert dry.returncode == 0 and "would update 1" in dry.stdout
    assert "warning: 'nightly' is a static entry" in dry.stderr and "--force" in dry.stderr
    forced = redbeat(url, "delete", "nightly", "--force")
    assert forced.returncode == 0 and "deleted nightly" in forced.stdout
    assert "warning: 'nightly' is a static entry" in forced.stderr and BACK in forced.stderr
    assert not redis_server.client().exists("redbeat:nightly")
    scheduler.close()
    RedBeatScheduler(app).tick()  # the next leader: it comes back, as the warning said
    assert definition(redis_server, "nightly")["task"] == "tasks.nightly"
    assert redbeat(url, "run-now", "nightly").returncode == 0  # sending once changes nothing


def test_a_static_of_the_apps_beat_schedule_is_guarded_before_any_beat_wrote_it(
        redis_server):
    def project() -> Celery:
        app = make_app(redis_server.url, beat_schedule={
            "nightly": {"task": "proj.job", "schedule": 60.0}})
        app.task(name="proj.job")(job)
        return app

    refused = celery_redbeat(project, "add", "nightly", "proj.job", "--every", "5m")
    assert refused.returncode == 7 and BACK in refused.stderr
    other = celery_redbeat(project, "--prefix", "elsewhere:", "add", "nightly", "proj.job",
                           "--every", "5m")  # no beat writes the app's statics there
    assert other.returncode == 0, other.stderr


@pytest.mark.parametrize(("names", "recorded", "configured", "expected"), [
    (["a", "b"], {"a"}, None, ["a"]),
    (["a", "b"], set(), {"b": {}}, ["b"]),
    (["c"], {"a"}, {"b": {}}, []),
])
def test_which_names_are_statics(names, recorded, configured, expected):
    assert statics_among(names, recorded, configured) == expected


def test_static_messages():
    assert "give --force" in static_message(["a"], forced=False)
    assert "lasts only until" in static_message(["a", "b"], forced=True)
    assert "'a', 'b' are static entries" in static_message(["a", "b"], forced=True)


# -- 2. edit and --options ---------------------------------------------------------------


def test_edit_changes_one_field_in_place_and_keeps_the_rest(redis_server):
    url = redis_server.url
    added = redbeat(url, "add", "job", "tasks.job", "--every", "1h", "--args", "[1]",
                    "--queue", "batch", "--options", '{"priority": 5, "expires": 60}')
    assert added.returncode == 0, added.stderr
    assert definition(redis_server, "job")["options"] == {"priority": 5, "expires": 60,
                                                          "queue": "batch"}
    client = redis_server.client()
    last = datetime.now(timezone.utc) - timedelta(minutes=10)
    RedBeatSchedulerEntry("job", "tasks.job", 3600.0, app=make_app(url), args=[1],
                          last_run_at=last, total_run_count=7).reschedule(last)
    meta = client.hget("redbeat:job", "meta")
    for args, check in [
        (["--args", "[2, 3]"], lambda d: d["args"] == [2, 3] and d["task"] == "tasks.job"),
        (["--kwargs", '{"x": 1}'], lambda d: d["kwargs"] == {"x": 1} and d["args"] == [2, 3]),
        (["--task", "tasks.other"], lambda d: d["task"] == "tasks.other"),
        (["--every", "30m"], lambda d: d["schedule"]["every"] == 1800),
        (["--options", '{"queue": "fast"}'], lambda d: d["options"] == {"queue": "fast"}),
        (["--cron", "@daily", "--tz", "Europe/Paris"],
         lambda d: "Europe/Paris" in json.dumps(d["schedule"])),
        (["--cron", "0 9 * * *"],  # the zone stays when --tz is not given
         lambda d: "Europe/Paris" in json.dumps(d["schedule"]) and d["schedule"]["hour"] == "9"),
    ]:
        edited = redbeat(url, "edit", "job", *args)
        assert edited.returncode == 0 and edited.stdout.startswith("edited job"), edited.stderr
        assert check(definition(redis_server, "job")), (args, definition(redis_server, "job"))
    assert client.hget("redbeat:job", "meta") == meta  # run history untouched
    assert redbeat(url, "edit", "job", "--misfire-grace", "60", "--jitter", "5",
                   "--ttl", "1d").returncode == 0
    policy = RedBeatSchedulerEntry.from_key("redbeat:job", app=make_app(url)).policy
    assert (policy.misfire_grace_time, policy.jitter, policy.ttl) == (60, 5, 86400)
    assert redbeat(url, "edit", "job", "--misfire-grace", "none", "--ttl", "None").returncode == 0
    policy = RedBeatSchedulerEntry.from_key("redbeat:job", app=make_app(url)).policy
    assert (policy.misfire_grace_time, policy.jitter, policy.ttl) == (None, 5, None)
    for args, code, message in [
        (["--args", "{}"], 5, "--args must be a JSON list"),
        (["--options", "[1]"], 5, "--options must be a JSON dict"),
        (["--every", "soon"], 5, "--every wants a duration"),
        (["--ttl", "soon"], 5, "--ttl wants a duration"),
        (["--misfire-grace", "-1"], 5, "--misfire-grace must be a number of seconds >= 0"),
        (["--every", "1m", "--cron", "@daily"], 2, "only one of"),
        (["--start", "2030-01-02T00:00:00", "--end", "2030-01-01T00:00:00"], 5,
         "--end must be after --start"),
        (["--task", ""], 5, "--task: the task name is empty"),
        ([], 2, "nothing to change"),
    ]:
        bad = redbeat(url, "edit", "job", *args)
        assert bad.returncode == code and message in bad.stderr, (args, bad.stderr)
    assert client.hget("redbeat:job", "meta") == meta
    assert redbeat(url, "edit", "missing", "--every", "1m").returncode == 3


# -- 3. task names checked against the app ------------------------------------------------

def job() -> int:
    """A project's task (registered by name on each app built)."""
    return 1


def test_task_names_are_checked_when_the_app_is_known(redis_server):
    def project() -> Celery:
        app = make_app(redis_server.url)
        app.task(name="proj.ping")(job)
        return app

    typo = celery_redbeat(project, "add", "p", "proj.pnig", "--every", "1m")
    assert typo.returncode == 5, typo.stderr
    assert "TASK: no task named 'proj.pnig'" in typo.stderr
    assert "did you mean proj.ping?" in typo.stderr
    assert not redis_server.client().exists("redbeat:p")
    assert celery_redbeat(project, "add", "p", "proj.ping", "--every", "1m").returncode == 0
    edit = celery_redbeat(project, "edit", "p", "--task", "proj.pong")
    assert edit.returncode == 5 and "--task: no task named 'proj.pong'" in edit.stderr
    forced = celery_redbeat(project, "add", "q", "elsewhere.task", "--every", "1m", "--force")
    assert forced.returncode == 0, forced.stderr
    # standalone, the app is unknown: any name is taken
    assert redbeat(redis_server.url, "add", "r", "elsewhere.task", "--every", "1m").returncode == 0


@pytest.mark.parametrize(("task", "registered", "expected"), [
    ("proj.ping", {"proj.ping"}, None),
    ("proj.pnig", {"proj.ping", "celery.chord"}, "did you mean proj.ping?"),
    ("zzz", {"proj.ping"}, "no task named 'zzz' is registered by the app (give --force"),
    ("  ", {"proj.ping"}, "the task name is empty"),
])
def test_task_problems(task, registered, expected):
    problem = task_problem(task, registered, "TASK")
    assert problem is None if expected is None else expected in problem


# -- 4. list: pages, sort, task filter, JSON lines ------------------------------------------


@pytest.fixture
def thirty(redis_server):
    app = make_app(redis_server.url)
    now = datetime.now(timezone.utc)
    for number in range(30):
        last = now - timedelta(minutes=60 - number)
        RedBeatSchedulerEntry(f"e{number:02d}", f"tasks.{'even' if number % 2 == 0 else 'odd'}",
                              3600.0 + number, app=app, enabled=number != 3,
                              last_run_at=last, total_run_count=1).save().reschedule(last)
    return app


def test_list_pages_sorts_and_filters(redis_server, thirty):
    url = redis_server.url

    def names(*args: str) -> list[str]:
        result = redbeat(url, "list", "--json", *args)
        assert result.returncode == 0, result.stderr
        return [json.loads(line)["name"] for line in result.stdout.splitlines()]

    # the disabled e03 keeps its due score (as in 2.4.2), so it sorts by it
    by_next = [f"e{n:02d}" for n in range(30)]
    assert names() == by_next
    page = redbeat(url, "list", "--json", "--limit", "10", "--offset", "10")
    assert [json.loads(line)["name"] for line in page.stdout.splitlines()] == by_next[10:20]
    assert "--offset 20 for the next page" in page.stderr
    assert names("--limit", "10", "--offset", "25") == by_next[25:]
    assert names("--sort", "name", "--limit", "3", "--offset", "1") == ["e01", "e02", "e03"]
    assert names("--sort", "last", "--limit", "2") == ["e29", "e28"]
    assert names("--task", "tasks.odd", "--limit", "3") == ["e01", "e03", "e05"]
    # --offset is a position in the order: with a filter, the one the last page printed
    first = redbeat(url, "list", "--json", "--task", "tasks.e*", "--limit", "13")
    assert len(first.stdout.splitlines()) == 13
    assert "--offset 25 for the next page" in first.stderr  # after e24
    assert names("--task", "tasks.e*", "--offset", "25") == ["e26", "e28"]
    assert names("--task", "tasks.o*", "--state", "disabled") == ["e03"]
    table = redbeat(url, "list", "--limit", "2").stdout.splitlines()
    assert len(table) == 3 and table[1].startswith("e00")


def test_a_page_by_next_run_reads_only_its_own_entries(redis_server):
    """Counted by the server itself: a page of 10 at offset 500 of 1000 entries reads
    11 hashes (one more: is there a next page), whatever the offset."""
    client = redis_server.client()
    with client.pipeline() as pipe:
        for number in range(1000):
            key = f"redbeat:n{number:04d}"
            pipe.hset(key, "definition", json.dumps({
                "name": f"n{number:04d}", "task": "t", "schedule": {
                    "__type__": "interval", "every": 60, "relative": False}}))
            pipe.zadd("redbeat::schedule", {key: 2_000_000_000 + number})
        pipe.execute()
    client.config_resetstat()
    result = CliRunner().invoke(main, ["--url", redis_server.url, "list", "--json",
                                       "--offset", "500", "--limit", "10"])
    assert [json.loads(line)["name"] for line in result.stdout.splitlines()] == [
        f"n{n:04d}" for n in range(500, 510)]
    assert "--offset 510 for the next page" in result.stderr
    stats = client.info("commandstats")
    assert stats["cmdstat_hmget"]["calls"] == 11


# -- 5. import and export summaries ---------------------------------------------------------


def test_import_and_export_say_how_many(redis_server, thirty, tmp_path):
    url = redis_server.url
    exported = redbeat(url, "export")
    assert exported.stderr.strip() == "exported 30 entries (0 static) from prefix 'redbeat:'"
    assert redbeat(url, "export", "--quiet").stderr == ""
    document = json.loads(exported.stdout)
    document["entries"][0]["definition"]["args"] = [99]  # one updated
    document["entries"] = document["entries"][:-1]  # one pruned
    document["entries"].append({**document["entries"][1], "name": "brand-new"})  # one created
    text = json.dumps(document)
    dry = redbeat(url, "import", "-", "--prune", "--dry-run", stdin=text)
    # the lines as the import goes, the counts last
    assert dry.stdout.splitlines()[-1] == ("would create 1, would update 1, unchanged 28, "
                                           "would prune 1")
    done = redbeat(url, "import", "-", "--prune", stdin=text)
    assert done.stdout.splitlines()[-1] == "created 1, updated 1, unchanged 28, pruned 1"
    assert "  + brand-new" in done.stdout and len(done.stdout.splitlines()) == 4
    quiet = redbeat(url, "import", "-", "--quiet", stdin=text)
    assert quiet.stdout == "created 0, updated 0, unchanged 30, pruned 0\n"


# -- 6. show ------------------------------------------------------------------------------


def test_show_reads_as_words_and_times_with_their_zone(redis_server):
    url = redis_server.url
    assert redbeat(url, "add", "win", "tasks.w", "--every", "1h", "--start",
                   "2030-01-01T00:00:00", "--misfire-grace", "60", "--no-coalesce",
                   "--jitter", "30", "--ttl", "3600").returncode == 0
    redis_server.client().hset("redbeat:win", "misfires", json.dumps(
        {"skipped": 4, "last_skipped": "2030-01-01T05:00:00+00:00"}))
    shown = redbeat(url, "--timezone", "Europe/Paris", "show", "win").stdout
    assert "times in Europe/Paris" in shown.splitlines()[0]
    assert "as options:  --every 1h" in shown
    assert ("policy:      start 2030-01-01 01:00:00 CET, end -, misfire grace 60s, "
            "no coalesce (up to 10 runs), jitter 30s, ttl 3600s") in shown
    assert "misfires:    4 slot(s) skipped, the last due 2030-01-01 06:00:00 CET" in shown
    assert " through cli on " in shown and '"__type__"' not in shown  # no raw tagged JSON


def test_shows_rrule_gives_the_same_definition_back_to_add(redis_server):
    url = redis_server.url
    rule = ("FREQ=MONTHLY;INTERVAL=2;BYDAY=+1MO,-1FR;BYHOUR=9,17;BYMINUTE=30;"
            "DTSTART=20300101T000000;UNTIL=20350101T000000;WKST=SU")
    assert redbeat(url, "add", "a", "t", "--rrule", rule, "--tz", "Europe/Paris").returncode == 0
    shown = redbeat(url, "show", "a").stdout
    line = next(line for line in shown.splitlines() if line.startswith("as options:"))
    options = shlex.split(line.removeprefix("as options:"))
    assert "BYDAY=+1MO,-1FR" in options[1] and "BYWEEKDAY" not in shown
    again = redbeat(url, "add", "b", "t", *options)
    assert again.returncode == 0, again.stderr
    first, second = definition(redis_server, "a"), definition(redis_server, "b")
    assert first["schedule"] == second["schedule"]


@pytest.mark.parametrize("schedule", [
    parse_every("1m30s"), parse_every("1w"), parse_cron("0 9 * * 1-5", "Europe/London"),
    parse_cron("@hourly", None), clocked(parse_time("2030-01-02T09:00:00", "Asia/Tokyo")),
    parse_rrule("FREQ=WEEKLY;BYDAY=MO,WE;BYHOUR=9;DTSTART=20300101T000000", None),
    parse_rrule("FREQ=YEARLY;BYMONTH=3;BYMONTHDAY=-1;COUNT=5;DTSTART=20300101T120000",
                "America/New_York"),
])
def test_every_schedule_add_writes_reads_back_from_its_options(schedule):
    from celery.schedules import schedule as interval

    options = as_options(schedule if not isinstance(schedule, float) else interval(schedule))
    kind, text, *zone = options
    parsed = {"--every": lambda: parse_every(text), "--cron": lambda: parse_cron(text, *zone[1:]
                                                                                 or [None]),
              "--at": lambda: clocked(parse_time(text, None)),
              "--rrule": lambda: parse_rrule(text, zone[1] if zone else None)}[kind]()
    assert parsed == schedule


def test_names_and_reasons_another_client_wrote_cannot_forge_lines_or_drive_the_terminal(
        redis_server):
    """A newline in a name printed a second, forged row in `list`; an ANSI sequence or a
    bidi override reached the terminal as is. Each is printed as its escape, on one line."""
    url = redis_server.url
    forged = "real\nforged  tasks.evil  every 1s"
    ansi = "red\x1b[2J\u202eeman"
    for name in (forged, ansi):
        assert redbeat(url, "add", name, "tasks.x", "--every", "10").returncode == 0
    client = redis_server.client()
    client.hset("redbeat:broken", "definition", '{"name": "broken\\n\\u001b[1m"}')
    client.zadd("redbeat::schedule", {"redbeat:broken": 0})
    listing = redbeat(url, "list")
    assert listing.returncode == 0, listing.stderr
    rows = listing.stdout.splitlines()
    assert len(rows) == 4 and not any(row.startswith("forged") for row in rows)
    assert any(row.startswith("real\\nforged  tasks.evil") for row in rows)
    assert "red\\x1b[2J\\u202eeman" in listing.stdout
    outputs = [redbeat(url, "show", forged).stdout, redbeat(url, "status").stdout,
               redbeat(url, "show", "broken").stdout, redbeat(url, "disable", ansi).stdout]
    for output in outputs:
        assert "\x1b" not in output and "\u202e" not in output and "\nforged" not in output
    assert outputs[0].startswith("real\\nforged  tasks.evil  every 1s  (redbeat:real\\nforged")


@pytest.mark.parametrize(("entries", "message"), [
    ("[1]", "not an object with a name: '1'"),
    ('[{"name": "a", "definition": {"name": "a"}, "score": NaN}]',
     "entry 'a': score must be a finite number, not nan"),
    ('[{"name": "a", "definition": {"name": "a"}, "score": 1e400}]', "not inf"),
    ('[{"name": "a", "definition": {"name": "a"}, "score": "soon"}]', "not 'soon'"),
])
def test_an_import_with_a_record_it_cannot_write_writes_nothing(redis_server, tmp_path,
                                                               entries, message):
    """A record that is not an object failed with a traceback (exit 1); a NaN score made
    Redis refuse the batch half-way, the hashes before it already written (exit 1); an
    infinite one imported an entry never sent."""
    source = tmp_path / "export.json"
    source.write_text('{"format": "redbeat-export/1", "entries": [{"name": "first", '
                      '"definition": {"name": "first"}}, ' + entries[1:] + '}')
    result = redbeat(redis_server.url, "import", str(source))
    assert result.returncode == 5 and message in result.stderr, result.stderr
    assert redis_server.client().keys("redbeat:*") == []


@pytest.mark.parametrize("args", [["list", "--offset", str(2**64)], ["list", "--limit", str(2**64)],
                                  ["show", "x", "--runs", "100000000"]])
def test_paging_and_run_counts_beyond_any_schedule_are_usage_errors(redis_server, args):
    """An offset past 2**63 failed as a Redis error (exit 1); --runs 100000000 computed
    runs for hours."""
    from click.testing import CliRunner

    from redbeat.cli import main

    result = CliRunner().invoke(main, ["--url", redis_server.url, *args])
    assert result.exit_code == 2 and "is not in the range" in result.output, result.output

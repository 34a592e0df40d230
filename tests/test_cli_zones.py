"""Every time option of ``add``/``edit`` (``--at``, ``--rrule``, ``--start``, ``--end``,
``--cron``) is read in one zone, the app's unless ``--tz`` (standalone: ``--timezone``,
UTC by default), in both forms of the command, and shown with its zone; an rrule that
names an hour runs on it (09:00:00, not the minute and second it was created at).

The table runs the CLI in process (click's runner, the app handed over as ``celery -A``
hands it); one test adds an entry ``--at`` that way for a real beat and worker in
Europe/Paris and checks when the task ran.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from conftest import make_app
from redbeat.cli import main
from redbeat.decoder import loads
from redbeat.entry import RedBeatSchedulerEntry
from redbeat.schedules import on_the_clock, rrule
from support.processes import Cluster
from support.waiting import wait_until

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def stored(redis_server, name: str, zone: str = "UTC") -> RedBeatSchedulerEntry:
    """The entry as beat reads it, in an app whose zone is ``zone``."""
    app = make_app(redis_server.url, timezone=zone)
    return RedBeatSchedulerEntry.from_key(f"redbeat:{name}", app=app)


def run_under_app(redis_server, *args: str, zone: str = "Europe/Paris"):
    """``celery -A proj redbeat ...`` for an app in ``zone``."""
    app = make_app(redis_server.url, timezone=zone)
    # --force: tasks.t is not registered by this app (the check is not the point here)
    return CliRunner().invoke(main, [*args, "--force"], obj=SimpleNamespace(app=app))


def run_standalone(redis_server, *args: str):
    return CliRunner().invoke(main, ["--url", redis_server.url, *args])


AT = "2031-03-04T09:00:00"


@pytest.mark.redis_server
@pytest.mark.parametrize(("form", "extra", "zone"), [
    ("app", [], PARIS),                                   # the app's zone
    ("app", ["--tz", "America/New_York"], NEW_YORK),      # --tz wins
    ("standalone", [], timezone.utc),                     # no app: --timezone, UTC
    ("standalone", ["--tz", "America/New_York"], NEW_YORK),
])
def test_at_start_and_end_are_read_in_one_zone(redis_server, form, extra, zone):
    run = run_under_app if form == "app" else run_standalone
    result = run(redis_server, "add", "once", "tasks.t", "--at", AT, "--start",
                 "2031-03-01T08:00", "--end", "2031-03-10T08:00", *extra)
    assert result.exit_code == 0, result.output
    entry = stored(redis_server, "once")
    local = datetime.fromisoformat(AT).replace(tzinfo=zone)
    assert entry.schedule.run_at == local
    assert entry.policy.start_time == datetime(2031, 3, 1, 8, tzinfo=zone)
    assert entry.policy.end_time == datetime(2031, 3, 10, 8, tzinfo=zone)
    # shown with its zone: the next run in the shown zone, named
    shown = local.astimezone(PARIS if form == "app" else timezone.utc)
    assert f"next run {shown:%Y-%m-%d %H:%M:%S} {shown.tzname()}" in result.output


@pytest.mark.redis_server
def test_the_standalone_command_reads_in_its_timezone_option(redis_server):
    result = run_standalone(redis_server, "--timezone", "Europe/Paris", "add", "once",
                            "tasks.t", "--at", AT)
    assert result.exit_code == 0, result.output
    assert stored(redis_server, "once").schedule.run_at == datetime(2031, 3, 4, 9,
                                                                    tzinfo=PARIS)


@pytest.mark.redis_server
@pytest.mark.parametrize(("extra", "zone_name"), [
    ([], "Europe/Paris"), (["--tz", "America/New_York"], "America/New_York")])
def test_rrule_and_cron_run_in_the_zone_they_were_read_in(redis_server, extra, zone_name):
    result = run_under_app(redis_server, "add", "daily", "tasks.t", "--rrule",
                           "FREQ=DAILY;BYHOUR=9", *extra)
    assert result.exit_code == 0, result.output
    assert f"({zone_name})" in result.output
    entry = stored(redis_server, "daily")
    assert entry.schedule.named_zone == zone_name
    due = entry.due_at.astimezone(ZoneInfo(zone_name))
    assert (due.hour, due.minute, due.second) == (9, 0, 0)
    cron = run_under_app(redis_server, "add", "cron", "tasks.t", "--cron", "0 9 * * *",
                         *extra)
    assert cron.exit_code == 0, cron.output
    due = stored(redis_server, "cron", "Europe/Paris").due_at.astimezone(ZoneInfo(zone_name))
    assert (due.hour, due.minute, due.second) == (9, 0, 0)
    if not extra:
        assert "(the app's time zone, Europe/Paris)" in cron.output


@pytest.mark.redis_server
def test_edit_reads_a_new_time_in_the_entrys_zone(redis_server):
    assert run_under_app(redis_server, "add", "e", "tasks.t", "--rrule", "FREQ=DAILY",
                         "--tz", "America/New_York").exit_code == 0
    edited = run_under_app(redis_server, "edit", "e", "--at", AT)
    assert edited.exit_code == 0, edited.output
    assert stored(redis_server, "e").schedule.run_at == datetime(2031, 3, 4, 9,
                                                                 tzinfo=NEW_YORK)


@pytest.mark.parametrize(("rules", "filled"), [
    ({"byhour": 9}, {"byhour": 9, "byminute": 0, "bysecond": 0}),
    ({"byhour": [9, 17], "byminute": 30}, {"byhour": [9, 17], "byminute": 30,
                                            "bysecond": 0}),
    ({"byminute": 15}, {"byminute": 15, "bysecond": 0}),
    ({"byhour": 9, "bysecond": 30}, {"byhour": 9, "byminute": 0, "bysecond": 30}),
    ({"byweekday": 0}, {"byweekday": 0}),  # no hour named: from its start, as dateutil
    ({}, {}),
])
def test_on_the_clock(rules, filled):
    assert {k: v for k, v in on_the_clock(rules).items() if v is not None} == filled


def test_an_rrule_at_9_runs_at_9_and_2_4_2_data_keeps_its_meaning():
    weekly = rrule("WEEKLY", byweekday=0, byhour=9, timezone="Europe/Paris")  # README's
    run = weekly.rrule.after(datetime.now(PARIS))
    assert (run.hour, run.minute, run.second) == (9, 0, 0)
    # what 2.4.2 wrote for the same rule made at 09:32:46: dtstart kept, minute open
    stored_text = json.dumps({"__type__": "rrule", "freq": 2, "interval": 1,
                              "byhour": [9], "byminute": None, "bysecond": None,
                              "dtstart": datetime(2026, 1, 5, 8, 32, 46,
                                                  tzinfo=timezone.utc).timestamp(),
                              "dtstart_tz": 0})
    old = loads(stored_text)
    run = old.rrule.after(datetime(2026, 2, 1, tzinfo=timezone.utc))
    assert (run.hour, run.minute, run.second) == (9, 32, 46)


@pytest.mark.redis_server
def test_celery_cli_at_runs_at_that_time_in_the_apps_zone(tmp_path, redis_server):
    """As the issue tried it: a Europe/Paris project, ``redbeat add --at <a Paris
    wall-clock time>`` under its app, a real beat and worker: the task runs then, not an
    hour later. The slot's task id proves the zone the time was read in (read as UTC it
    would be an hour later); a real beat leading before the time proves it is not sent
    early."""
    cluster = Cluster(tmp_path, redis_server.url, redis_server.url, timezone="Europe/Paris")
    beat, worker = cluster.beat("beat"), cluster.worker()
    try:
        beat.wait_for("Leading as", timeout=120)
        worker.wait_for("ready", timeout=120)
        # whole seconds of Paris wall-clock time, a little ahead: the command runs in
        # this process (its reading of --at is the point; processes are beat's and the
        # worker's), so it is done well before on any machine
        due = (datetime.now(PARIS) + timedelta(seconds=3)).replace(microsecond=0)
        added = run_under_app(redis_server, "add", "soon", "beatapp.record", "--at",
                              due.replace(tzinfo=None).isoformat(), "--args", '["soon"]')
        assert added.exit_code == 0, added.output
        assert f"next run {due:%Y-%m-%d %H:%M:%S} CET" in added.stdout or \
            f"next run {due:%Y-%m-%d %H:%M:%S} CEST" in added.stdout, added.stdout
        wait_until(lambda: cluster.executions(), 180, "the --at entry to run")
    finally:
        cluster.stop()
    (run,) = cluster.executions()
    assert run["id"] == f"soon:{round(due.timestamp() * 1000)}"  # the slot of that time
    assert run["at"] >= due.timestamp() - 0.5  # not before (an hour early in UTC+1)
    assert run["at"] < due.timestamp() + 3600 - 60  # nor an hour late (read as UTC)

"""Importing another scheduler's schedule (redbeat.migrate, redbeat.foreign):
django-celery-beat's tables, made by django-celery-beat's own migrations on SQLite and
on a PostgreSQL server of the test's own, and the shelve file a real ``celery beat``
with Celery's default scheduler wrote. Each imported entry must run when
django-celery-beat's DatabaseScheduler would, from the same rows."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from celery import Celery
from click.testing import CliRunner

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.cli import main
from redbeat.foreign import NotCarried, from_periodic_task
from redbeat.migrate import (
    ForeignPlan,
    django_celery_beat_rows,
    import_foreign,
    records_of,
    shelve_entries,
    shelve_records,
)
from redbeat.schedules import clocked, crontab
from support import forked
from support.postgres import postgres_server
from support.processes import CeleryProcess, write_app

pytest.importorskip("django_celery_beat")
SUPPORT = Path(__file__).parent / "support"
NOW = datetime(2027, 3, 1, 12, 0, tzinfo=timezone.utc)


def make_dcb_database(url: str) -> dict[str, float]:
    """django-celery-beat's migrations and rows at ``url``; its next run of each task.
    support/dcb.py runs in a process of its own (Django's set-up is process-wide), forked
    from the session's forker (support/forked.py)."""
    done = forked.run(["-c", (SUPPORT / "dcb.py").read_text(), url], timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])["next"]


@pytest.fixture(scope="module")
def dcb_sqlite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    """One SQLite database of django-celery-beat's (its migrations run in a Django
    process of their own, seconds each), copied by each test that uses it: the rows and
    DatabaseScheduler's next runs are the same for every copy."""
    path = tmp_path_factory.mktemp("dcb") / "db.sqlite3"
    return path, make_dcb_database(f"sqlite:///{path}")


def sqlite_copy(dcb_sqlite: tuple[Path, dict[str, float]], tmp_path: Path) -> str:
    """A URL of this test's own copy of the module's database."""
    path = tmp_path / "db.sqlite3"
    shutil.copyfile(dcb_sqlite[0], path)
    return f"sqlite:///{path}"


def imported(app: Celery, url: str) -> ForeignPlan:
    plan = ForeignPlan()
    return import_foreign(app, records_of(django_celery_beat_rows(url), plan), plan)


def entry(app: Celery, name: str) -> RedBeatSchedulerEntry:
    return RedBeatSchedulerEntry.from_key(RedBeatSchedulerEntry.generate_key(app, name), app=app)


def check_same_runs(app: Celery, expected: dict[str, float]) -> None:
    """Every task DatabaseScheduler would run is due here at the same moment."""
    assert expected, "django-celery-beat computed no next run"
    for name, when in expected.items():
        due = entry(app, name).due_at
        assert due is not None, name
        assert abs(due.timestamp() - when) < 2.0, (name, due, datetime.fromtimestamp(
            when, timezone.utc))


def check_fields(app: Celery) -> None:
    report = entry(app, "hourly report")
    assert report.task == "proj.tasks.report"
    assert report.args == [1, "two"] and report.kwargs == {"three": 3}
    assert report.options == {
        "queue": "reports", "exchange": "reports", "routing_key": "reports.hourly",
        "priority": 7, "headers": {"tenant": "acme", "periodic_task_name": "hourly report"}}
    poll = entry(app, "poll")
    assert poll.total_run_count == 12 and poll.options["expires"] == 30
    morning = entry(app, "paris morning")
    assert morning.schedule == crontab(minute="30", hour="9", timezone="Europe/Paris")
    assert morning.policy.end_time == morning.options["expires"]
    assert entry(app, "every two days").policy.start_time is not None
    assert isinstance(entry(app, "launch").schedule, clocked)
    assert isinstance(entry(app, "once hourly").schedule, clocked)  # its one run
    assert not entry(app, "paused").enabled


def test_django_celery_beat_sqlite(app: Celery, tmp_path: Path, dcb_sqlite) -> None:
    url = sqlite_copy(dcb_sqlite, tmp_path)
    expected = dcb_sqlite[1]
    plan = imported(app, url)
    assert len(plan.created) == 10 and not plan.refused
    assert "its description is not carried (entries here have none)" in \
        plan.notes["hourly report"]
    check_same_runs(app, expected)
    check_fields(app)
    # idempotent: a second run changes nothing
    again = imported(app, url)
    assert sorted(again.unchanged) == sorted(plan.created) and not again.written
    # an entry changed here since is left alone, unless asked
    changed = entry(app, "poll").copy(args=["edited"])
    changed.save()
    rows = django_celery_beat_rows(url)
    for row in rows:
        row["args"] = json.dumps(["from the database"])
    kept = import_foreign(app, records_of(rows, ForeignPlan()))
    assert kept.kept == ["poll"] and "hourly report" in kept.updated
    assert entry(app, "poll").args == ["edited"]
    forced = import_foreign(app, records_of(rows, ForeignPlan()), overwrite=True)
    assert "poll" in forced.updated and entry(app, "poll").args == ["from the database"]


def test_django_celery_beat_postgresql(app: Celery) -> None:
    pytest.importorskip("psycopg")
    with postgres_server() as url:
        expected = make_dcb_database(url)
        plan = imported(app, url)
        assert len(plan.created) == 10 and not plan.refused
        check_same_runs(app, expected)
        check_fields(app)


def test_cli_dry_run_then_import(app: Celery, redis_server, tmp_path: Path,
                                 dcb_sqlite) -> None:
    url = sqlite_copy(dcb_sqlite, tmp_path)
    base = ["--url", redis_server.url, "import", "--from", "django-celery-beat",
            "--database", url]
    dry = CliRunner().invoke(main, [*base, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith("would create 10, would update 0, unchanged 0")
    assert redis_server.client().zcard("redbeat::schedule") == 0
    done = CliRunner().invoke(main, base)
    assert done.exit_code == 0, done.output
    assert "  + hourly report\n      its description is not carried" in done.output
    assert redis_server.client().zcard("redbeat::schedule") == 10
    again = CliRunner().invoke(main, base)
    assert again.output.startswith("create 0, update 0, unchanged 10"), again.output


def test_cli_reports_a_row_it_cannot_carry_and_imports_the_rest(app: Celery, redis_server,
                                                                tmp_path: Path,
                                                                dcb_sqlite) -> None:
    import sqlite3
    sqlite_copy(dcb_sqlite, tmp_path)
    path = tmp_path / "db.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("UPDATE django_celery_beat_periodictask SET args = '[1,' "
                   "WHERE name = 'poll'")
    result = CliRunner().invoke(main, ["--url", redis_server.url, "import", "--from",
                                       "django-celery-beat", "--database", f"sqlite:///{path}"])
    assert result.exit_code == 5
    assert "create 9, update 0, unchanged 0, kept 0" in result.output
    assert "not carried 1" in result.output
    assert "  ! poll: not carried: args is not JSON" in result.output
    assert redis_server.client().zcard("redbeat::schedule") == 9


def test_cli_unreadable_database_is_one_line(app: Celery, redis_server, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--url", redis_server.url, "import", "--from",
                                       "django-celery-beat", "--database",
                                       f"sqlite:///{tmp_path / 'none.sqlite3'}"])
    assert result.exit_code == 5
    assert result.output.strip() == f"error: no SQLite database at {tmp_path / 'none.sqlite3'}"


@pytest.mark.e2e
def test_shelve_written_by_real_celery_beat(redis_server, tmp_path: Path) -> None:
    """Celery's default scheduler runs a second, then stops; its file is imported with
    each entry's run count and last run, the app's entries as statics."""
    write_app(tmp_path)
    schedule = {"every-second": {"task": "beatapp.record", "schedule": 1.0},
                "hourly": {"task": "beatapp.record", "schedule": 3600.0, "args": ["h"]}}
    conf = {"broker_url": redis_server.url, "beat_schedule": schedule}
    beat = CeleryProcess(tmp_path, "beat", ["beat", "-s", str(tmp_path / "celerybeat-schedule"),
                                            "-l", "info"], conf, redis_server.url)
    try:
        beat.wait_for("Sending due task every-second", timeout=120, count=3)
    finally:
        assert beat.terminate() == 0
    shelved = shelve_entries(str(tmp_path / "celerybeat-schedule"))
    runs = shelved["every-second"].total_run_count
    assert runs >= 3
    app = make_app(redis_server.url, beat_schedule=schedule)
    plan = ForeignPlan()
    done = import_foreign(app, shelve_records(shelved, plan), plan, statics=set(schedule))
    assert set(schedule) <= set(done.created) and not done.refused
    second = entry(app, "every-second")
    assert second.total_run_count == runs
    assert second.last_run_at == shelved["every-second"].last_run_at
    assert entry(app, "hourly").args == ["h"]
    assert set(schedule) <= redis_server.client().smembers("redbeat::statics") | set()


# -- the translation, as a table ------------------------------------------------------

ROW = {"name": "t", "task": "proj.t", "enabled": True, "total_run_count": 0,
       "interval_every": 5, "interval_period": "minutes",
       "date_changed": "2027-03-01 11:00:00.000000"}


@pytest.mark.parametrize("change, refused", [
    ({"args": "[1,"}, "args is not JSON"),
    ({"kwargs": "[1]"}, "args must be a JSON list and kwargs a JSON object"),
    ({"headers": "[]"}, "headers is not a JSON object"),
    ({"interval_period": "fortnights"}, "interval period 'fortnights'"),
    ({"interval_every": 0}, "interval of 0 minutes never runs"),
    ({"interval_every": None}, "it has no schedule"),
])
def test_rows_that_cannot_be_carried(change: dict, refused: str) -> None:
    with pytest.raises(NotCarried, match=refused):
        from_periodic_task({**ROW, **change})


@pytest.mark.parametrize("change, expected", [
    ({}, {"last_run_at": datetime(2027, 3, 1, 11, tzinfo=timezone.utc), "enabled": True}),
    ({"last_run_at": "2027-03-01 11:30:00"},
     {"last_run_at": datetime(2027, 3, 1, 11, 30, tzinfo=timezone.utc)}),
    ({"start_time": "2027-03-02 00:00:00"},  # never ran, waits for its start
     {"last_run_at": None, "start_time": datetime(2027, 3, 2, tzinfo=timezone.utc)}),
    ({"one_off": True, "total_run_count": 1}, {"enabled": False}),
    ({"expires": datetime(2027, 4, 1, 2, tzinfo=timezone(timedelta(hours=2)))},
     {"end_time": datetime(2027, 4, 1, tzinfo=timezone.utc)}),
])
def test_rows_carried(change: dict, expected: dict) -> None:
    fields = from_periodic_task({**ROW, **change}).fields
    assert {name: fields.get(name) for name in expected} == expected

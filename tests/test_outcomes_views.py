"""Where an operator sees the outcomes workers report (issue 27): ``redbeat show`` (the
latest run and the recent outcomes), ``redbeat list`` (the latest outcome next to the
last run), ``redbeat check`` (an entry whose last N runs failed needs attention),
``manage.run_outcomes`` (what the web view's entry page calls), and the CLI options of
the policies. The reports are written through the store exactly as a worker writes them
(lua/outcome.lua); the real workers are in test_outcomes_e2e.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry, manage
from redbeat.cli import main
from redbeat.entry import store_for

pytestmark = pytest.mark.redis_server


@pytest.fixture
def run(redis_server):
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, ["--url", redis_server.url, *args], catch_exceptions=False)
    return invoke


def report(app, name: str, due_ms: int, outcome: str, **details) -> None:
    store = store_for(app)
    task = {"task_id": f"{name}:{due_ms}", "due_ms": due_ms, "worker": "celery@w1"}
    store.report_run(f"redbeat:{name}", "start", {**task, "state": "running"}, 100, 3600)
    store.report_run(f"redbeat:{name}", "finish", {**task, "state": outcome, **details}, 100,
                     3600)


def test_show_list_and_run_outcomes_say_how_the_runs_ended(run, redis_server):
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("job", "tasks.job", 60, app=app).save()
    report(app, "job", 1000, "success", runtime=2.5)
    report(app, "job", 2000, "failure", runtime=0.25, error="ValueError: boom")
    shown = run("show", "job").output
    assert "last outcome: failure in 0.25 s on celery@w1: ValueError: boom" in shown
    recent = shown.split("recent outcomes:")[1].splitlines()
    assert recent[1].split()[:4] == ["job:2000", "failure", "in", "0.25"]
    assert recent[2].split()[:2] == ["job:1000", "success"]
    listing = run("list").output.splitlines()
    assert "(failure)" in next(line for line in listing if line.startswith("job"))
    (record,) = [json.loads(line) for line in run("list", "--json").output.splitlines()]
    assert record["last_outcome"] == "failure"
    outcomes = manage.run_outcomes(app, "job", count=5)
    assert outcomes["latest"]["state"] == "failure" and outcomes["failed_in_a_row"] == 1
    assert outcomes["latest"]["summary"].startswith("failure in 0.25 s")
    assert [r["outcome"] for r in outcomes["recent"]] == ["failure", "success"]
    assert outcomes["recent"][1]["runtime"] == 2.5 and outcomes["error"] is None
    never = RedBeatSchedulerEntry("quiet", "tasks.q", 60, app=app)
    never.save()
    assert "last outcome: -" in run("show", "quiet").output
    assert manage.run_outcomes(app, "quiet")["latest"] is None


def test_check_names_an_entry_whose_last_runs_failed(run, redis_server):
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("job", "tasks.job", 3600, app=app).save()
    scheduler = RedBeatScheduler(app)
    try:
        scheduler.tick()
        scheduler.tick()
        for due in (1000, 2000):
            report(app, "job", due, "failure", error="ValueError: boom")
        assert run("check").exit_code == 0  # two in a row: under the default three
        report(app, "job", 3000, "failure", error="ValueError: boom")
        attention = run("check")
        assert attention.exit_code == 9 and "job x3" in attention.output
        assert run("check", "--failed-runs", "0").exit_code == 0
        report(app, "job", 4000, "success")
        assert run("check").exit_code == 0  # a success ends the row
    finally:
        scheduler.close()


def test_add_and_edit_set_the_policies_show_prints_them(run, redis_server):
    assert run("add", "job", "tasks.job", "--every", "1m", "--overlap", "buffer_one",
               "--lost-after", "10m").exit_code == 0
    app = make_app(redis_server.url)
    policy = RedBeatSchedulerEntry.from_key("redbeat:job", app=app).policy
    assert (policy.overlap, policy.relative_to, policy.lost_after) == ("buffer_one", "schedule",
                                                                       600)
    assert run("edit", "job", "--relative-to", "execution", "--overlap", "allow",
               "--lost-after", "none").exit_code == 0
    policy = RedBeatSchedulerEntry.from_key("redbeat:job", app=app).policy
    assert (policy.overlap, policy.relative_to, policy.lost_after) == ("allow", "execution",
                                                                       None)
    shown = run("show", "job").output
    assert "relative to execution" in shown
    assert "(then each the schedule's next time after the run before it ends)" \
        in shown.split("next runs:")[1]
    refused = run("add", "bad", "tasks.job", "--every", "1m", "--overlap", "never")
    assert refused.exit_code == 2


def test_metrics_count_outcomes_by_entry_with_a_runtime_histogram(redis_server):
    from prometheus_client import generate_latest

    from redbeat.metrics import schedule_registry

    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("job", "tasks.job", 60, app=app).save()
    registry = schedule_registry(app)
    report(app, "job", 1000, "success", runtime=0.3)
    report(app, "job", 2000, "failure", runtime=7)
    text = generate_latest(registry).decode()
    assert 'redbeat_run_outcomes_total{entry="job",outcome="success"} 1.0' in text
    assert 'redbeat_run_runtime_seconds_bucket{entry="job",le="0.5"} 1.0' in text
    assert 'redbeat_run_runtime_seconds_count{entry="job"} 2.0' in text
    report(app, "job", 3000, "success", runtime=0.3)
    text = generate_latest(registry).decode()  # only the new record is folded in
    assert 'redbeat_run_outcomes_total{entry="job",outcome="success"} 2.0' in text


def test_the_entry_label_is_bounded():
    from redbeat.keys import KeyLayout
    from redbeat.metrics import ENTRY_LABELS, OTHER_ENTRIES, OutcomeCounts

    counts = OutcomeCounts()
    counts.fold([(f"{i}-0", {"key": f"redbeat:e{i}", "outcome": "success", "runtime": "1"})
                 for i in range(ENTRY_LABELS * 3)], KeyLayout())
    entries = {entry for entry, _ in counts.outcomes}
    assert len(entries) == ENTRY_LABELS + 1 and OTHER_ENTRIES in entries
    assert counts.outcomes[(OTHER_ENTRIES, "success")] == ENTRY_LABELS * 2


def test_the_web_views_entry_page_shows_the_runs(redis_server):
    from redbeat.web import create_app

    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("job", "tasks.job", 60, app=app).save()
    RedBeatSchedulerEntry("quiet", "tasks.q", 60, app=app).save()
    report(app, "job", 1000, "failure", runtime=0.25, error="ValueError: <boom>")
    client = create_app(app).test_client()
    page = client.get("/entry?name=job").get_data(as_text=True)
    assert "Latest: failure in 0.25 s on celery@w1: ValueError: &lt;boom&gt;" in page
    assert 'id="outcomes"' in page and "0.25 s" in page
    assert 'id="no-outcomes"' in client.get("/entry?name=quiet").get_data(as_text=True)

"""lua/outcome.lua on a real Redis: what a worker's reports write (the entry's ``run``
field, the outcomes stream, the failed-runs count), and the rules that keep them true
when reports arrive late, twice, or for an entry that is gone."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from redbeat import RedBeatSchedulerEntry
from redbeat.keys import RUN
from redbeat.runs import RunRecord
from redbeat.runtime import store_for

pytestmark = pytest.mark.redis_server


@pytest.fixture
def entry(app):
    RedBeatSchedulerEntry("job", "tasks.job", 60, app=app).save()
    return "redbeat:job"


def report(store, kind, due_ms, state, lost_after=3600.0, **details):
    task = {"task_id": f"job:{due_ms}", "due_ms": due_ms, "state": state, **details}
    return store.report_run("redbeat:job", kind, task, 100, lost_after).written


def run(client) -> RunRecord:
    record = RunRecord.parse(client.hget("redbeat:job", RUN))
    assert record is not None
    return record


def outcomes(client) -> list[tuple[str, str]]:
    return [(fields["task_id"], fields["outcome"])
            for _, fields in client.xrange("redbeat::outcomes")]


def test_a_run_is_recorded_started_then_finished(app, entry):
    store, client = store_for(app), store_for(app).client
    assert report(store, "start", 1000, "running", worker="w@h") == "run"
    started = run(client)
    assert (started.state, started.worker, started.finished) == ("running", "w@h", None)
    assert report(store, "finish", 1000, "failure", runtime=0.25, error="ValueError: x") == "run"
    done = run(client)
    assert (done.state, done.runtime, done.error, done.started) == (
        "failure", 0.25, "ValueError: x", started.started)
    assert done.finished >= started.started
    assert outcomes(client) == [("job:1000", "failure")]
    assert client.zscore("redbeat::failing-runs", entry) == 1
    report(store, "start", 2000, "running")
    report(store, "finish", 2000, "success")
    assert client.zscore("redbeat::failing-runs", entry) is None
    assert run(client).runtime is not None  # from its start, when the worker gave none


def test_a_late_report_of_an_older_run_goes_to_the_stream_only(app, entry):
    store, client = store_for(app), store_for(app).client
    report(store, "start", 2000, "running")
    assert report(store, "finish", 1000, "success") == "stale"
    assert run(client).due_ms == 2000 and run(client).state == "running"
    assert outcomes(client) == [("job:1000", "success")]


def test_a_silent_run_is_lost_when_a_later_one_starts_after_its_bound(app, entry):
    store, client = store_for(app), store_for(app).client
    report(store, "start", 1000, "running")
    report(store, "start", 2000, "running", lost_after=3600)  # within its bound: overlap
    assert outcomes(client) == []
    report(store, "start", 3000, "running", lost_after=0)
    assert outcomes(client) == [("job:2000", "lost")]
    assert client.zscore("redbeat::failing-runs", entry) == 1


def test_a_run_delivered_again_records_its_first_attempt_as_lost(app, entry):
    store, client = store_for(app), store_for(app).client
    report(store, "start", 1000, "running", worker="a")
    report(store, "start", 1000, "running", worker="b")
    assert outcomes(client) == [("job:1000", "lost")]
    assert run(client).worker == "b"


def test_a_run_beat_waits_for_lowers_the_entry_score_when_it_ends(app, entry):
    store, client = store_for(app), store_for(app).client
    client.hset(entry, RUN, json.dumps({"task_id": "job:1000", "due_ms": 1000,
                                        "state": "queued", "at": 1, "wake": True}))
    client.zadd("redbeat::schedule", {entry: 4e9})
    report(store, "start", 1000, "running")
    assert run(client).wake and client.zscore("redbeat::schedule", entry) == 4e9
    report(store, "finish", 1000, "retry")
    assert client.zscore("redbeat::schedule", entry) == 4e9  # a retry goes on
    report(store, "finish", 1000, "success")
    assert client.zscore("redbeat::schedule", entry) < 4e9 and not run(client).wake


def test_nothing_is_written_for_an_entry_that_is_gone(app):
    store = store_for(app)
    assert report(store, "start", 1000, "running") == "gone"
    assert not store.client.exists("redbeat:job", "redbeat::outcomes")


def test_runs_beat_gave_up_on_are_appended_in_one_call(app, entry):
    store, client = store_for(app), store_for(app).client
    RedBeatSchedulerEntry("other", "tasks.job", 60, app=app).save()
    store.append_outcomes([("redbeat:job", {"task_id": "job:1", "due_ms": 1, "state": "lost"}),
                           ("redbeat:other", {"task_id": "other:1", "due_ms": 1,
                                              "state": "lost"}),
                           ("redbeat:gone", {"task_id": "gone:1", "due_ms": 1,
                                             "state": "lost"})], 100, {"redbeat:gone"})
    assert outcomes(client) == [("job:1", "lost"), ("other:1", "lost")]
    assert client.zscore("redbeat::failing-runs", "redbeat:other") == 1
    assert client.hget("redbeat:job", RUN) is None  # the commit writes the field, not this


def test_on_redis_cluster_every_outcome_key_shares_the_schedules_slot():
    """With a hash-tagged prefix, the worker's reports, beat's watched read and commit,
    and the lost records all run as scripts on the one slot of the schedule."""
    from conftest import make_app
    from support.deployments import ClusterDeployment
    from support.recording import Recording

    deployment = ClusterDeployment().start()
    try:
        app = make_app(deployment.url, redbeat_key_prefix="{redbeat}:", redbeat_lost_after=60)
        RedBeatSchedulerEntry("c", "tasks.c", 1, app=app, overlap="skip",  # due at once
                              last_run_at=datetime.now(timezone.utc) - timedelta(seconds=1)
                              ).save()
        scheduler = Recording(app)
        for _ in range(200):
            time.sleep(max(0.0, min(scheduler.tick(), 0.2)))
            if scheduler.task_ids:
                break
        (task_id,) = scheduler.task_ids[:1]
        store, key = store_for(app), "{redbeat}:c"
        due_ms = int(task_id.rsplit(":", 1)[1])
        assert RunRecord.parse(store.client.hget(key, RUN)).state == "queued"
        base = {"task_id": task_id, "due_ms": due_ms, "worker": "w"}
        assert store.report_run(key, "start", {**base, "state": "running"}, 100, 60) == ("run",
                                                                                         60)
        assert store.report_run(key, "finish", {**base, "state": "success"}, 100,
                                 60).written == "run"
        store.append_outcomes([(key, {**base, "state": "lost"})], 100)
        assert [f["outcome"] for _, f in store.client.xrange("{redbeat}::outcomes")] == [
            "success", "lost"]
        scheduler.close()
    finally:
        deployment.stop()


def test_a_running_run_is_kept_alive_and_its_bound_returned(app, entry):
    store, client = store_for(app), store_for(app).client
    client.hset(entry, "policy", json.dumps({"lost_after": 30}))
    started = store.report_run(entry, "start", {"task_id": "job:1", "due_ms": 1,
                                                "state": "running"}, 100, 3600)
    assert started == ("run", 30.0)  # the entry's own bound wins
    before = run(client).at
    time.sleep(0.01)
    assert report(store, "alive", 1, "running") == "run" and run(client).at > before
    report(store, "finish", 1, "success")
    assert report(store, "alive", 1, "running") == "stale"  # it ended: nothing to keep
    assert run(client).state == "success"


def test_the_workers_acl_user_of_the_docs_can_report():
    """docs/outcomes.md's ACL line for the workers' Redis user is enough for every
    report (the line is read from the page, so it cannot drift)."""
    import re
    from pathlib import Path

    from conftest import make_app
    from support.deployments import acl_server

    page = (Path(__file__).parent.parent / "docs" / "outcomes.md").read_text()
    line = re.search(r"ACL SETUSER worker on >secret ~redbeat:\* &redbeat:\* \\\n(.*)\n", page)
    assert line, "docs/outcomes.md has no worker ACL line"
    with acl_server("redbeat:", commands=line.group(1).strip(), username="worker") as server:
        admin = server.client()
        admin.hset("redbeat:job", "definition", "{}")
        app = make_app(server.beat_url)
        store = store_for(app)
        assert report(store, "start", 1000, "running") == "run"
        assert report(store, "alive", 1000, "running") == "run"
        assert report(store, "finish", 1000, "failure", error="x") == "run"
        assert [f["outcome"] for _, f in admin.xrange("redbeat::outcomes")] == ["failure"]

"""End to end: real `celery beat` and `celery worker` processes on a Redis broker."""

from __future__ import annotations

import json

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.schedulers import get_redis
from support.processes import Cluster
from support.waiting import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster(tmp_path, redis_server):
    broker_url = redis_server.url[:-1] + "1"  # db 1 as the broker, db 0 for the schedule
    running = Cluster(tmp_path, redis_server.url, broker_url)
    yield running
    running.stop()


def test_entries_saved_from_python_and_from_raw_redis_are_executed(cluster, redis_server):
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("from-python", "beatapp.record", 1.0, args=["python"],
                          app=app).save()
    client = get_redis(app)
    client.hset("redbeat:from-raw", "definition", json.dumps({
        "name": "from-raw", "task": "beatapp.record", "args": ["raw"],
        "schedule": {"__type__": "interval", "every": 1, "relative": False}}))
    client.zadd("redbeat::schedule", {"redbeat:from-raw": 0})
    worker = cluster.worker()
    beat = cluster.beat("beat")
    beat.wait_for("Leading as")

    def both_ran() -> bool:
        tags = [run["tag"] for run in cluster.executions()]
        return tags.count("python") >= 2 and tags.count("raw") >= 2

    wait_until(both_ran, 120, f"executions\n{beat.log()}\n{worker.log()}")
    runs = cluster.executions()
    python_ids = [run["id"] for run in runs if run["tag"] == "python"]
    assert all(task_id.startswith("from-python:") for task_id in python_ids)
    assert len(set(python_ids)) == len(python_ids)  # one id per slot
    assert beat.terminate() == 0
    assert "Released the lock" in beat.log()

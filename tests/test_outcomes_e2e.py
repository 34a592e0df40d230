"""End to end, the workers' side of issue 27: real ``celery beat`` and ``celery worker``
processes, on a Redis broker and on RabbitMQ (127.0.0.1:5672, a queue of the test's own,
deleted afterwards; skipped when it is not there). A worker whose app sets
``redbeat_worker_outcomes`` (the setting alone: the ``celery`` command loads redbeat)
records success, failure (with its error line), retry, and a run whose worker was
SIGKILLed mid-task as lost; a worker without the setting records nothing and runs the
same tasks as before."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
import redis
from kombu import Connection

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.keys import RUN
from redbeat.runs import RunRecord
from support.processes import HANG, Cluster
from support.waiting import wait_until
from test_e2e_publish import RABBITMQ, rabbitmq_up

pytestmark = pytest.mark.e2e


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request, redis_server):
    """(broker url, queue name of this test); RabbitMQ's queue is deleted afterwards."""
    queue = f"rb{uuid.uuid4().hex[:10]}"
    if request.param == "redis":
        yield redis_server.url[:-1] + "1", queue
        return
    if not rabbitmq_up():
        pytest.skip("no RabbitMQ on 127.0.0.1:5672")
    yield RABBITMQ, queue
    with Connection(RABBITMQ) as connection:
        channel = connection.channel()
        channel.queue_delete(queue)
        channel.exchange_delete(queue)


def queue_settings(queue: str) -> dict:
    return {"task_default_queue": queue, "task_default_exchange": queue,
            "task_default_routing_key": queue, "worker_enable_remote_control": False,
            "worker_prefetch_multiplier": 1}


def save(app, name: str, task: str, every: float, args=(), **policy) -> None:
    RedBeatSchedulerEntry(name, task, every, args=[name, *args], app=app,
                          last_run_at=datetime.now(timezone.utc) - timedelta(seconds=every),
                          **policy).save()


def outcomes(client: redis.Redis, name: str) -> list[dict[str, str]]:
    return [fields for _, fields in client.xrange("redbeat::outcomes")
            if fields["key"] == f"redbeat:{name}"]


def run_of(client: redis.Redis, name: str) -> RunRecord | None:
    return RunRecord.parse(client.hget(f"redbeat:{name}", RUN))


def test_a_worker_records_success_failure_retry_and_a_killed_run(tmp_path, redis_server,
                                                                  broker):
    broker_url, queue = broker
    client = redis_server.client()
    app = make_app(redis_server.url)
    save(app, "ok", "beatapp.record", 2)
    save(app, "bad", "beatapp.fail", 2)
    save(app, "flaky", "beatapp.flaky", 3)
    cluster = Cluster(tmp_path, redis_server.url, broker_url, **queue_settings(queue),
                      redbeat_worker_outcomes=True, redbeat_lost_after=2)
    try:
        cluster.beat("beat")
        worker = cluster.worker("w1", queues=queue)

        def reported() -> bool:
            ok, bad, flaky = (outcomes(client, name) for name in ("ok", "bad", "flaky"))
            return (any(o["outcome"] == "success" for o in ok)
                    and any(o["outcome"] == "failure" for o in bad)
                    and [o["outcome"] for o in flaky][:2] == ["retry", "success"])
        wait_until(reported, 60, "success, failure and retry recorded")

        record = run_of(client, "ok")
        assert record and (record.worker or "").startswith("w1@")
        success = next(o for o in outcomes(client, "ok") if o["outcome"] == "success")
        assert success["task_id"].startswith("ok:") and float(success["runtime"]) >= 0
        assert float(success["finished"]) >= float(success["started"])
        failure = next(o for o in outcomes(client, "bad") if o["outcome"] == "failure")
        assert failure["error"] == "ValueError: boom bad"
        assert outcomes(client, "flaky")[0]["error"].startswith("Retry")
        assert client.zscore("redbeat::failing-runs", "redbeat:bad") >= 1
        assert client.zscore("redbeat::failing-runs", "redbeat:ok") is None

        # a run whose worker is SIGKILLed mid-task: recorded as running, then lost once
        # it stayed silent past redbeat_lost_after and a later run of the entry starts
        client.set(HANG, 1)
        save(app, "victim", "beatapp.sleep", 2, args=(-1,))
        wait_until(lambda: (run_of(client, "victim") or RunRecord("", 0, "queued", 0)).state
                   == "running", 30, "the victim's run started")
        killed = run_of(client, "victim")
        worker.kill()
        client.delete(HANG)
        cluster.worker("w2", queues=queue)
        wait_until(lambda: any(o["outcome"] == "lost" and o["task_id"] == killed.task_id
                               for o in outcomes(client, "victim")), 60,
                   "the killed run recorded as lost")
    finally:
        cluster.stop()


def test_a_worker_without_the_setting_records_nothing(tmp_path, redis_server, broker):
    broker_url, queue = broker
    client = redis_server.client()
    app = make_app(redis_server.url)
    save(app, "ok", "beatapp.record", 1)
    cluster = Cluster(tmp_path, redis_server.url, broker_url, **queue_settings(queue))
    try:
        cluster.beat("beat")
        cluster.worker("w1", queues=queue)
        wait_until(lambda: len(cluster.executions()) >= 2, 60, "two runs")
        assert client.hget("redbeat:ok", RUN) is None
        assert not client.exists("redbeat::outcomes", "redbeat::failing-runs")
        assert all(run["id"].startswith("ok:") for run in cluster.executions())
    finally:
        cluster.stop()

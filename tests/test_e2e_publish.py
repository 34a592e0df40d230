"""End to end, the batched publish: a burst of entries due at once, sent by a real
``celery beat`` and run by real ``celery worker`` processes, on a Redis broker and on
RabbitMQ (127.0.0.1:5672; skipped when it is not there). Every message is run exactly
once with its slot's task id, its arguments, its queue, exchange and priority; an
expired one is never run; the publish signals fire once per message; and a subclass
that overrides ``send_task`` still gets every slot through its override."""

from __future__ import annotations

import json
import socket
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import redis
from kombu import Connection

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.planning import due_ms, slot_task_id
from support.processes import PUBLISHED, Cluster
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"
#: entries due at once, sent in BURST // BATCH ticks of one batch each (beat's
#: redbeat_batch_size): several batches, each written at once, 30 entries of each kind
#: (it was 300 in batches of 100: each entry is a message built, sent and run, about
#: 4 ms of CPU between beat and the worker)
BURST = 150
BATCH = 50
#: one in KINDS entries is each of: the default queue; the default queue with a priority;
#: a task that task_routes sends through a non-default exchange; another queue with a
#: priority; a queue no worker reads at first, half of them expiring in a second
KINDS = 5


def rabbitmq_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request, redis_server):
    """(broker url, names unique to this test); RabbitMQ's queues and exchanges are
    deleted afterwards."""
    uid = f"rb{uuid.uuid4().hex[:10]}"
    names = {"default": uid, "mail": f"{uid}.mail", "exchange": f"{uid}.x", "later": f"{uid}.later"}
    if request.param == "redis":
        yield redis_server.url[:-1] + "1", names
        return
    if not rabbitmq_up():
        pytest.skip("no RabbitMQ on 127.0.0.1:5672")
    yield RABBITMQ, names
    with Connection(RABBITMQ) as connection:
        channel = connection.channel()
        for queue in (names["default"], names["mail"], names["later"]):
            channel.queue_delete(queue)
        for exchange in (names["default"], names["exchange"], names["later"]):
            channel.exchange_delete(exchange)


def settings(names: dict[str, str]) -> dict:
    default, mail, later = names["default"], names["mail"], names["later"]
    return {
        "task_queues": {
            default: {"exchange": default, "routing_key": default},
            mail: {
                "exchange": names["exchange"],
                "exchange_type": "direct",
                "routing_key": "mail.key",
            },
            later: {"exchange": later, "routing_key": later},
        },
        "task_default_queue": default,
        "task_default_exchange": default,
        "task_default_routing_key": default,
        "task_routes": {
            "beatapp.routed": {"exchange": names["exchange"], "routing_key": "mail.key"}
        },
        "worker_enable_remote_control": False,  # no pidbox exchange on a shared RabbitMQ
        "beatapp_signals": True,
    }


def burst(
    app, names: dict[str, str], count: int, kinds: int = KINDS, task: str = "beatapp.record"
) -> dict[str, dict]:
    """Save ``count`` entries of the first ``kinds`` kinds, all due now (hourly, last
    run an hour ago); returns what each must run as, by name."""
    due = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=1)
    expected = {}
    for i in range(count):
        kind, name = i % kinds, f"e{i}"
        options: dict = {}
        route = (names["default"], None)
        if kind == 1:
            options = {"priority": i % 10}
        elif kind == 2:
            route = ("mail.key", names["exchange"])
        elif kind == 3:
            options, route = {"queue": names["mail"], "priority": 7}, (names["mail"], None)
        elif kind == 4:
            options = {"queue": names["later"], "expires": 1 if i % 2 else 3600}
            route = (names["later"], None)
        RedBeatSchedulerEntry(
            name,
            "beatapp.routed" if kind == 2 else task,
            3600,
            args=[name, i],
            kwargs={"n": i},
            options=options,
            last_run_at=due - timedelta(hours=1),
            app=app,
        ).save()
        expected[name] = {
            "id": slot_task_id(name, due_ms(due)),
            "args": [name, i],
            "kwargs": {"n": i},
            "routing_key": route[0],
            "exchange": route[1],
            "priority": options.get("priority"),
            "expires": options.get("expires") == 1,
        }
    return expected


def check_runs(runs: list[dict], expected: dict[str, dict]) -> None:
    by_name: dict[str, list[dict]] = {}
    for run in runs:
        by_name.setdefault(run["tag"], []).append(run)
    assert sorted(by_name) == sorted(name for name, want in expected.items() if not want["expires"])
    for name, [run] in by_name.items():  # exactly once each
        want = expected[name]
        assert (run["id"], run["args"], run["kwargs"]) == (
            want["id"],
            want["args"],
            want["kwargs"],
        ), run
        assert run["routing_key"] == want["routing_key"], run
        if want["exchange"]:
            assert run["exchange"] == want["exchange"], run
        if want["priority"] is not None:
            assert run["priority"] == want["priority"], run


def test_a_burst_is_run_once_each_with_its_id_arguments_route_and_priority(
    tmp_path, redis_server, broker
):
    broker_url, names = broker
    cluster = Cluster(tmp_path, redis_server.url, broker_url, **settings(names))
    try:
        expected = burst(make_app(redis_server.url), names, BURST)
        worker = cluster.worker("worker", queues=f"{names['default']},{names['mail']}")
        worker.wait_for("ready.")  # its queues bound before anything is sent
        beat = cluster.beat("beat", redbeat_batch_size=BATCH)
        beat.wait_for("Sending due task", count=BURST)
        sent_at = time.monotonic()
        now_runnable = BURST - BURST // KINDS
        wait_until(
            lambda: cluster.execution_count() >= now_runnable,
            60,
            f"{now_runnable} executions\n{worker.log()[-3000:]}",
        )
        time.sleep(max(0.0, sent_at + 1.5 - time.monotonic()))  # the expiring ones expired
        later = cluster.worker("later", queues=names["later"])
        later.wait_for("ready.")
        runnable = sum(not want["expires"] for want in expected.values())
        wait_until(
            lambda: cluster.execution_count() >= runnable,
            30,
            f"{runnable} executions\n{later.log()[-3000:]}",
        )
        time.sleep(1.0)  # an expired message the worker would wrongly run shows up here
        check_runs(cluster.executions(), expected)
        published = [
            json.loads(raw)
            for raw in redis.Redis.from_url(redis_server.url).lrange(PUBLISHED, 0, -1)
        ]
        ids = sorted(want["id"] for want in expected.values())
        assert sorted(i for when, i in published if when == "before") == ids
        assert sorted(i for when, i in published if when == "after") == ids
        # batched: a batch's messages are all built (before_task_publish) before its one
        # write (after_task_publish); Celery's per-message path alternates the two
        assert [when for when, _ in published[:3]] == ["before"] * 3
    finally:
        cluster.stop()


FALLBACK = """
import logging
from redbeat import RedBeatScheduler


class SendTaskScheduler(RedBeatScheduler):
    def send_task(self, *args, **kwargs):
        logging.getLogger("celery.beat").info("send_task override: %s", kwargs["task_id"])
        return super().send_task(*args, **kwargs)
"""


def test_a_subclass_overriding_send_task_still_sends_each_slot_through_it(tmp_path, redis_server):
    broker_url = redis_server.url[:-1] + "1"
    names = {"default": "celery", "mail": "mail", "exchange": "mailx", "later": "later"}
    cluster = Cluster(tmp_path, redis_server.url, broker_url, **settings(names))
    (tmp_path / "fallback.py").write_text(FALLBACK)
    try:
        # beat calls send_task for the tasks it does not know (all but beatapp.routed)
        expected = burst(
            make_app(redis_server.url), names, 100, kinds=KINDS - 1, task="beatapp.remote"
        )
        worker = cluster.worker("worker", queues="celery,mail", beatapp_remote_task=True)
        worker.wait_for("ready.")
        beat = cluster.beat("beat", scheduler="fallback.SendTaskScheduler")
        wait_until(lambda: cluster.execution_count() >= len(expected), 120, "executions")
        time.sleep(0.5)
        check_runs(cluster.executions(), expected)
        assert beat.log().count("send_task override:") == len(expected) * 3 // 4
    finally:
        cluster.stop()

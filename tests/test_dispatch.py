"""The dispatcher on its own (dispatch.py), no scheduler: slots handed to a writer that
accepts, blocks, fails (the broker cannot be reached) or refuses (the message itself is
wrong), and what the dispatcher reports back. The writer is a real in-process object
standing where Celery's ``apply_async`` goes; the store is a real one on the test's
redis-server (it confirms sends that ended late and records refusals)."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery
from kombu.exceptions import EncodeError, OperationalError

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.dispatch import INLINE, ONE_BY_ONE, Dispatcher
from redbeat.lock import Lease
from redbeat.metrics import Recorder
from redbeat.runtime import store_for
from redbeat.settings import ensure_conf
from support.recording import Clock
from support.replies import error_reply


class Writer:
    """Publishes a slot by recording its task id; told to block until released, to fail
    as an unreachable broker does, or to refuse a slot for what it is."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.calls: list[str] = []
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()
        self.failure: BaseException | None = None
        self.refuse: dict[str, BaseException] = {}

    def __call__(self, entry: RedBeatSchedulerEntry, task_id: str) -> None:
        self.calls.append(task_id)
        self.entered.set()
        assert self.open.wait(30), "the test never released the writer"
        if self.failure is not None:
            raise self.failure
        if task_id in self.refuse:
            raise self.refuse[task_id]
        self.written.append(task_id)


class Seat:
    """What the dispatcher asks of its scheduler, set by the test."""

    def __init__(self) -> None:
        self.leading = True

    def may_send(self, within: float) -> bool:
        return self.leading


def dispatcher_for(
    app: Celery, writer: Writer, seat: Seat | None = None, monotonic: Any = time.monotonic
) -> Dispatcher:
    seat = seat or Seat()
    return Dispatcher(
        app,
        ensure_conf(app),
        Recorder(),
        store=lambda: store_for(app),
        node_id=lambda: "test:1",
        send_one=writer,
        producer=lambda connection: app.amqp.Producer(connection, auto_declare=False),
        may_send=seat.may_send,
        monotonic=monotonic,
    )


def slots(app: Celery, *names: str) -> list[tuple[RedBeatSchedulerEntry, str]]:
    return [
        (RedBeatSchedulerEntry(name, f"tasks.{name}", 60.0, app=app), f"{name}:1") for name in names
    ]


def hold(app: Celery, task_id: str) -> None:
    """A pending record for ``task_id``, as a claim leaves one."""
    store_for(app).hold(task_id, '{"key": "redbeat:x", "due": 0}', "{}")


def test_slots_are_written_in_order_and_reported_done(app):
    writer = Writer()
    dispatcher = dispatcher_for(app, writer)
    sent = dispatcher.send(slots(app, "a", "b", "c"), None, ONE_BY_ONE, 5.0)
    assert sent.done == writer.written == ["a:1", "b:1", "c:1"]
    assert not sent.broker_failed and not sent.lease_lost
    assert threading.current_thread().name != "redbeat-publish"
    assert any(t.name == "redbeat-publish" for t in threading.enumerate())
    dispatcher.close()


def test_a_blocking_writer_costs_one_bounded_wait_then_its_late_send_is_not_repeated(app):
    writer = Writer()
    writer.open.clear()
    dispatcher = dispatcher_for(app, writer)
    hold(app, "a:1")
    started = time.monotonic()
    sent = dispatcher.send(slots(app, "a"), None, ONE_BY_ONE, 0.2)
    assert sent.done == [] and sent.broker_failed
    assert time.monotonic() - started < 5  # bounded by the wait, not by the writer
    # a later tick does not queue behind the send still under way
    again = dispatcher.send(slots(app, "a", "b"), None, ONE_BY_ONE, 0.2)
    assert again.done == [] and again.broker_failed and writer.calls == ["a:1"]
    writer.open.set()  # the broker answers after all
    deadline = time.monotonic() + 30
    pending = app.redbeat_conf.keys.pending
    client = store_for(app).client
    while client.zscore(pending, "a:1") is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.zscore(pending, "a:1") is None  # the thread confirmed it
    assert not client.exists(f"{pending}:a:1")
    # the next tick read "a:1" as pending before that confirmation: it is reported done
    # without being written again
    # a liveness bound, not a budget: the send returns once both are written (a loaded
    # CI run on a moved clock took longer than the 5 s this once allowed)
    after = dispatcher.send(slots(app, "a", "b"), None, ONE_BY_ONE, 60.0)
    assert after.done == ["a:1", "b:1"]
    assert writer.written == ["a:1", "b:1"]
    dispatcher.close()


@pytest.mark.parametrize(
    "failure",
    [
        OperationalError("connection refused"),
        ConnectionResetError(104, "reset by peer"),
        error_reply("OOM command not allowed when used memory > 'maxmemory'."),
        error_reply("READONLY You can't write against a read only replica."),
    ],
    ids=["unreachable", "reset", "oom", "readonly"],
)
def test_a_failing_writer_leaves_the_slot_and_those_after_it_pending(app, failure, caplog):
    """The broker cannot take it now: held (not recorded as a failure), logged once for
    the whole outage, tried again with the same task id when it answers."""
    writer = Writer()
    writer.failure = failure
    dispatcher = dispatcher_for(app, writer)
    sent = dispatcher.send(slots(app, "a", "b"), None, ONE_BY_ONE, 5.0)
    assert sent.done == [] and sent.broker_failed and writer.calls == ["a:1"]
    assert dispatcher.send(slots(app, "a", "b"), None, ONE_BY_ONE, 5.0).done == []
    assert caplog.text.count("cannot take it now") == 1
    assert not store_for(app).client.exists(app.redbeat_conf.keys.failing)
    writer.failure = None  # back: the same slots go out, in order
    assert dispatcher.send(slots(app, "a", "b"), None, ONE_BY_ONE, 5.0).done == ["a:1", "b:1"]
    dispatcher.close()


def test_an_entry_the_broker_refuses_goes_last_and_holds_back_only_its_own_slots(app, caplog):
    """The broker answers one entry's slots with an error of their own (its queue: a
    Redis key of another type) and takes the others'. The first refusal, all that was
    asked, looks like an outage (one line, the send stops); from then on that entry's
    slots go after the others', only its oldest is tried, and its refusal stops no one
    else's; once it is taken, the entry's other slots follow it, in order."""
    wrongtype = error_reply(
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    )
    writer = Writer()
    writer.refuse = {"j:1": wrongtype, "j:2": wrongtype}
    dispatcher = dispatcher_for(app, writer)
    (j, _), (a, _), (b, _) = slots(app, "j", "a", "b")
    first = dispatcher.send([(j, "j:1"), (a, "a:1")], None, ONE_BY_ONE, 5.0)
    assert first.done == [] and first.broker_failed and writer.calls == ["j:1"]
    for tick in (1, 2):
        writer.calls.clear()
        sent = dispatcher.send(
            [(j, "j:1"), (j, "j:2"), (a, f"a:{tick}"), (b, f"b:{tick}")], None, ONE_BY_ONE, 5.0
        )
        assert sent.done == [f"a:{tick}", f"b:{tick}"] and not sent.broker_failed
        assert writer.calls == [f"a:{tick}", f"b:{tick}", "j:1"]  # j's oldest, last
    writer.refuse.clear()  # the queue is fixed
    sent = dispatcher.send([(j, "j:1"), (j, "j:2"), (a, "a:3")], None, ONE_BY_ONE, 5.0)
    assert sent.done == writer.written[-3:] == ["a:3", "j:1", "j:2"]
    assert caplog.text.count("cannot take it now") == 1
    assert not store_for(app).client.exists(app.redbeat_conf.keys.failing)  # none dropped
    dispatcher.close()


def test_a_refused_slot_is_dropped_recorded_and_does_not_block_the_others(app):
    writer = Writer()
    writer.refuse["b:1"] = EncodeError("cannot serialise")
    dispatcher = dispatcher_for(app, writer)
    due = slots(app, "a", "b", "c")
    due[1][0].save()  # a failure is recorded on its entry
    sent = dispatcher.send(due, None, ONE_BY_ONE, 5.0)
    assert sent.done == ["a:1", "b:1", "c:1"] and not sent.broker_failed
    assert writer.written == ["a:1", "c:1"]
    failing = store_for(app).client.zrange(app.redbeat_conf.keys.failing, 0, -1)
    assert failing == ["redbeat:b"]
    dispatcher.close()


def test_nothing_is_sent_once_the_node_may_no_longer_send(app):
    writer, seat = Writer(), Seat()
    seat.leading = False
    dispatcher = dispatcher_for(app, writer, seat)
    sent = dispatcher.send(slots(app, "a"), None, ONE_BY_ONE, 5.0)
    assert sent.done == [] and writer.calls == []
    seat.leading = True
    dispatcher.close()  # closed: no send starts either
    assert dispatcher.send(slots(app, "a"), None, ONE_BY_ONE, 5.0).done == []
    dispatcher.open()
    assert dispatcher.send(slots(app, "a"), None, ONE_BY_ONE, 5.0).done == ["a:1"]
    dispatcher.close()


def test_a_lease_that_cannot_be_renewed_stops_the_sends(app):
    """A slow broker makes the sends outlast a third of the lease: the dispatcher renews
    it between sends, and stops when another node holds it."""
    clock = Clock(1000.0)
    writer = Writer()
    dispatcher = dispatcher_for(app, writer, monotonic=clock)
    lease = Lease(store_for(app), app.redbeat_conf.keys.lock, 6.0)  # never taken

    def slow(entry: RedBeatSchedulerEntry, task_id: str) -> None:
        writer(entry, task_id)
        clock.now += 3.0  # each send takes half the lease

    dispatcher.send_one = slow
    sent = dispatcher.send(slots(app, "a", "b", "c"), lease, INLINE, 5.0)
    assert sent.lease_lost and sent.done == ["a:1"]


def test_a_renewed_lease_counts_from_when_the_renewal_was_asked_for(app):
    """A renewal whose reply comes back late may have been applied as soon as it was
    asked for: the lease a send is measured against starts then, not at the reply, or
    a starved leader would think its lease lasts longer than it does."""
    clock = Clock(1000.0)
    writer = Writer()
    writer.open.set()
    dispatcher = dispatcher_for(app, writer, monotonic=clock)

    class SlowReply(Lease):
        reply_after = 0.0

        def renew(self) -> bool:
            renewed = super().renew()
            clock.now += self.reply_after  # the reply comes that long after Redis renewed
            return renewed

    lease = SlowReply(store_for(app), app.redbeat_conf.keys.lock, 6.0)
    assert lease.acquire(blocking=False)
    lease.reply_after = 1.5

    def slow(entry: RedBeatSchedulerEntry, task_id: str) -> None:
        writer(entry, task_id)
        clock.now += 3.0  # each send outlasts a third of the lease

    dispatcher.send_one = slow
    sent = dispatcher.send(slots(app, "a", "b"), lease, INLINE, 5.0)
    assert sent.done == ["a:1", "b:1"]
    assert lease.renewed_at == 1003.0  # asked after the first send, answered at 1004.5


def test_the_inline_path_sends_on_the_callers_thread(app):
    threads: list[str] = []
    writer = Writer()

    def recording(entry: RedBeatSchedulerEntry, task_id: str) -> None:
        threads.append(threading.current_thread().name)
        writer(entry, task_id)

    dispatcher = dispatcher_for(app, writer)
    dispatcher.send_one = recording
    assert dispatcher.send(slots(app, "a"), None, INLINE, 5.0).done == ["a:1"]
    assert threads == [threading.current_thread().name]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("abc", "redbeat_publish_timeout='abc' is not a number"),
        (-1, "redbeat_publish_timeout=-1 must be above 0"),
        (0, "redbeat_publish_timeout=0 must be above 0"),
    ],
)
def test_a_bad_publish_timeout_stops_beat_at_start(redis_server, value, problem):
    with pytest.raises(SystemExit, match=problem):
        RedBeatScheduler(make_app(redis_server.url, redbeat_publish_timeout=value))


@pytest.mark.parametrize(
    ("value", "lease", "timeout"),
    [
        (None, 20, 3.0),
        ("0.5", None, 0.5),
        (7, 20, 7.0),
        (None, None, 2.5),  # the default 5-s lease: a send lasts at most half of it
        (3, 4, 2.0),
    ],
)
def test_the_publish_timeout_reaches_the_dispatcher_and_the_broker_sockets(
    redis_server, value, lease, timeout
):
    """At most half the lease: the lease lets a send start only while that much of it is
    left, so a send that lasted longer could end after another node took the lease."""
    conf = {} if value is None else {"redbeat_publish_timeout": value}
    if lease is not None:
        conf["redbeat_lock_timeout"] = lease
    app = make_app(redis_server.url, broker_url=redis_server.url, **conf)
    scheduler = RedBeatScheduler(app)
    assert scheduler.dispatcher.publish_timeout == timeout
    options = scheduler.connection.transport_options
    assert options["socket_timeout"] == options["socket_connect_timeout"] == timeout


def test_a_lease_changed_after_start_bounds_the_sends_from_then_on(redis_server):
    """2.4.2 code may assign the lock timeout, or a redis-py lock of its own: the broker
    connection is made again with the new bound."""
    app = make_app(redis_server.url, broker_url=redis_server.url, redbeat_lock_timeout=20)
    scheduler = RedBeatScheduler(app)
    assert scheduler.connection.transport_options["socket_timeout"] == 3.0
    scheduler.lock_timeout = 4
    assert scheduler.connection.transport_options["socket_timeout"] == 2.0
    scheduler.lock = redis_server.client().lock(scheduler.lock_key, timeout=5)
    scheduler.tick()  # the tick adopts it
    assert scheduler.connection.transport_options["socket_timeout"] == 2.5


def mutable_class_state(cls: type) -> dict[str, object]:
    """The class attributes of ``cls`` (its own, not Celery's) that hold mutable data:
    state both threads could touch through the class."""
    immutable = (int, float, str, bytes, bool, tuple, frozenset, type(None), type)
    return {
        name: value
        for name, value in vars(cls).items()
        if not name.startswith("__")
        and not callable(value)
        and not isinstance(value, (property, staticmethod, classmethod, *immutable))
        and not hasattr(value, "__get__")
    }


@pytest.mark.parametrize("cls", [Dispatcher, RedBeatScheduler])
def test_no_mutable_state_lives_on_the_class(cls):
    assert mutable_class_state(cls) == {}


def test_celerys_connection_and_producer_are_the_dispatchers(redis_server):
    app = make_app(redis_server.url, broker_url=redis_server.url)
    scheduler = RedBeatScheduler(app)
    assert scheduler.connection is scheduler.dispatcher.connection
    producer = scheduler.producer
    assert producer is scheduler.dispatcher.producer and producer.connection is not None
    replacement = app.amqp.Producer(scheduler.connection, auto_declare=False)
    scheduler.producer = replacement  # assignable, as Celery's cached property is
    assert scheduler.dispatcher.producer is replacement
    del scheduler.producer  # and forgotten: the next read connects afresh
    assert scheduler.producer is not replacement
    scheduler.close()


def test_a_broker_that_does_not_answer_leaves_nothing_drafted_and_raises_nothing(redis_server):
    """Drafting from templates needs the producer's channel: a hung broker (a real
    redis-server stopped with SIGSTOP) made that raise kombu's OperationalError on the
    tick's thread, which ended beat. Now nothing is drafted; the publish path holds."""
    import os
    import signal

    from redbeat.planning import Claim
    from support.redis_server import RedisServer

    with RedisServer() as broker:
        app = make_app(redis_server.url, broker_url=broker.url, redbeat_publish_timeout=0.5)
        dispatcher = dispatcher_for(app, Writer())
        entry = RedBeatSchedulerEntry("hung", "tasks.hung", 60.0, app=app)
        os.kill(broker.process.pid, signal.SIGSTOP)
        try:
            drafts = dispatcher.draft([Claim("hung:1", entry, datetime.now(timezone.utc))])
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        assert drafts == {}


def test_a_quiet_broker_is_pinged_while_the_commit_runs_and_not_again_before_the_send(
    redis_server,
):
    """A Redis broker quiet for a while is pinged before a send (a hung one is found by a
    ping that writes nothing); that ping goes out on the publishing thread while the tick
    drafts and commits, so the send after the commit needs no round trip of its own."""
    from support.recording import T0, at
    from support.redis_server import RedisServer
    from support.waiting import wait_until

    with RedisServer() as broker:
        app = make_app(redis_server.url, broker_url=broker.url)
        RedBeatSchedulerEntry("job", "tasks.job", 1.0, app=app, last_run_at=at(-1)).save()
        # the monotonic clock stands still but where the test moves it: on a loaded machine
        # a real one passed PROBE_AFTER between the early ping and the send, which then
        # pinged again, as it should after a quiet that long
        monotonic = Clock(100.0)
        scheduler = RedBeatScheduler(app, clock=Clock(), monotonic=monotonic)
        assert scheduler.producer is not None  # connected, as beat is at start
        scheduler.tick()  # takes the lock
        monotonic.now += 1.0  # the broker quiet for longer than PROBE_AFTER
        # the sends' pooled connection made before counting: making it sends a PING of its
        # own (MONITOR: PING, HELLO 3, then the probe's PING), which a loaded machine let
        # the count below see alone, as if it were the probe's
        with scheduler.producer.channel.conn_or_acquire() as client:
            client.ping()
        watcher = broker.client()
        watcher.config_resetstat()

        def pings() -> int:
            return int(watcher.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))

        real_commit = scheduler.store.commit
        at_commit = []

        def commit_once_pinged(*args: Any) -> Any:
            wait_until(lambda: pings() >= 1, 30, "the broker pinged during the commit")
            at_commit.append(pings())
            return real_commit(*args)

        scheduler.store.commit = commit_once_pinged
        scheduler.tick()
        scheduler.store.commit = real_commit
        assert pings() == at_commit[0]  # none after the commit
        assert [json.loads(raw)["headers"]["id"] for raw in watcher.lrange("celery", 0, -1)] == [
            f"job:{round(T0 * 1000)}"
        ]
        scheduler.close()

"""publish.py against Celery's own publish, on a real Redis broker: for each set of
options, the message the batched path writes is the one Celery's per-message
``apply_async`` writes (same key, same JSON, but for the delivery tag and the instants
Celery computes from the clock), and what it cannot reproduce goes Celery's way."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta, timezone

import pytest
from celery.signals import after_task_publish, before_task_publish
from kombu import Exchange, Queue

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry, publish
from support.redis_server import RedisServer

QUEUES = [
    Queue("celery", Exchange("celery"), routing_key="celery"),
    Queue("mail", Exchange("mail"), routing_key="mail"),
    Queue("reports", Exchange("topics", type="topic"), routing_key="reports.#"),
]
ROUTES = {
    "tasks.routed": {"queue": "mail"},
    "tasks.topic": {"queue": "reports", "routing_key": "reports.daily"},
}

CASES = {
    "plain": ("tasks.plain", {}),
    "queue and priority": ("tasks.plain", {"queue": "mail", "priority": 7}),
    "task_routes": ("tasks.routed", {}),
    "task_routes to a topic exchange": ("tasks.topic", {}),
    "expires seconds": ("tasks.plain", {"expires": 60}),
    "countdown": ("tasks.plain", {"countdown": 30}),
    "headers and limits": (
        "tasks.plain",
        {"headers": {"tenant": "a"}, "time_limit": 9, "soft_time_limit": 5, "ignore_result": True},
    ),
    "registered task": ("tests.registered", {}),
}


@pytest.fixture
def broker():
    with RedisServer() as server:
        yield server


@pytest.fixture
def scheduler(redis_server, broker):
    app = make_app(
        redis_server.url,
        broker_url=broker.url,
        task_queues=QUEUES,
        task_routes=ROUTES,
        task_default_queue="celery",
        task_queue_max_priority=9,
    )

    @app.task(name="tests.registered", queue="reports", priority=3)
    def registered(x, y=0):
        return x

    return RedBeatScheduler(app)


def written(client) -> dict[str, list[dict]]:
    """Every message in the broker, by list key, the newest first."""
    return {
        key: [json.loads(raw) for raw in client.lrange(key, 0, -1)]
        for key in client.keys("*")
        if client.type(key) == "list"
    }


def comparable(message: dict) -> dict:
    """A message with what depends on the instant it was built taken out."""
    message = json.loads(json.dumps(message))
    message["properties"].pop("delivery_tag")
    if "expiration" in message["properties"]:  # milliseconds: to the second
        message["properties"]["expiration"] = round(int(message["properties"]["expiration"]) / 1000)
    for name in ("eta", "expires"):
        if message["headers"].get(name):
            message["headers"][name] = message["headers"][name][:16]  # to the minute
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


@pytest.mark.parametrize("case", list(CASES))
def test_the_batched_message_is_celerys_message(scheduler, broker, case):
    task, options = CASES[case]
    entry = RedBeatSchedulerEntry(
        "e", task, 60, args=[1], kwargs={"y": 2}, options=options, app=scheduler.app
    )
    client = broker.client()
    scheduler.send_slot(entry, "e:1")
    celerys = written(client)
    client.delete(*celerys)  # the messages; the exchange bindings stay, as in a broker
    message = publish.Builder(scheduler.app).prepare(entry, "e:1")
    assert publish.write_redis(scheduler.producer.channel, [message]) == [None]
    ours = written(client)
    assert list(ours) == list(celerys) and len(ours) == 1, (ours, celerys)
    key = next(iter(ours))
    assert [comparable(m) for m in ours[key]] == [comparable(m) for m in celerys[key]]


def test_priority_goes_to_kombus_priority_sub_queue(scheduler, broker):
    entry = RedBeatSchedulerEntry(
        "e", "tasks.plain", 60, options={"priority": 7}, app=scheduler.app
    )
    message = publish.Builder(scheduler.app).prepare(entry, "e:1")
    publish.write_redis(scheduler.producer.channel, [message])
    assert broker.client().llen("celery\x06\x166") == 1  # kombu's steps: 0, 3, 6, 9


def test_signals_fire_before_and_after_the_write(scheduler):
    seen = []

    def before(sender=None, headers=None, **kwargs):
        seen.append(("before", sender, headers["id"]))

    def after(sender=None, headers=None, **kwargs):
        seen.append(("after", sender, headers["id"]))

    before_task_publish.connect(before, weak=False)
    after_task_publish.connect(after, weak=False)
    try:
        entries = [
            RedBeatSchedulerEntry(f"e{i}", "tasks.plain", 60, app=scheduler.app) for i in range(2)
        ]
        slots, batch = scheduler.dispatcher._build(
            [(entry, f"{entry.name}:1") for entry in entries]
        )
        sent = scheduler.dispatcher._send_slots(slots, batch)
    finally:
        before_task_publish.disconnect(before)
        after_task_publish.disconnect(after)
    assert sent == ["e0:1", "e1:1"]
    assert seen == [
        ("before", "tasks.plain", "e0:1"),
        ("before", "tasks.plain", "e1:1"),
        ("after", "tasks.plain", "e0:1"),
        ("after", "tasks.plain", "e1:1"),
    ]


@pytest.mark.parametrize(
    "options", [{"link": None, "retry_policy": {"max_retries": 1}}, {"queue": "bcast"}]
)
def test_what_it_does_not_reproduce_is_left_to_celery(scheduler, options):
    scheduler.app.conf.task_queues = [*QUEUES]
    entry = RedBeatSchedulerEntry("e", "tasks.plain", 60, options=options, app=scheduler.app)
    if options.get("queue") == "bcast":
        from kombu.common import Broadcast

        entry.options["queue"] = Broadcast("bcast")
    with pytest.raises(publish.Unsupported):
        publish.Builder(scheduler.app).prepare(entry, "e:1")


def test_a_message_redis_refuses_is_dropped_and_the_others_are_written(scheduler, broker):
    client = broker.client()
    entries = [
        RedBeatSchedulerEntry("a", "tasks.plain", 60, app=scheduler.app),
        RedBeatSchedulerEntry("b", "tasks.plain", 60, options={"queue": "mail"}, app=scheduler.app),
    ]
    builder = publish.Builder(scheduler.app)
    messages = [builder.prepare(entry, f"{entry.name}:1") for entry in entries]
    publish.declare(scheduler.producer.channel, messages)
    client.set("mail", "not a list")  # LPUSH to it fails with WRONGTYPE
    refusals = publish.write_redis(scheduler.producer.channel, messages)
    assert refusals[0] is None and "WRONGTYPE" in str(refusals[1])
    assert client.llen("celery") == 1


def test_expires_as_a_datetime_becomes_the_message_ttl(scheduler):
    expires = datetime.now(timezone.utc) + timedelta(seconds=90)
    entry = RedBeatSchedulerEntry(
        "e", "tasks.plain", 60, options={"expires": expires}, app=scheduler.app
    )
    message = publish.Builder(scheduler.app).prepare(entry, "e:1")
    assert 88_000 <= int(message.properties["expiration"]) <= 90_000


REPR_CASES = [
    ([], {}),
    ([1, "it's", None], {"y": 2.5}),
    ((1, 2), {"d": {"n": [True]}}),
    (["x" * 3000], {"deep": [[[[1]]]]}),
]


@pytest.mark.parametrize(("args", "kwargs"), REPR_CASES)
def test_kept_reprs_are_celerys_and_follow_an_edit(args, kwargs):
    from celery.beat import BeatLazyFunc
    from celery.utils.saferepr import saferepr

    app = make_app("redis://unused")
    # before Celery 5.7 no task_repr_maxlevels: saferepr's own depth, 3
    maxlevels = app.conf.get("task_repr_maxlevels", 3)
    limits = (app.amqp.argsrepr_maxsize, app.amqp.kwargsrepr_maxsize, maxlevels)

    def celerys(entry):  # what as_task_v2 computes for the evaluated arguments
        a, k = list(entry.args or []), dict(entry.kwargs or {})
        return (
            saferepr(a or (), limits[0], maxlevels=limits[2]),
            saferepr(k, limits[1], maxlevels=limits[2]),
        )

    reprs = publish.Reprs()
    entry = RedBeatSchedulerEntry("e", "tasks.plain", 60, args=args, kwargs=kwargs, app=app)

    def ours():
        a = [v() if isinstance(v, BeatLazyFunc) else v for v in entry.args or []]
        k = {n: v() if isinstance(v, BeatLazyFunc) else v for n, v in (entry.kwargs or {}).items()}
        return reprs.get(entry, a, k, limits)

    assert ours() == ours() == celerys(entry)
    entry.args = [*(entry.args or []), "added"]  # a new list
    assert ours() == celerys(entry)
    entry.args[0] = "replaced"  # in place, at the top level
    entry.kwargs["new"] = 1
    assert ours() == celerys(entry)
    calls = iter(range(10))
    entry.args[0] = BeatLazyFunc(lambda: f"lazy{next(calls)}")
    for n in range(2):  # evaluated again each time, never kept
        assert ours()[0] == saferepr([f"lazy{n}", *entry.args[1:]], limits[0], maxlevels=limits[2])


def test_a_batch_leaves_each_list_as_celerys_publishes_one_by_one(scheduler, broker):
    client = broker.client()
    options = [{}, {}, {"queue": "mail"}, {}, {"priority": 7}, {"priority": 7}, {}]
    entries = [
        RedBeatSchedulerEntry(
            f"e{i}", "tasks.plain", 60, args=[i], options=option, app=scheduler.app
        )
        for i, option in enumerate(options)
    ]
    for entry in entries:
        scheduler.send_slot(entry, f"{entry.name}:1")
    celerys = written(client)
    client.delete(*celerys)
    builder = publish.Builder(scheduler.app)
    messages = [builder.prepare(entry, f"{entry.name}:1") for entry in entries]
    assert publish.write_redis(scheduler.producer.channel, messages) == [None] * len(entries)
    ours = written(client)
    assert sorted(ours) == sorted(celerys)
    for key in ours:
        assert [comparable(m) for m in ours[key]] == [comparable(m) for m in celerys[key]]


def test_a_refused_push_refuses_every_message_it_carried(scheduler, broker):
    entries = [
        RedBeatSchedulerEntry(f"e{i}", "tasks.plain", 60, options=option, app=scheduler.app)
        for i, option in enumerate([{"queue": "mail"}, {"queue": "mail"}, {}])
    ]
    builder = publish.Builder(scheduler.app)
    messages = [builder.prepare(entry, f"{entry.name}:1") for entry in entries]
    publish.declare(scheduler.producer.channel, messages)
    broker.client().set("mail", "not a list")
    refusals = publish.write_redis(scheduler.producer.channel, messages)
    assert ["WRONGTYPE" in str(refusal) for refusal in refusals[:2]] == [True, True]
    assert refusals[2] is None and broker.client().llen("celery") == 1


def test_a_queue_whose_declaration_redis_refuses_refuses_only_its_messages(scheduler, broker):
    """kombu declares a queue before its first publish on a connection, and the
    declaration reads the queue's length: a queue key holding a string answers WRONGTYPE
    there already. That refuses the messages for that queue, not the batch: the others
    are written (it raised, and every slot of the batch was held with it)."""
    entries = [
        RedBeatSchedulerEntry(f"e{i}", "tasks.plain", 60, options=option, app=scheduler.app)
        for i, option in enumerate([{"queue": "mail"}, {}, {"queue": "mail"}])
    ]
    builder = publish.Builder(scheduler.app)
    messages = [builder.prepare(entry, f"{entry.name}:1") for entry in entries]
    client = broker.client()
    client.set("mail", "not a list")
    refusals = publish.write_redis(scheduler.producer.channel, messages)
    assert refusals[1] is None and client.llen("celery") == 1
    assert all("WRONGTYPE" in str(refusal) for refusal in (refusals[0], refusals[2]))
    client.delete("mail")  # fixed: declared now, and written
    assert publish.write_redis(scheduler.producer.channel, messages) == [None] * 3
    assert client.llen("mail") == 2 and client.llen("celery") == 2


def test_a_slot_the_batch_cannot_build_is_sent_by_celery_alongside_the_batch(scheduler, broker):
    entries = [
        RedBeatSchedulerEntry("a", "tasks.plain", 60, app=scheduler.app),
        RedBeatSchedulerEntry(
            "b", "tasks.plain", 60, options={"retry_policy": {"max_retries": 1}}, app=scheduler.app
        ),
    ]
    slots, batch = scheduler.dispatcher._build([(entry, f"{entry.name}:1") for entry in entries])
    assert [entry.name for entry, _ in batch.ready] == ["a"]
    assert [entry.name for entry, _ in batch.alone] == ["b"]
    assert scheduler.dispatcher._send_slots(slots, batch) == ["a:1", "b:1"]
    ids = [json.loads(raw)["headers"]["id"] for raw in broker.client().lrange("celery", 0, -1)]
    assert sorted(ids) == ["a:1", "b:1"]


@pytest.mark.parametrize("listening", [True, False])
@pytest.mark.parametrize("meanwhile", ["lock taken", "entry edited"])
def test_messages_made_before_the_commit_go_out_only_once_it_recorded_them(
    scheduler, broker, meanwhile, listening
):
    """The claims' messages are made before the commit (only drafted when a
    receiver listens to ``before_task_publish``): a claim the commit refuses (the lock
    changed hands, or its entry was edited since the read) gets no signal and no
    message; the others get both, once."""
    app = scheduler.app
    ran = datetime.now(timezone.utc) - timedelta(hours=1)
    for name in ("a", "b"):
        RedBeatSchedulerEntry(name, "tasks.plain", 3600.0, app=app, last_run_at=ran).save()
    store = scheduler.store
    real_commit = store.commit

    def commit(*args, **kwargs):  # what another node or an operator does meanwhile
        if meanwhile == "lock taken":
            store.client.set(app.redbeat_conf.lock_key, "other:1:x")
        else:
            RedBeatSchedulerEntry(
                "b", "tasks.plain", 3600.0, args=["edited"], app=app, last_run_at=ran
            ).save()
        return real_commit(*args, **kwargs)

    announced = []

    def before(sender=None, headers=None, **kwargs):
        announced.append(headers["id"].split(":")[0])

    if listening:
        before_task_publish.connect(before, weak=False)
    try:
        scheduler.tick()  # takes the lock
        store.commit = commit
        scheduler.tick()
    finally:
        del store.commit
        before_task_publish.disconnect(before)
    ids = sorted(
        json.loads(raw)["headers"]["id"].split(":")[0]
        for raw in broker.client().lrange("celery", 0, -1)
    )
    expected = [] if meanwhile == "lock taken" else ["a"]
    assert (ids, scheduler.leading) == (expected, meanwhile != "lock taken")
    assert announced == (expected if listening else [])
    scheduler.close()


def test_delivery_tags_are_distinct_version_4_uuids_as_kombu_writes_them():
    import uuid

    tags = publish.delivery_tags(2000)
    parsed = [uuid.UUID(tag) for tag in tags]
    assert len(set(tags)) == 2000 and [str(u) for u in parsed] == tags
    assert {(u.version, u.variant) for u in parsed} == {(4, uuid.RFC_4122)}
    assert publish.delivery_tags(0) == []


@pytest.mark.parametrize("case", list(CASES))
def test_a_template_makes_the_message_the_builder_makes(scheduler, case):
    """Slot after slot of one entry, the template's message is the one built afresh for
    that task id (the tag apart); where the message carries times (countdown, expires),
    no template stands for it."""
    task, options = CASES[case]
    entry = RedBeatSchedulerEntry(
        "e", task, 60, args=[1], kwargs={"y": "e:1"}, options=options, app=scheduler.app
    )
    channel = scheduler.producer.channel
    templates = publish.Templates()
    timed = "countdown" in options or "expires" in options
    for task_id in ("e:1", 'e"2\\', "e:3"):
        builder = publish.Builder(scheduler.app)
        ours = templates.outgoing(builder, channel, entry, task_id, "a-tag")
        built = builder.seal(builder.draft(entry, task_id))
        built.wire = publish._redis_wire(channel, built, "a-tag")
        if timed:  # the instants it was built at apart
            assert comparable(json.loads(ours.wire[0])) == comparable(json.loads(built.wire[0]))
        else:
            assert ours.wire[0] == built.wire[0]
        assert (ours.task_id, ours.headers["id"], ours.properties["correlation_id"]) == (
            task_id,
            task_id,
            task_id,
        )
        assert json.loads(ours.wire[0])["properties"]["delivery_tag"] == "a-tag"
        assert ours.wire[1] == built.wire[1]
    assert (templates.known["e"].pieces is None) == timed


def test_an_edited_or_lazy_entry_is_not_sent_from_an_old_template(scheduler):
    from celery.beat import BeatLazyFunc

    channel = scheduler.producer.channel
    templates = publish.Templates()
    builder = publish.Builder(scheduler.app)

    def args_of(message: publish.Outgoing) -> list:
        return json.loads(base64.b64decode(json.loads(message.wire[0])["body"]))[0]

    entry = RedBeatSchedulerEntry("e", "tasks.plain", 60, args=[1], app=scheduler.app)
    assert args_of(templates.outgoing(builder, channel, entry, "e:1", "t")) == [1]
    edited = RedBeatSchedulerEntry("e", "tasks.plain", 60, args=[2], app=scheduler.app)
    assert args_of(templates.outgoing(builder, channel, edited, "e:2", "t")) == [2]
    edited.args[0] = 3  # changed in place: its items are compared too
    assert args_of(templates.outgoing(builder, channel, edited, "e:3", "t")) == [3]
    counter = iter(range(10))
    lazy = RedBeatSchedulerEntry(
        "lazy", "tasks.plain", 60, args=[BeatLazyFunc(lambda: next(counter))], app=scheduler.app
    )
    assert [
        args_of(templates.outgoing(builder, channel, lazy, f"lazy:{i}", "t")) for i in range(2)
    ] == [[0], [1]]
    assert "lazy" not in templates.known  # no template: its arguments are evaluated each time


def test_templates_made_under_other_settings_are_not_used(scheduler):
    """Templates hold for the builder settings they were made under (compared once per
    batch): a batch under other settings (here the delivery mode) builds its messages
    afresh, and they are what the builder makes."""
    entry = RedBeatSchedulerEntry("e", "tasks.plain", 60, args=[1], app=scheduler.app)
    channel = scheduler.producer.channel
    templates = publish.Templates()

    def mode_of(message: publish.Outgoing) -> int:
        return json.loads(message.wire[0])["properties"]["delivery_mode"]

    first = templates.outgoing(publish.Builder(scheduler.app), channel, entry, "e:1", "t")
    scheduler.app.conf.task_default_delivery_mode = "transient"
    try:
        builder = publish.Builder(scheduler.app)
        ours = templates.outgoing(builder, channel, entry, "e:2", "t")
        built = builder.seal(builder.draft(entry, "e:2"))
        built.wire = publish._redis_wire(channel, built, "t")
    finally:
        scheduler.app.conf.task_default_delivery_mode = "persistent"
    assert (mode_of(first), mode_of(ours)) == (2, 1)
    assert ours.wire == built.wire

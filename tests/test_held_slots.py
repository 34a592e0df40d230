"""Held slots (pending records kept through a broker outage): one stored copy per distinct
definition, the misfire grace honoured at the re-send, re-sends in due order, records
of the older format (definition inside) still re-sent, and slots of an entry edited or
deleted meanwhile re-sent as claimed. Real redis-server for the schedule, a real Redis
broker that goes away and comes back, real Celery publishing, an injected clock."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

import pytest
import redis
from celery import Celery

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry, manage
from redbeat.planning import Backlog, held_backlog
from redbeat.policy import EntryPolicy
from redbeat.runtime import store_for
from redbeat.schedulers import get_redis
from redbeat.store import definition_sha1
from support.held import (
    PENDING,
    forge_record,
    held_count,
    held_definitions,
    held_ids,
    held_keys,
    held_records,
    held_refs,
    nothing_held,
)
from support.processes import LIVENESS
from support.recording import T0, Clock, Recording, at
from support.redis_server import RedisServer


def slot_id(name: str, offset: float) -> str:
    return f"{name}:{round((T0 + offset) * 1000)}"


def published(broker: RedisServer) -> list[tuple[str, list]]:
    """(task id, args) of each message in the broker's default queue, in publish order
    (kombu's Redis transport LPUSHes, so the list holds the newest first)."""
    messages = []
    for raw in reversed(broker.client().lrange("celery", 0, -1)):
        message = json.loads(raw)
        args, _, _ = json.loads(base64.b64decode(message["body"]))
        messages.append((message["headers"]["id"], args))
    return messages


@contextmanager
def outage(redis_server: RedisServer, **conf: object) -> Iterator[tuple[Celery, RedisServer]]:
    """An app on the schedule's Redis whose broker (a real Redis) is running; the test
    stops and starts it."""
    with RedisServer() as broker:
        app = make_app(
            redis_server.url,
            broker_url=broker.url,
            task_publish_retry=False,
            broker_connection_timeout=1,
            **conf,
        )
        yield app, broker


def scheduler_for(app: Celery, clock: Clock) -> RedBeatScheduler:
    scheduler = RedBeatScheduler(app, clock=clock)
    assert scheduler.producer is not None  # connected while the broker is up, as in beat
    return scheduler


def tick_each_second(scheduler: RedBeatScheduler, clock: Clock, start: int, stop: int) -> None:
    for second in range(start, stop):
        clock.now = T0 + second
        scheduler.tick()


def test_a_large_entry_held_for_many_slots_stores_one_copy_of_its_definition(redis_server):
    big = "x" * 1_000_000
    clock = Clock()
    with outage(redis_server) as (app, broker):
        RedBeatSchedulerEntry(
            "big", "tasks.big", 1.0, args=[big], app=app, last_run_at=at(-1)
        ).save()
        scheduler = scheduler_for(app, clock)
        client = get_redis(app)
        definition = client.hget("redbeat:big", "definition")
        broker.stop()
        clock.now = T0 - 1
        scheduler.tick()  # takes the lock
        tick_each_second(scheduler, clock, 0, 20)
        held = held_count(client)
        records = held_records(client)
        pending_bytes = sum(len(message) for message in records.values())
        held_bytes = sum(len(text) for text, _ in held_definitions(client).values())
        memory = sum(client.memory_usage(key) for key in held_keys(client))
        # what the same records cost in the older format, one definition copy in each
        old = {
            task_id: json.dumps({**json.loads(message), "definition": definition})
            for task_id, message in records.items()
        }
        client.hset("other:pending", mapping=old)
        old_bytes = sum(len(message) for message in old.values())
        old_memory = client.memory_usage("other:pending")
        client.delete("other:pending")
        print(
            f"\n{held} held slots of a {len(definition)}-byte definition: pending records "
            f"{pending_bytes} B + held definitions {held_bytes} B (MEMORY USAGE "
            f"{memory} B); a copy in every record (the older format): {old_bytes} B "
            f"(MEMORY USAGE {old_memory} B)"
        )
        assert held == 20
        assert pending_bytes < 10_000  # about 200 bytes a record
        assert len(definition) <= held_bytes < len(definition) + 1000  # one copy
        assert memory < 1.2 * len(definition) < old_memory / 15
        assert held_refs(client, definition_sha1(definition)) == 20

        broker.start()
        # at T0 + 19: no grace configured, every held slot is sent, in due order; a loaded
        # machine may need more than one tick's bounded wait for 20 MB of messages
        deadline = time.monotonic() + LIVENESS
        while not nothing_held(client):
            assert time.monotonic() < deadline, held_count(client)
            scheduler.tick()
        sent = published(broker)
        assert [task_id for task_id, _ in sent] == [slot_id("big", s) for s in range(20)]
        assert all(args == [big] for _, args in sent)
        assert nothing_held(client)  # released
        scheduler.close()


def test_held_slots_past_the_grace_are_dropped_and_counted_others_resent_in_due_order(
    redis_server, caplog
):
    clock = Clock()
    with outage(redis_server, redbeat_misfire_grace_time=5) as (app, broker):
        RedBeatSchedulerEntry(
            "strict", "tasks.strict", 1.0, misfire_grace_time=2, app=app, last_run_at=at(-1)
        ).save()
        RedBeatSchedulerEntry(
            "lenient", "tasks.lenient", 2.0, misfire_grace_time=1000, app=app, last_run_at=at(-2)
        ).save()
        RedBeatSchedulerEntry(
            "default",
            "tasks.default",
            3.0,
            app=app,  # the 5 s default
            last_run_at=at(-3),
        ).save()
        scheduler = scheduler_for(app, clock)
        client = get_redis(app)
        broker.stop()
        clock.now = T0 - 1
        scheduler.tick()  # takes the lock
        tick_each_second(scheduler, clock, 0, 10)
        # past their grace, slots are dropped even while the broker is down: strict's
        # 0..6 and default's 0 and 3, so only what may still be sent stays held
        assert sorted(held_ids(client)) == sorted(
            [slot_id("strict", s) for s in (7, 8, 9)]
            + [slot_id("lenient", s) for s in (0, 2, 4, 6, 8)]
            + [slot_id("default", s) for s in (6, 9)]
        )

        broker.start()
        caplog.clear()
        clock.now = T0 + 10
        scheduler.tick()
        sent = [task_id for task_id, _ in published(broker)]
        held = [
            slot_id("lenient", 0),
            slot_id("lenient", 2),
            slot_id("lenient", 4),
            slot_id("default", 6),
            slot_id("lenient", 6),
            slot_id("lenient", 8),
            slot_id("strict", 8),
            slot_id("default", 9),
            slot_id("strict", 9),
        ]
        assert sent[: len(held)] == held  # due order, original ids
        assert sorted(sent[len(held) :]) == [slot_id("lenient", 10), slot_id("strict", 10)]
        dues = [int(task_id.rsplit(":", 1)[1]) for task_id in sent]
        assert dues == sorted(dues)
        assert nothing_held(client)

        dropped = [r.getMessage() for r in caplog.records if "Dropping held slot" in r.getMessage()]
        assert dropped == [
            f"beat: Dropping held slot {slot_id('strict', 7)}: 3.000 s late, "
            "past its misfire grace time of 2 s"
        ]
        misfires = {
            name: json.loads(client.hget(f"redbeat:{name}", "misfires") or "null")
            for name in ("strict", "lenient", "default")
        }
        assert misfires == {
            "strict": {"skipped": 8, "last_skipped": at(7).isoformat()},
            "lenient": None,
            "default": {"skipped": 2, "last_skipped": at(3).isoformat()},
        }
        assert manage.get_entry(app, "strict").entry.total_run_count == 11  # claims stand
        scheduler.close()


def test_an_old_format_pending_record_is_still_resent(redis_server):
    """A record written before definitions were held once (the definition inside it),
    left by a leader of the previous version: re-sent with its id, counted nowhere."""
    clock = Clock(T0 + 30)
    with outage(redis_server, redbeat_misfire_grace_time=60) as (app, broker):
        entry = RedBeatSchedulerEntry(
            "legacy", "tasks.legacy", 3600.0, args=["as claimed"], app=app, last_run_at=at(0)
        ).save()
        client = get_redis(app)
        definition = client.hget(entry.key, "definition")
        record = {
            "key": entry.key,
            "definition": definition,
            "due": T0,
            "claimed_at": T0,
            "node": "old-leader:1",
            "reason": "scheduled",
        }
        forge_record(client, slot_id("legacy", 0), json.dumps(record))
        too_late = {**record, "due": T0 - 3600}
        forge_record(client, slot_id("legacy", -3600), json.dumps(too_late))
        RedBeatSchedulerEntry(
            "legacy", "tasks.legacy", 3600.0, args=["edited"], app=app
        ).save()  # the record still holds what was claimed
        scheduler = scheduler_for(app, clock)
        scheduler.tick()  # takes the lock
        scheduler.tick()
        assert published(broker) == [(slot_id("legacy", 0), ["as claimed"])]
        assert nothing_held(client)
        assert json.loads(client.hget(entry.key, "misfires"))["skipped"] == 1  # grace too
        scheduler.close()


def test_held_slots_of_an_entry_edited_or_deleted_meanwhile_are_resent_as_claimed(redis_server):
    clock = Clock()
    with outage(redis_server) as (app, broker):
        RedBeatSchedulerEntry(
            "edited", "tasks.edited", 10.0, args=["old"], app=app, last_run_at=at(-10)
        ).save()
        RedBeatSchedulerEntry(
            "deleted", "tasks.deleted", 10.0, args=["gone"], app=app, last_run_at=at(-10)
        ).save()
        scheduler = scheduler_for(app, clock)
        client = get_redis(app)
        broker.stop()
        clock.now = T0 - 1
        scheduler.tick()  # takes the lock
        clock.now = T0
        scheduler.tick()  # claims both slots; the broker is down, so both are held
        assert held_count(client) == 2
        RedBeatSchedulerEntry("edited", "tasks.edited", 10.0, args=["new"], app=app).save()
        manage.delete_entry(app, "deleted")

        broker.start()
        clock.now = T0 + 1
        scheduler.tick()
        assert sorted(published(broker)) == [
            (slot_id("deleted", 0), ["gone"]),
            (slot_id("edited", 0), ["old"]),
        ]
        assert not client.exists("redbeat:deleted")  # not re-created by the re-send
        assert nothing_held(client)
        clock.now = T0 + 10
        scheduler.tick()  # the next slot is claimed from the edited definition
        assert published(broker)[-1] == (slot_id("edited", 10), ["new"])
        scheduler.close()


def test_a_late_held_slot_of_a_deleted_entry_is_dropped_without_recreating_it(redis_server):
    app = make_app(redis_server.url, redbeat_misfire_grace_time=1)
    clock = Clock()
    RedBeatSchedulerEntry("deleted", "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
    scheduler = BrokerDown(app, clock=clock)
    scheduler.tick()
    scheduler.tick()
    client = get_redis(app)
    assert held_count(client) == 1
    manage.delete_entry(app, "deleted")
    clock.now = T0 + 5
    scheduler.tick()
    assert nothing_held(client)
    assert not client.exists("redbeat:deleted")


class BrokerDown(Recording):
    """Records what it sends while ``down`` is False; raises as a lost broker does."""

    down = True

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        if self.down:
            raise ConnectionRefusedError("broker down")
        super().apply_async(entry, producer, advance, **kwargs)


def test_each_distinct_definition_is_held_once_and_released_with_its_last_record(app):
    clock = Clock()
    RedBeatSchedulerEntry("job", "tasks.x", 1.0, args=["v1"], app=app, last_run_at=at(-1)).save()
    scheduler = BrokerDown(app, clock=clock)
    client = get_redis(app)
    scheduler.tick()  # takes the lock
    scheduler.tick()
    clock.now = T0 + 1
    scheduler.tick()
    v1 = client.hget("redbeat:job", "definition")
    RedBeatSchedulerEntry("job", "tasks.x", 1.0, args=["v2"], app=app).save()
    v2 = client.hget("redbeat:job", "definition")
    for second in (2, 3):
        clock.now = T0 + second
        scheduler.tick()
    one, two = definition_sha1(v1), definition_sha1(v2)
    assert held_definitions(client) == {one: (v1, 2), two: (v2, 2)}
    scheduler.store.confirm([slot_id("job", 0), slot_id("job", 1)])
    assert held_definitions(client) == {two: (v2, 2)}
    scheduler.store.confirm([slot_id("job", 2)])
    assert held_definitions(client) == {two: (v2, 1)}
    # a record removed by hand leaves its reference counted; the definitions go anyway
    # with the next confirmation that leaves no record
    client.zrem(PENDING, slot_id("job", 3))
    client.delete(f"{PENDING}:{slot_id('job', 3)}")
    assert held_definitions(client) == {two: (v2, 1)}
    scheduler.store.confirm([slot_id("job", 4)])
    assert nothing_held(client)


def test_confirming_the_last_held_slots_deletes_their_records_without_reading_them(
    app, redis_server
):
    """A burst confirmed whole leaves nothing held: confirm.lua deletes the records and
    every held definition without reading a record (a GET and a JSON decode per slot
    were most of its cost); confirming part of them still reads each to count."""
    clock = Clock()
    for name in ("a", "b", "c"):
        RedBeatSchedulerEntry(name, "tasks.x", 1.0, app=app, last_run_at=at(-1)).save()
    scheduler = BrokerDown(app, clock=clock)
    scheduler.tick()  # takes the lock
    scheduler.tick()
    client = get_redis(app)
    ids = held_ids(client)
    assert len(ids) == 3 and len(held_definitions(client)) == 3
    admin = redis_server.client()
    admin.config_resetstat()
    scheduler.store.confirm(ids[:1])
    assert "cmdstat_get" in admin.info("commandstats")
    assert len(held_definitions(client)) == 2
    admin.config_resetstat()
    scheduler.store.confirm(ids[1:])
    assert "cmdstat_get" not in admin.info("commandstats")
    assert nothing_held(client)
    scheduler.close()


def test_a_held_definition_removed_by_hand_drops_its_record_with_a_log_line(app, caplog):
    clock = Clock()
    RedBeatSchedulerEntry("job", "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
    scheduler = BrokerDown(app, clock=clock)
    scheduler.tick()
    scheduler.tick()
    client = get_redis(app)
    for sha in held_definitions(client):
        client.delete(f"redbeat::held-definitions:{sha}")  # the text, by hand
    scheduler.down = False
    with caplog.at_level(logging.ERROR):
        scheduler.tick()
    assert scheduler.sent == []
    assert "Dropping unreadable pending slot job:" in caplog.text
    assert "held definition" in caplog.text
    assert held_count(client) == 0


@pytest.mark.parametrize("delivery", ["at-least-once", "at-most-once"])
def test_run_now_is_held_like_a_claimed_slot_and_sent_once(redis_server, delivery):
    app = make_app(redis_server.url, redbeat_delivery=delivery, redbeat_misfire_grace_time=1)
    clock = Clock()
    RedBeatSchedulerEntry("job", "tasks.x", 3600.0, args=[1], app=app, last_run_at=at(0)).save()
    client = get_redis(app)
    definition = client.hget("redbeat:job", "definition")
    task_id = manage.run_now(app, "job")
    sha = definition_sha1(definition)
    assert json.loads(held_records(client)[task_id])["definition_sha1"] == sha
    assert held_definitions(client) == {sha: (definition, 1)}
    scheduler = Recording(app, clock=clock)
    scheduler.tick()  # takes the lock
    clock.now = T0 + 3 * 24 * 3600  # run-now is never too late: it was asked for
    scheduler.tick()
    scheduler.tick()
    assert [sent for sent in scheduler.sent if sent[1] == task_id] == [("job", task_id)]
    assert nothing_held(client)


def test_the_held_definitions_key_is_reserved(app):
    with pytest.raises(ValueError, match="reserved"):
        RedBeatSchedulerEntry(":held-definitions", "tasks.x", 10.0, app=app).save()
    assert app.redbeat_conf.keys.held_definitions in app.redbeat_conf.keys.internal


def test_a_slot_claimed_again_under_a_pending_id_keeps_one_record_and_one_reference(app):
    """An operator rewinding last_run_at during an outage makes the leader claim a slot
    that is still held: the first record stays, counted once."""
    clock = Clock()
    entry = RedBeatSchedulerEntry("job", "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
    scheduler = BrokerDown(app, clock=clock)
    scheduler.tick()
    scheduler.tick()
    client = get_redis(app)
    first = held_records(client)[slot_id("job", 0)]
    client.hset(
        entry.key,
        "meta",
        json.dumps(
            {
                "last_run_at": {
                    "__type__": "datetime",
                    "year": 2026,
                    "month": 11,
                    "day": 23,
                    "hour": 11,
                    "minute": 59,
                    "second": 50,
                    "microsecond": 0,
                    "timezone": "UTC",
                },
                "total_run_count": 1,
            }
        ),
    )
    client.zadd("redbeat::schedule", {entry.key: T0})
    clock.now = T0 + 1
    scheduler.tick()
    assert held_records(client) == {slot_id("job", 0): first}
    sha = definition_sha1(client.hget(entry.key, "definition"))
    assert held_refs(client, sha) == 1


def test_ordering_and_format_helpers_agree_with_utc_isoformat():
    # confirm.lua keeps the latest last_skipped by comparing ISO 8601 texts
    earlier = datetime(2026, 1, 1, 0, 0, 0, tzinfo=timezone.utc)
    later = earlier.replace(microsecond=500000)
    assert earlier.isoformat() < later.isoformat()


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":"), (" , ", " : ")])
def test_a_pending_record_is_read_by_its_structure_whatever_its_spacing(app, separators):
    """Pending records have two writers (commit.lua, Python's json.dumps): the scripts
    find the held definition a record names by decoding it, so a record written with
    other separators (another client, another json library) is still re-sent from its
    definition and releases it when confirmed."""
    clock = Clock()
    RedBeatSchedulerEntry("job", "tasks.x", 3600.0, args=[1], app=app, last_run_at=at(0)).save()
    client = get_redis(app)
    definition = client.hget("redbeat:job", "definition")
    sha = definition_sha1(definition)
    record = json.dumps(
        {
            "key": "redbeat:job",
            "definition_sha1": sha,
            "due": T0,
            "claimed_at": T0,
            "node": "n",
            "reason": "run-now",
        },
        separators=separators,
    )
    store = store_for(app)
    assert store.hold("job:run", record, definition)
    assert store.hold("job:other", record, definition)
    assert held_refs(client, sha) == 2
    store.confirm(["job:other"])  # confirm.lua finds the definition the record names
    assert held_definitions(client) == {sha: (definition, 1)}
    scheduler = Recording(app, clock=clock)
    scheduler.tick()  # takes the lock
    scheduler.tick()
    assert scheduler.sent == [("job", "job:run")]
    assert scheduler.messages[0].args == [1]
    assert nothing_held(client)


# -- a backlog of held slots larger than a batch: the tick's own claims wait behind it --

CATCH_UP = {
    # (policy, ticks with the broker down, the broker back at): every slot sent, in due
    # order: "a" is due at 0, 5, 10 ..., "b" at 2, 7, 12 ... (batch size 3)
    "each missed slot (coalesce=False, max_catch_up=20)": (
        EntryPolicy(coalesce=False, max_catch_up=20),
        [16],  # one tick after a silence (a failover): 7 slots claimed, all held
        21,
        ["a:0", "b:2", "a:5", "b:7", "a:10", "b:12", "a:15", "b:17", "a:20"],
        {},
    ),
    "coalesced (coalesce=True)": (
        EntryPolicy(),
        [0, 5, 10, 15],  # a slot held each tick, then 20, 25, 30 missed: one run
        31,
        ["a:0", "b:2", "a:5", "b:7", "a:10", "b:12", "a:15", "b:27", "a:30"],
        {},  # the slots folded into a catch-up run are not misfires
    ),
    "a catch-up bound smaller than the gap (max_catch_up=2)": (
        EntryPolicy(coalesce=False, max_catch_up=2),
        [0, 5, 10],
        31,  # "a" missed 15, 20, 25, 30 and "b" 12, 17, 22, 27: the latest two each run
        ["a:0", "b:2", "a:5", "b:7", "a:10", "b:22", "a:25", "b:27", "a:30"],
        {"a": 2, "b": 2},
    ),
}


@pytest.mark.parametrize(
    ("policy", "down", "back", "expected", "skipped"), CATCH_UP.values(), ids=CATCH_UP.keys()
)
def test_slots_held_past_a_batch_go_out_before_newer_ones_of_their_entries(
    redis_server, policy, down, back, expected, skipped
):
    """The bug: a failover (tests/test_sentinel_bursts.py) left more held slots than a
    batch; the first tick after it re-sent the oldest batch, then sent its own claims,
    newer slots of the same entries, and the held rest went a tick later: an entry's
    slots reached the broker out of order (0, 5, 20, then 10, 15), and beat stopped in
    between left gaps. Now the claims wait, held, and the backlog goes batch after
    batch at once (the tick returns 0): whenever beat stops, each entry's slots sent
    are its oldest, none skipped but by its policy."""
    app = make_app(redis_server.url, redbeat_batch_size=3)
    client = get_redis(app)
    clock = Clock(T0 - 1)
    for name, last in (("a", -5), ("b", -3)):
        RedBeatSchedulerEntry(
            name, f"tasks.{name}", 5.0, app=app, last_run_at=at(last), policy=policy
        ).save()
    scheduler = BrokerDown(app, clock=clock)
    scheduler.tick()  # takes the lock
    for second in down:
        clock.now = T0 + second
        scheduler.tick()
    assert scheduler.sent == []
    scheduler.down = False
    clock.now = T0 + back
    wanted = [slot_id(name, float(offset)) for name, offset in (s.split(":") for s in expected)]
    ticks = 0
    while True:
        interval = scheduler.tick()
        ticks += 1
        assert scheduler.task_ids == wanted[: len(scheduler.task_ids)]  # oldest first, no gap
        if interval > 0 or ticks > 5:
            break
    assert scheduler.task_ids == wanted
    # every slot went as a held one (the claims too), a batch a tick, the ticks at once,
    # and the last tick found none left
    assert ticks == len(wanted) // 3 + 1
    assert nothing_held(client)
    misfires = {
        name: json.loads(client.hget(f"redbeat:{name}", "misfires") or "{}").get("skipped")
        for name in ("a", "b")
    }
    assert {name: count for name, count in misfires.items() if count} == skipped
    scheduler.close()


GO, LEFT = True, False
#: (the held slots read: entry, whether it went; the broker failed as a whole;
#: at-least-once; every claim waits; the entries whose claims wait; again), batch size 3
BACKLOGS = {
    "nothing held: the claims go": ([], False, True, False, "", False),
    "the backlog's last batch went: they follow it": (
        [("a", GO), ("b", GO)], False, True, False, "", False
    ),
    "a full batch went: maybe more held, unread": (
        [("a", GO), ("b", GO), ("a", GO)], False, True, True, "", True
    ),
    "a batch read past its size: the same": (
        [("a", GO), ("b", GO), ("c", GO), ("d", GO)], False, True, True, "", True
    ),
    "a record that could not be read was dropped: it went": (
        [("", GO), ("a", GO)], False, True, False, "", False
    ),
    "every held slot read, one refused by its queue: its entry waits": (
        [("a", GO), ("b", LEFT)], False, True, False, "b", False
    ),
    "a full batch, one refused by its queue, others went: all wait, the next batch at once": (
        [("a", GO), ("b", LEFT), ("c", GO)], False, True, True, "", True
    ),
    "a full batch of refused slots: only their entries wait, not again (no progress)": (
        [("b", LEFT), ("c", LEFT), ("b", LEFT)], False, True, False, "bc", False
    ),
    "the broker failed as a whole: every claim waits": (
        [("a", GO), ("b", LEFT)], True, True, True, "", False
    ),
    "the broker failed on a full batch: the same, not again": (
        [("a", GO), ("b", LEFT), ("c", LEFT)], True, True, True, "", False
    ),
    "at-most-once claims are never held: they go": (
        [("a", GO), ("b", GO), ("c", GO)], False, False, False, "", True
    ),
    "at-most-once, a slot left": ([("a", GO), ("b", LEFT)], True, False, False, "", False),
}


@pytest.mark.parametrize(
    ("read", "broker_failed", "at_least_once", "every", "entries", "again"),
    BACKLOGS.values(),
    ids=BACKLOGS.keys(),
)
def test_an_entrys_claims_wait_behind_its_held_slots_still_to_go(
    read, broker_failed, at_least_once, every, entries, again
):
    backlog = held_backlog(read, broker_failed, 3, at_least_once)
    assert backlog == Backlog(every, frozenset(entries), again)
    for key in "abcd":
        assert backlog.waits(key) == (every or key in entries)


# -- a queue the broker refuses for now: its entry's slots wait, nobody else's ----------


def queued(broker: redis.Redis, queue: str) -> list[str]:
    """The task ids in ``queue`` of a Redis broker, in publish order (LPUSH: newest first)."""
    return [json.loads(raw)["headers"]["id"] for raw in reversed(broker.lrange(queue, 0, -1))]


def on_strings(redis_server: RedisServer, *queues: str) -> tuple[Celery, redis.Redis]:
    """An app whose broker is another database of the test's Redis, the keys of
    ``queues`` there holding strings (an operator's mistake): each LPUSH, and kombu's
    declaration of the queue before it, is answered WRONGTYPE, which beat holds."""
    broker_url = redis_server.url[: -len("/0")] + "/1"
    broker = redis.Redis.from_url(broker_url, decode_responses=True)
    for queue in queues:
        broker.set(queue, "an operator's string where the queue's list goes")
    return make_app(redis_server.url, broker_url=broker_url, redbeat_batch_size=3), broker


def entries(app: Celery, jammed_every: float) -> None:
    """Two entries: "steady" on the default queue every 5 s, "jammed" on its own queue."""
    RedBeatSchedulerEntry("steady", "tasks.steady", 5.0, app=app, last_run_at=at(-5)).save()
    RedBeatSchedulerEntry(
        "jammed", "tasks.jammed", jammed_every, options={"queue": "jammed"}, app=app,
        last_run_at=at(-jammed_every),
    ).save()


def ticks_at(scheduler: RedBeatScheduler, clock: Clock, second: float, check) -> int:
    """Tick at ``second`` until the tick sleeps (a backlog goes a batch a tick, at once),
    calling ``check`` after each; how many ticks."""
    clock.now = T0 + second
    for ticks in range(1, 10):
        interval = scheduler.tick()
        check()
        if interval > 0:
            return ticks
    raise AssertionError("the ticks at once never ended")


def in_due_order(broker: redis.Redis, queue: str, name: str, every: int) -> list[str]:
    """What ``queue`` holds, checked to be ``name``'s slots from 0 on, every ``every``
    seconds, in due order with no gap."""
    sent = queued(broker, queue)
    assert sent == [slot_id(name, second) for second in range(0, every * len(sent), every)]
    return sent


def test_a_queue_the_broker_refuses_holds_back_its_own_entry_only(redis_server, caplog):
    """The bug: a held slot that the broker refuses for reasons of its own queue (here
    its key on a Redis broker is a string: WRONGTYPE, held as "not now", and its misfire
    grace is None: held forever) made every other entry's claims wait behind it (the
    held slots "still to go"), so one bad queue stopped the whole schedule. Now only its
    entry's claims wait: "steady", on the default queue, is sent at every slot, with one
    error line for it all, while "jammed" piles up more held slots than a batch reads;
    once the key is fixed, jammed's slots go, in due order, each once, and nothing is
    held or recorded as failed."""
    app, broker = on_strings(redis_server, "jammed")
    entries(app, 5.0)
    client = get_redis(app)
    clock = Clock(T0 - 1)
    scheduler = RedBeatScheduler(app, clock=clock)
    caplog.set_level(logging.INFO, logger="celery.beat")
    scheduler.tick()  # takes the lock
    for second in range(0, 30, 5):
        clock.now = T0 + second
        scheduler.tick()
        # every slot of steady at its tick; jammed's all held (3 a batch: more than one)
        assert queued(broker, "celery") == [slot_id("steady", s) for s in range(0, second + 1, 5)]
        assert held_ids(client) == [slot_id("jammed", s) for s in range(0, second + 1, 5)]
    broker.delete("jammed")  # fixed

    def check() -> None:
        in_due_order(broker, "jammed", "jammed", 5)
        in_due_order(broker, "celery", "steady", 5)

    assert ticks_at(scheduler, clock, 30, check) == 3  # 7 held slots: 3 + 3 + 1
    assert queued(broker, "jammed") == [slot_id("jammed", s) for s in range(0, 35, 5)]
    assert queued(broker, "celery") == [slot_id("steady", s) for s in range(0, 35, 5)]
    assert nothing_held(client)
    assert not client.exists(app.redbeat_conf.keys.failing)  # held, never dropped
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "of jammed" in errors[0] and "WRONGTYPE" in errors[0], errors
    scheduler.close()


def test_a_queue_fixed_beside_one_still_refused_catches_up_in_due_order(redis_server):
    """Both queues refused (nothing taken: beat treats it as the broker refusing
    everything, and tries one slot a tick), then the default one fixed while jammed's
    stays refused: steady's held slots (more than a batch) and those claimed meanwhile
    go in due order with no gap, within a tick of the fix (the one slot tried is the
    least recently refused entry's, not jammed's every time), and a full batch with
    jammed's refused slot in it drains at once; jammed's slot stays held until its queue
    is fixed too."""
    app, broker = on_strings(redis_server, "celery", "jammed")
    entries(app, 60.0)  # one held slot: fewer than a batch
    client = get_redis(app)
    clock = Clock(T0 - 1)
    scheduler = RedBeatScheduler(app, clock=clock)
    scheduler.tick()  # takes the lock
    for second in range(0, 20, 5):
        clock.now = T0 + second
        scheduler.tick()
    assert held_count(client) == 5  # jammed's 0, steady's 0 to 15: nothing taken
    broker.delete("celery")

    def check() -> None:
        in_due_order(broker, "celery", "steady", 5)
        assert broker.type("jammed") == "string"  # nothing of jammed's pushed

    for second in (20, 25):
        ticks_at(scheduler, clock, second, check)
    assert queued(broker, "celery") == [slot_id("steady", s) for s in range(0, 30, 5)]
    assert held_ids(client) == [slot_id("jammed", 0)]
    broker.delete("jammed")
    ticks_at(scheduler, clock, 30, lambda: None)
    assert queued(broker, "jammed") == [slot_id("jammed", 0)]
    assert queued(broker, "celery") == [slot_id("steady", s) for s in range(0, 35, 5)]
    assert nothing_held(client)
    scheduler.close()

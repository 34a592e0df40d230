"""Held slots keep no hash under the prefix (issue 21, item 5).

Code written around celery-redbeat 2.4.2 lists entries by scanning the prefix and
reading ``definition`` from every key, catching only WRONGTYPE (what 2.4.2's own
non-hash keys answer), or by reading every key whose TYPE is hash. Held slots exist
while the broker is down, exactly when an operator runs such a listing: it must meet
only entries. Held slots written in the hashes of earlier releases (a fleet upgraded
mid-outage) are adopted, and every one is still sent. Real redis-server, a real Redis
broker that is down and comes back, real Celery publishing.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
import redis

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry, manage
from support.broker_audit import broker_messages
from support.held import HELD, PENDING, held_definitions, held_ids, held_keys, nothing_held
from support.redis_server import RedisServer

pytestmark = pytest.mark.redis_server

HOUR_AGO = datetime.now(timezone.utc) - timedelta(hours=1)


def listing_by_scan(client: redis.Redis) -> list[str]:
    """The 2.4.2-era listing: SCAN the prefix, HGET each key's definition, skip only
    what answers WRONGTYPE."""
    names = []
    for key in client.scan_iter("redbeat:*"):
        try:
            definition = client.hget(key, "definition")
        except redis.ResponseError as exc:
            assert "WRONGTYPE" in str(exc)
            continue
        names.append(json.loads(definition)["name"])
    return sorted(names)


def listing_by_type(client: redis.Redis) -> list[str]:
    """The other common listing: every key whose TYPE is hash is an entry."""
    return sorted(json.loads(client.hget(key, "definition"))["name"]
                  for key in client.scan_iter("redbeat:*") if client.type(key) == "hash")


def test_a_listing_run_while_slots_are_held_meets_only_entries(redis_server):
    with RedisServer() as broker:
        app = make_app(redis_server.url, broker_url=broker.url, task_publish_retry=False,
                       broker_connection_timeout=1)
        for name in ("hourly", "nightly"):
            RedBeatSchedulerEntry(name, f"tasks.{name}", 3600.0, args=[name], app=app,
                                  last_run_at=HOUR_AGO).save()
        scheduler = RedBeatScheduler(app)
        assert scheduler.producer is not None
        client = redis_server.client()
        try:
            broker.stop()
            scheduler.tick()
            scheduler.tick()  # claims both slots; the broker is down, so both are held
            manage.run_now(app, "hourly")  # and one asked for by hand
            held = held_ids(client)
            assert len(held) == 3
            assert len(held_keys(client)) == 2 + 3 + 2  # two indexes, records, texts
            entries = ["celery.backend_cleanup", "hourly", "nightly"]  # Celery's own too
            assert listing_by_scan(client) == entries
            assert listing_by_type(client) == entries
            broker.start()
            for _ in range(3):
                scheduler.tick()
            sent = [m.task_id for m in broker_messages(broker.url)]
        finally:
            scheduler.close()
    assert sorted(sent) == sorted(held)  # each held slot sent once
    assert nothing_held(client)


def old_shape(client: redis.Redis, app, names: list[str]) -> dict[str, str]:
    """Held slots as releases before this layout wrote them: the pending hash (task id
    -> record naming its definition by sha1), the held definitions hash (sha1 -> text,
    '<sha1>:refs' -> count), and one record of the older format still (the definition
    inside it, counted nowhere). Returns task id -> the args (repr) each slot must be
    sent with."""
    from redbeat.store import definition_sha1

    due = HOUR_AGO.timestamp()
    expected = {}
    for number, name in enumerate(names):
        definition = client.hget(f"redbeat:{name}", "definition")
        sha = definition_sha1(definition)
        for slot in range(2):
            task_id = f"{name}:{round((due + slot) * 1000)}"
            if number == 0 and slot == 1:
                record = {"key": f"redbeat:{name}", "definition": definition}
            else:
                record = {"key": f"redbeat:{name}", "definition_sha1": sha}
                refs = int(client.hget(HELD, f"{sha}:refs") or 0)
                client.hset(HELD, mapping={sha: definition, f"{sha}:refs": refs + 1})
            record.update(due=due + slot, claimed_at=due + slot, node="old-release:1",
                          reason="scheduled")
            client.hset(PENDING, task_id, json.dumps(record))
            expected[task_id] = repr(json.loads(definition)["args"])
    return expected


@pytest.mark.parametrize("first", ["tick", "run-now", "status"])
def test_held_slots_of_the_old_hashes_are_adopted_and_every_one_is_sent(redis_server, first):
    """Whichever script meets the old hashes first (the leader's tick, a run-now from an
    upgraded CLI; status only reads them), no held slot is lost and none goes twice."""
    with RedisServer() as broker:
        app = make_app(redis_server.url, broker_url=broker.url, task_publish_retry=False,
                       broker_connection_timeout=1)  # no misfire grace: late slots go
        names = ["alpha", "beta"]
        for name in names:
            RedBeatSchedulerEntry(name, f"tasks.{name}", 86400.0, args=[name], app=app,
                                  last_run_at=datetime.now(timezone.utc)).save()
        client = redis_server.client()
        expected = old_shape(client, app, names)
        assert client.type(PENDING) == client.type(HELD) == "hash"
        asked = None
        if first == "run-now":
            asked = manage.run_now(app, "beta")
            expected[asked] = repr(["beta"])
            assert client.type(PENDING) == client.type(HELD) == "zset"
        elif first == "status":
            assert manage.status(app).pending == 4
            assert client.type(PENDING) == "hash"  # read as it is, not written
        scheduler = RedBeatScheduler(app)
        assert scheduler.producer is not None
        try:
            broker.stop()
            scheduler.tick()  # takes the lock
            scheduler.tick()  # adopts the hashes if still there; sends fail: still held
            assert client.type(PENDING) == client.type(HELD) == "zset"
            assert sorted(held_ids(client)) == sorted(expected)
            # alpha: one record counted (its other is of the older format); beta: two,
            # and the run-now's
            definitions = held_definitions(client)
            assert sorted(refs for _, refs in definitions.values()) == [1, 3 if asked else 2]
            assert {json.loads(text)["name"] for text, _ in definitions.values()} == set(names)
            assert listing_by_scan(client) == ["alpha", "beta", "celery.backend_cleanup"]
            broker.start()
            for _ in range(3):
                scheduler.tick()
            sent = sorted((m.task_id, m.argsrepr) for m in broker_messages(broker.url))
        finally:
            scheduler.close()
    assert sent == sorted(expected.items())  # each held slot once, as it was claimed
    assert nothing_held(client)


@pytest.mark.parametrize("name", [":pending:job:1", ":held-definitions:" + "0" * 40])
def test_an_entry_may_not_be_named_as_a_held_slot_key(app, name):
    """Its key would be a held slot's record or definition text."""
    with pytest.raises(ValueError, match="reserved"):
        RedBeatSchedulerEntry(name, "tasks.x", 10.0, app=app).save()
    assert not app.redbeat_conf.keys.is_entry_key(f"redbeat:{name}")
    assert app.redbeat_conf.keys.is_entry_key("redbeat:pending:job:1")  # not ours

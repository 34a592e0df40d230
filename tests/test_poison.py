"""Poison entries written with raw Redis commands while a real beat runs: each is logged
once, quarantined with its reason, and picked up again once rewritten; the good entries
keep their schedule throughout. What beat sends is read from its log: no worker is
needed to see that an entry is sent."""

from __future__ import annotations

import json

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.schedulers import get_redis
from support.processes import Cluster

pytestmark = pytest.mark.e2e

INTERVAL = {"__type__": "interval", "every": 1, "relative": False}
POISON = {
    "malformed-json": '{"name": "malformed-json", "task": ',
    "unknown-type": json.dumps({"name": "unknown-type", "task": "beatapp.record",
                                "schedule": {"__type__": "lunar", "phase": "full"}}),
    "missing-task": json.dumps({"name": "missing-task", "schedule": INTERVAL}),
    "wrong-types": json.dumps({"name": "wrong-types", "task": "beatapp.record", "args": {},
                               "schedule": INTERVAL}),
    "bad-crontab": json.dumps({"name": "bad-crontab", "task": "beatapp.record",
                               "schedule": {"__type__": "crontab", "minute": "99"}}),
    "name-mismatch": json.dumps({"name": "someone-else", "task": "beatapp.record",
                                 "schedule": INTERVAL}),
}
REASONS = {
    "malformed-json": "JSONDecodeError", "unknown-type": "unknown schedule type 'lunar'",
    "missing-task": "missing 'task'", "wrong-types": "'args' must be a list",
    "bad-crontab": "definition:", "name-mismatch": "belongs to key",
}


def test_poison_entries_are_quarantined_once_and_recovered(tmp_path, redis_server):
    app = make_app(redis_server.url)
    client = get_redis(app)
    RedBeatSchedulerEntry("good", "beatapp.record", 1.0, args=["good"], app=app).save()
    cluster = Cluster(tmp_path, redis_server.url, redis_server.url[:-1] + "1")
    beat = cluster.beat("beat")
    try:
        beat.wait_for("Sending due task good", count=2)
        for name, definition in POISON.items():
            client.hset(f"redbeat:{name}", "definition", definition)
            client.zadd("redbeat::schedule", {f"redbeat:{name}": 0})
        client.zadd("redbeat::schedule", {"redbeat:gone": 0})  # no hash at all
        client.set("redbeat:not-a-hash", "x")
        client.zadd("redbeat::schedule", {"redbeat:not-a-hash": 0})
        sent_good = beat.log().count("Sending due task good")
        # still on schedule, and two ticks after the one that quarantined them
        beat.wait_for("Sending due task good", count=sent_good + 3)
        log = beat.log()
        for name, reason in REASONS.items():
            assert log.count(f"Quarantined redbeat:{name}:") == 1, name
            stored = json.loads(client.hget(f"redbeat:{name}", "quarantine"))
            assert reason in stored["reason"], (name, stored)
            assert client.zscore("redbeat::schedule", f"redbeat:{name}") == -1
        for key in ("redbeat:gone", "redbeat:not-a-hash"):
            assert client.zscore("redbeat::schedule", key) is None
            assert log.count(f"{key} is in the schedule but is not an entry hash") == 1
        assert client.get("redbeat:not-a-hash") == "x"  # nothing else is deleted

        # rewritten (HSET + ZADD 0, as documented), it runs
        client.hset("redbeat:malformed-json", "definition", json.dumps({
            "name": "malformed-json", "task": "beatapp.record", "args": ["fixed"],
            "schedule": INTERVAL}))
        client.zadd("redbeat::schedule", {"redbeat:malformed-json": 0})
        beat.wait_for("Sending due task malformed-json")
        assert not client.hexists("redbeat:malformed-json", "quarantine")
    finally:
        cluster.stop()

"""A pending record written by hand that names the held definition of a real held slot
(its ``definition_sha1``) never took a reference to it. Dropping or sending it must not
release the real slot's copy: that slot would then be unreadable and dropped unsent.
Real redis-server, a real Redis broker that is down and comes back."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from support.broker_audit import broker_messages
from support.held import forge_record, held_definitions, held_ids, held_records, nothing_held
from support.redis_server import RedisServer

pytestmark = pytest.mark.redis_server


@pytest.mark.parametrize("forged", [
    lambda sha: json.dumps({"definition_sha1": sha}),  # unreadable: dropped
    lambda sha: json.dumps({"key": "redbeat:job", "definition_sha1": sha,
                            "due": 1.0, "reason": "scheduled"}),  # readable: sent as is
])
def test_a_forged_record_naming_a_held_definition_does_not_lose_the_real_slot(
        redis_server, forged):
    with RedisServer() as broker:
        app = make_app(redis_server.url, broker_url=broker.url, task_publish_retry=False,
                       broker_connection_timeout=1)
        hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
        RedBeatSchedulerEntry("job", "tasks.job", 3600.0, app=app, last_run_at=hour_ago).save()
        scheduler = RedBeatScheduler(app)
        assert scheduler.producer is not None
        client = redis_server.client()
        try:
            broker.stop()
            scheduler.tick()
            scheduler.tick()  # claims the slot; the broker is down, so it is held
            (real_id, record), = held_records(client).items()
            sha = json.loads(record)["definition_sha1"]
            forge_record(client, "forged:1", forged(sha))
            for _ in range(3):
                scheduler.tick()  # the forged record is dropped or tried; the real one waits
            assert real_id in held_ids(client)
            assert held_definitions(client)[sha][0]  # the real slot's definition is still there
            broker.start()
            for _ in range(3):
                scheduler.tick()
            sent = [m.task_id for m in broker_messages(broker.url)]
        finally:
            scheduler.close()
    assert sent.count(real_id) == 1, sent
    assert nothing_held(client)  # nothing left held once nothing is pending

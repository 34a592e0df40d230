"""A scheduler whose Redis ACL user may only touch ``redbeat:*`` keys, with schedule members
it cannot (or must not) read: another application's hash ``otherapp:x`` (due, and parked at
-1), one outside the prefix whose key does not exist, and members naming the package's own
keys. Each is logged once and removed from the schedule; the foreign keys are never written
and none of them may turn into a NOPERM error, a "Redis unavailable" stand-by or a half
applied run count. The good entries keep running, every claimed slot is sent and counted.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import datetime, timezone

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from support.deployments import acl_server, require_programs
from support.recording import Clock, Recording

pytestmark = pytest.mark.e2e

SCHEDULE = "redbeat::schedule"
FOREIGN = {"otherapp:x": 0, "otherapp:parked": -1, "otherapp:missing": 0}
INTERNAL = {"redbeat::nodes": 0, "redbeat::lock": 0, "redbeat::pending": -1}
GOOD = {"good-fast": 0.5, "good-1s": 1.0}
REMOVED_LOG = "is in the schedule but is not a key of this schedule's entries"


def at_clock(clock: Clock) -> datetime:
    return datetime.fromtimestamp(clock.now, tz=timezone.utc)


def run_for(scheduler: Recording, clock: Clock, seconds: float) -> int:
    """Tick for ``seconds`` of the scheduler's clock, moved on by each tick's answer
    instead of slept (what is tested is what the ticks read and write, not their pace)."""
    ticks, deadline = 0, clock.now + seconds
    while clock.now < deadline:
        ticks += 1
        clock.now += max(0.0, min(scheduler.tick(), 0.1))
    return ticks


def test_foreign_and_internal_members_are_removed_untouched_under_an_acl_user(caplog):
    require_programs("redis-server")
    caplog.set_level(logging.INFO, logger="celery.beat")
    with acl_server("redbeat:") as server:
        admin = server.client()  # the default user: every key
        admin.hset("otherapp:x", mapping={"definition": "theirs", "meta": "{}"})
        admin.hset("otherapp:parked", mapping={"definition": "theirs too"})
        before = {key: admin.dump(key) for key in ("otherapp:x", "otherapp:parked")}
        app = make_app(server.beat_url)
        clock = Clock(time.time())
        for name, every in GOOD.items():
            RedBeatSchedulerEntry(name, "tasks.good", every, app=app,
                                  last_run_at=at_clock(clock)).save()
        admin.zadd(SCHEDULE, {**FOREIGN, **INTERNAL})
        scheduler = Recording(app, clock=clock)
        try:
            ticks = run_for(scheduler, clock, 6.0)
            leading = scheduler.leading
            # read while it runs: closing removes its own heartbeat, and with it the key
            nodes_type = admin.type("redbeat::nodes")
        finally:
            scheduler.close()
        members = set(admin.zrange(SCHEDULE, 0, -1))
        after = {key: admin.dump(key) for key in before}
        ttls = {key: admin.ttl(key) for key in before}
        counts = {name: RedBeatSchedulerEntry.from_key(f"redbeat:{name}", app=app).total_run_count
                  for name in GOOD}
        pending = admin.zcard("redbeat::pending")

    log = caplog.text
    sent = Counter(task_id.rsplit(":", 1)[0] for task_id in set(scheduler.task_ids))
    removed = {key: log.count(f"{key} {REMOVED_LOG}") for key in {**FOREIGN, **INTERNAL}}
    print(f"\nacl: {ticks} ticks, sent {dict(sent)}, run counts {counts}, removal logs {removed}, "
          f"'Redis unavailable' {log.count('Redis unavailable')}, NOPERM {log.count('NOPERM')}")
    assert leading
    assert "Redis unavailable" not in log and "NOPERM" not in log and "Lost the lock" not in log
    assert len(scheduler.task_ids) == len(set(scheduler.task_ids))  # no slot twice
    for name, every in GOOD.items():
        assert sent[name] >= 0.7 * 6.0 / every, (name, sent)
        assert counts[name] == sent[name], (name, counts, sent)  # no claim left half applied
    assert pending == 0
    # the due members are read once, logged once and removed; the parked ones never come
    # up in a tick, but the sweep must not fail on them (nor delete what is not ours)
    for key, score in {**FOREIGN, **INTERNAL}.items():
        if score >= 0:
            assert removed[key] == 1, (key, removed)
            assert key not in members, members
    assert "otherapp:parked" not in members  # the sweep forgets what it may not look at
    assert members >= {f"redbeat:{name}" for name in GOOD}
    assert after == before  # never written
    assert ttls == {"otherapp:x": -1, "otherapp:parked": -1}
    assert nodes_type == "zset"  # an internal key is not treated as an entry

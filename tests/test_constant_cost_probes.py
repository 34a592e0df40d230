"""``redbeat check`` (the supervisor's probe) and ``redbeat status`` cost the same with no
parked entry and with 100,000: counted commands, not timings. A probe that read every
parked entry took 1.36 s at 100,000 (issue 14). Real redis-server."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.cli import main
from redbeat.health import check
from redbeat.manage import QUARANTINE_SAMPLE, status
from redbeat.runtime import get_redis
from support.counting import counting_commands

PARKED = 100_000
CHUNK = 10_000


def park(client, count: int) -> None:
    """``count`` members parked at score -1, as the tick parks them; the first ones (all
    a status sample can read) with a quarantined hash, the rest bare: writing 100,000
    hashes would cost the test seconds and change nothing the probes read."""
    for start in range(0, count, CHUNK):
        keys = [f"redbeat:parked{i:06d}" for i in range(start, min(start + CHUNK, count))]
        with client.pipeline(transaction=False) as pipe:
            for key in keys[:2 * QUARANTINE_SAMPLE] if start == 0 else ():
                pipe.hset(key, mapping={"definition": "{}",
                                        "quarantine": '{"reason": "broken"}'})
            pipe.zadd("redbeat::schedule", dict.fromkeys(keys, -1))
            pipe.execute()


def probe_costs(redis_server, parked: int) -> dict[str, dict[str, int]]:
    """Commands each probe sends, by name, with ``parked`` parked entries, under a leader
    that ticked (so ``check`` reads the whole way to "healthy")."""
    redis_server.client().flushall()
    # the leader ticks once: its lock must outlast the parking, which at load ~20 took
    # longer than the default timeout ("stands by but nobody holds the lock")
    app = make_app(redis_server.url, redbeat_lock_timeout=3600)
    RedBeatSchedulerEntry("hourly", "tasks.x", 3600.0, app=app).save()
    beat = RedBeatScheduler(app=app)
    try:
        beat.tick()  # leads (its sweep of parked members runs now, before they exist)
        park(get_redis(app), parked)
        state = status(app)  # the app's connection is made before counting
        assert state.parked == parked
        assert len(state.quarantined) == min(parked, QUARANTINE_SAMPLE)
        costs = {}
        # the leader's one tick is as old as parking took: on a loaded machine more than
        # check's default 5 s, so the probes are asked with an age no load reaches
        age = 3600.0
        for name, probe in (("status", lambda: status(app)),
                            ("check", lambda: check(app, max_age=age))):
            with counting_commands() as count:
                probe()
            costs[name] = count.by_name
        runner = CliRunner()
        for command in ("status", "check"):
            with counting_commands() as count:
                result = runner.invoke(main, ["--url", redis_server.url, command]
                                       + (["--max-age", str(age)] if command == "check" else []))
            # check: beat is healthy, the quarantined entries need attention (exit 9)
            assert result.exit_code == (9 if command == "check" and parked else 0), \
                result.output
            costs[f"redbeat {command}"] = count.by_name
        assert check(app, max_age=age).healthy
    finally:
        beat.close()
    return costs


@pytest.mark.redis_server
def test_check_and_status_send_the_same_commands_with_0_and_100000_parked_entries(
        redis_server):
    empty = probe_costs(redis_server, 0)
    full = probe_costs(redis_server, PARKED)
    assert full == empty
    assert sum(empty["status"].values()) < 20  # one pipeline of fixed reads

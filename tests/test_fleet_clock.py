"""One clock for the fleet (issue 22, item 6): each node corrects its clock to Redis's
TIME, measured in the tick's own round trip, so a node whose host clock is 30 s ahead
neither sends early nor skips slots on taking over, one 30 s behind is healthy while it
leads, and a heartbeat stamped in the future does not make a stuck node look healthy.

The rules are tables; the fleet is real ``celery beat`` processes whose host clocks
libfaketime moves, a real worker counting the task ids it runs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.fleet_clock import RESAMPLE_EVERY, SKEW_LOGGED, STEP, FleetClock
from redbeat.health import check
from redbeat.heartbeat import FUTURE_SLACK, stale
from redbeat.policy import EntryPolicy
from redbeat.settings import ensure_conf
from support.processes import LIVENESS, Cluster
from support.recording import Recording
from support.redis_server import RedisServer, redis_required
from support.waiting import wait_until

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


@pytest.mark.parametrize(
    ("samples", "offset", "lines"),
    [
        # (sent, received, server) per round trip
        ([(100.0, 100.002, 130.001)], 30.0, 1),  # 30 s behind: corrected, logged
        ([(100.0, 100.002, 70.001)], -30.0, 1),  # 30 s ahead
        ([(100.0, 100.002, 100.2)], 0.199, 0),  # NTP-sized: corrected, quiet
        ([(100.0, 100.002, 130.001), (101.0, 101.002, 131.001)], 30.0, 1),  # logged once
        ([(100.0, 100.002, 130.001), (101.0, 101.002, 101.001)], 0.0, 2),  # and when it ends
        ([(100.0, 100.002, 130.001), (101.0, 103.0, 90.0)], 30.0, 1),  # a slow round trip
        ([(100.0, 100.002, None)], 0.0, 0),  # no reading
    ],
)
def test_the_offset_and_when_it_is_logged(samples, offset, lines) -> None:
    clock = FleetClock()
    # each sample's monotonic reading 50 s behind its host time (it does not enter the offset)
    said = [clock.observe(*sample, monotonic=sample[0] - 50.0) for sample in samples]
    assert clock.offset == pytest.approx(offset, abs=1e-6)
    assert len([line for line in said if line]) == lines
    assert clock.now(200.0) == pytest.approx(200.0 + offset, abs=1e-6)


@pytest.mark.parametrize(
    ("host", "monotonic", "wanted"),
    [
        (100.0, 50.0, False),  # the sample's own moment
        (130.0, 80.0, False),  # both clocks moved alike
        (100.0 + RESAMPLE_EVERY, 50.0 + RESAMPLE_EVERY, True),  # a minute on: drift
        (130.0 + 2 * STEP, 80.0, True),  # the host's clock set forward
        (129.0, 80.0, True),  # or back
        (160.0, 50.0, True),  # a VM resumed: its monotonic stood still
    ],
)
def test_redis_clock_is_read_again_only_when_the_offset_may_have_changed(
    host, monotonic, wanted
) -> None:
    clock = FleetClock()
    assert clock.wanted(99.0, 49.0)  # nothing measured yet
    clock.observe(100.0, 100.002, 130.001, monotonic=50.0)
    assert clock.wanted(host, monotonic) is wanted
    assert not FleetClock(enabled=False).wanted(100.0, 50.0)


def test_an_injected_clock_is_taken_as_is() -> None:
    clock = FleetClock(enabled=False)
    assert clock.observe(100.0, 100.001, 5000.0, monotonic=50.0) is None
    assert clock.now(100.0) == 100.0


@pytest.mark.parametrize(
    ("at", "now", "why"),
    [
        (100.0, 100.0, None),
        (100.0, 116.0, None),
        (100.0, 118.0, "last ticked 18.0s ago"),
        (100.0 + FUTURE_SLACK - 0.5, 100.0, None),
        (3700.0, 100.0, "ahead of Redis's clock"),  # a stuck node's clock an hour ahead
    ],
)
def test_a_heartbeat_is_a_sign_of_life_within_its_age(at, now, why) -> None:
    found = stale(at, now, 17.0)
    assert (found is None) if why is None else (why in found)


def test_a_stuck_node_with_a_future_heartbeat_is_unhealthy(redis_server: RedisServer) -> None:
    app = make_app(redis_server.url)
    keys = ensure_conf(app).keys
    client = redis_server.client()
    ahead = time.time() + 3600
    client.zadd(keys.nodes, {"stuck:7:aa": ahead})  # a leader's heartbeat
    client.set(keys.lock, "stuck:7:aa", px=30_000)
    health = check(app, host="stuck")
    assert not health.healthy and "ahead of Redis's clock" in health.reason


def test_a_scheduler_ahead_sends_on_redis_time(redis_server: RedisServer, caplog) -> None:
    """In process: a host clock 30 s ahead, the scheduler's clock corrected: the entry's
    slot due in 10 s (Redis's time) is not sent, and the skew is logged once."""
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("soon", "tasks.soon", timedelta(seconds=10), app=app).save()
    scheduler = Recording(app, clock=lambda: time.time() + 30, fleet_clock=True)
    with caplog.at_level(logging.WARNING, logger="celery.beat"):
        for _ in range(4):
            scheduler.tick()
    assert scheduler.sent == []
    assert [r.getMessage() for r in caplog.records if "clock" in r.getMessage()] == [
        f"beat: this host's clock is {abs(scheduler.fleet_clock.offset):.1f}s ahead of "
        "Redis's; due times, heartbeats and lease ages are taken from Redis's clock"
    ]
    assert abs(scheduler.fleet_clock.offset + 30) < 1
    scheduler.close()


def faketime(offset: int) -> dict[str, str]:
    """The environment of a process whose host clock is ``offset`` seconds off this
    one's: added to the offset of a test run whose own host clock libfaketime moved
    (.ci/run's date-shifted run sets FAKETIME to "+<seconds>" and LD_PRELOAD)."""
    moved = os.environ.get("FAKETIME", "+0")
    preload = os.environ.get("LD_PRELOAD") or LIBFAKETIME
    return {"LD_PRELOAD": preload, "FAKETIME": f"{int(moved) + offset:+d}"}


def test_a_fleet_of_skewed_clocks_sends_each_slot_once_on_time(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A leader on the right clock, then a node 30 s ahead takes over, then one 30 s
    behind: every slot of a 1-s entry runs once, none before its due time, and the node
    behind answers healthy to ``redbeat check`` while it leads."""
    if not os.path.exists(LIBFAKETIME):
        if redis_required():
            pytest.fail(f"{LIBFAKETIME} missing (apt-get install libfaketime)")
        pytest.skip("libfaketime is not installed")
    url = redis_server.url
    cluster = Cluster(
        tmp_path, url, url[:-1] + "1", beat_max_loop_interval=1, redbeat_lock_timeout=3
    )
    app = make_app(url)
    RedBeatSchedulerEntry(
        "every-second",
        "beatapp.record",
        1.0,
        args=["tick"],
        app=app,
        policy=EntryPolicy(coalesce=False, max_catch_up=100),
    ).save()
    try:
        cluster.worker()
        right = cluster.beat("right")
        right.wait_for("Sending due task every-second", count=2)
        ahead = cluster.beat("ahead", env=faketime(+30))
        ahead.wait_for("Standing by")
        assert "30.0s ahead of Redis's" in ahead.log() or "ahead of Redis's" in ahead.log()
        assert right.terminate() == 0
        ahead.wait_for("Sending due task every-second", count=3)
        behind = cluster.beat("behind", env=faketime(-30))
        behind.wait_for("Standing by")
        assert ahead.terminate() == 0
        behind.wait_for("Sending due task every-second", count=2)
        probe = subprocess.run(
            [sys.executable, "-m", "redbeat", "--url", url, "check", "--pid", str(behind.pid)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **faketime(+30)},
        )  # the probe's own clock off too
        behind.wait_for(
            "Sending due task every-second",
            count=behind.log().count("Sending due task every-second") + 1,
        )
        last_sent = time.time()
        wait_until(
            lambda: (
                cluster.executions()
                and max(int(run["id"].split(":")[1]) for run in cluster.executions()) / 1000
                >= last_sent - 1.5
            ),
            LIVENESS,
            "the last slots run",
        )
    finally:
        cluster.stop()
    runs = [run for run in cluster.executions() if run["id"].startswith("every-second:")]
    ids = Counter(run["id"] for run in runs)
    dues = sorted(int(task_id.split(":")[1]) for task_id in ids)
    twice = [task_id for task_id, count in ids.items() if count > 1]
    missing = [due for due in range(dues[0], dues[-1], 1000) if due not in set(dues)]
    early = [
        (run["id"], round(int(run["id"].split(":")[1]) / 1000 - run["at"], 3))
        for run in runs
        if run["at"] < int(run["id"].split(":")[1]) / 1000 - 0.25
    ]
    print(
        json.dumps(
            {
                "slots": len(dues),
                "twice": len(twice),
                "missing": len(missing),
                "early": len(early),
                "check": probe.returncode,
            }
        )
    )
    assert (twice, missing, early) == ([], [], [])
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert SKEW_LOGGED <= 30

"""Code written around celery-redbeat 2.4.2 keeps working here (issue 21's items).

Each test is a thing that worked under 2.4.2 and failed here: a subclass constructor
naming exactly 2.4.2's keywords, the application's own client (without
``decode_responses``, replaced after first use, or through a patched ``get_redis``),
2.4.2's module-level names and keywords, statics written at start-up. All against a
real redis-server.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import redis
from celery.beat import ScheduleEntry

import redbeat.schedulers
from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.runtime import runtime_for
from support.pyproject import PROJECT
from support.recording import Clock, Recording, leader

ROOT = Path(__file__).resolve().parent.parent


class NamedKeywordsEntry(RedBeatSchedulerEntry):
    """A subclass whose constructor names exactly what 2.4.2's ``from_key`` passed."""

    def __init__(self, name=None, task=None, schedule=None, args=None, kwargs=None,
                 enabled=True, options=None, last_run_at=None, total_run_count=None,
                 app=None):
        super().__init__(name, task, schedule, args, kwargs, enabled, options,
                         last_run_at=last_run_at, total_run_count=total_run_count, app=app)
        self.built_by_subclass = True


class NamedKeywordsScheduler(Recording):
    Entry = NamedKeywordsEntry


def test_item1_a_constructor_without_kwargs_is_loaded_and_ticked(app):
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    NamedKeywordsEntry("e", "tasks.e", 10.0, last_run_at=an_hour_ago, app=app).save()
    loaded = NamedKeywordsEntry.from_key("redbeat:e", app=app)
    assert loaded.built_by_subclass and loaded.task == "tasks.e"
    scheduler = NamedKeywordsScheduler(app)  # its entry class takes the per-entry path
    assert scheduler.per_entry
    scheduler.tick()  # takes the lock
    scheduler.tick()  # every due entry built through the subclass's constructor
    assert [name for name, _ in scheduler.sent] == ["e"]


class DirectEntry(RedBeatSchedulerEntry):
    """A subclass that skips RedBeatSchedulerEntry's constructor (Celery's directly)."""

    def __init__(self, name=None, task=None, schedule=None, app=None, **extra: Any):
        ScheduleEntry.__init__(self, name=name, task=task, schedule=schedule, app=app,
                               args=(), kwargs={}, options={})


def test_item1_a_subclass_calling_schedule_entry_init_saves_and_loads(app):
    DirectEntry("d", "tasks.d", 30.0, app=app).save()
    loaded = DirectEntry.from_key("redbeat:d", app=app)
    assert (loaded.name, loaded.task, loaded.enabled) == ("d", "tasks.d", True)
    assert loaded.config is app.redbeat_conf


def test_item3_an_app_client_answering_bytes(redis_server):
    app = make_app(redis_server.url)
    app.redbeat_redis = redis.Redis.from_url(redis_server.url)  # no decode_responses
    RedBeatSchedulerEntry("b", "tasks.b", 10.0, app=app).save()
    assert RedBeatSchedulerEntry.from_key("redbeat:b", app=app).task == "tasks.b"
    clock = Clock(time.time())
    scheduler = leader(app, clock)
    clock.now += 3600
    scheduler.tick()
    # Celery's own static entry (celery.backend_cleanup, daily at 4:00) is due too when the
    # hour ahead crosses 4:00
    assert [name for name, _ in scheduler.sent if name != "celery.backend_cleanup"] == ["b"]
    assert app.redbeat_redis.hget("redbeat:b", "definition").startswith(b"{")  # still bytes


def test_item4_module_level_names_and_keywords():
    from redbeat import decoder, schedulers, schedules

    for name in ("RedBeatJSONEncoder", "RedBeatJSONDecoder", "get_logger", "ScheduleEntry",
                 "json", "DEFAULT_MAX_INTERVAL", "to_timestamp", "REDBEAT_INTERNAL_OPTIONS",
                 "MINYEAR", "Redis", "Sentinel", "MasterNotFoundError", "app_or_default",
                 "beat_init", "maybe_sanitize_url", "retry", "retry_if_exception_type",
                 "stop_after_delay", "wait_exponential", "ssl", "warnings"):
        assert hasattr(schedulers, name), name
    for name in ("crontab", "rrule", "schedule", "zoneinfo"):
        assert hasattr(decoder, name), name
    from dateutil.rrule import rrule as dateutil_class

    assert schedules.dateutil_rrule is dateutil_class
    assert schedules.schedule.__name__ == "BaseSchedule" and schedules.schedstate
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert decoder.to_timestamp(dt=moment) == int(moment.timestamp())
    assert decoder.get_utcoffset_minutes(dt=moment) == 0
    assert decoder.RedBeatJSONEncoder().default(obj=moment)["__type__"] == "datetime"
    assert schedulers.RedBeatScheduler.lock is None
    assert schedulers.RetryingConnection.RETRY_MAX_WAIT > 0


class OwnLoop(Recording):
    """2.4.2-style subclass: its own tick, never this package's."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        return 1.0


def test_item6_statics_are_written_at_start_up(redis_server):
    app = make_app(redis_server.url, beat_schedule={"st": {"task": "tasks.st",
                                                           "schedule": 60.0}})
    OwnLoop(app, clock=Clock())
    assert RedBeatSchedulerEntry.from_key("redbeat:st", app=app).task == "tasks.st"
    assert "st" in runtime_for(app).store.static_names()


def test_item7_a_client_assigned_after_first_use_is_used(redis_server):
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("first", "tasks.a", 10.0, app=app).save()
    other_db = redis.Redis.from_url(re.sub(r"/\d+$", "/3", redis_server.url),
                                    decode_responses=True)
    app.redbeat_redis = other_db  # a fresh client per test, as suites written for 2.4.2 do
    RedBeatSchedulerEntry("second", "tasks.b", 10.0, app=app).save()
    assert other_db.exists("redbeat:second") and not other_db.exists("redbeat:first")
    assert runtime_for(app).store.client.connection_pool.connection_kwargs["db"] == 3


def test_item7_a_patched_get_redis_is_called(redis_server, monkeypatch):
    app = make_app(redis_server.url)
    calls = []
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)

    def patched(given: Any = None) -> Any:
        calls.append(given)
        return client

    monkeypatch.setattr(redbeat.schedulers, "get_redis", patched)
    RedBeatSchedulerEntry("p", "tasks.p", 10.0, app=app).save()
    assert calls and calls[0] is app
    assert runtime_for(app).store.client is client


def test_item9_the_distribution_name_is_not_redbeat():
    name = PROJECT["name"]
    assert name not in ("redbeat", "celery-redbeat")
    installs = re.compile(r"pip install (?:-U )?'?redbeat\b")
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert not installs.search(doc.read_text()), doc
    for source in (ROOT / "src" / "redbeat").rglob("*.py"):
        assert not installs.search(source.read_text()), source


def test_item5_a_listing_of_the_prefix_meets_only_entries(app, redis_server):
    """2.4.2-era listings SCAN the prefix and read ``definition`` from each key, catching
    only WRONGTYPE (what 2.4.2's own keys answer): the heartbeats every beat writes are
    not a hash, and the hash earlier builds wrote is replaced at the next heartbeat."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    client.hset("redbeat::nodes", "old-build:1:aa", f"leader {time.time()}")
    RedBeatSchedulerEntry("e", "tasks.e", 60.0, app=app).save()
    scheduler = leader(app, Clock(time.time()))
    scheduler.tick()
    names = []
    for key in client.scan_iter("redbeat:*"):
        try:
            definition = client.hget(key, "definition")
        except redis.ResponseError:
            continue
        names.append(json.loads(definition)["name"])
    assert sorted(names) == ["celery.backend_cleanup", "e"]  # Celery's own static too
    assert client.type("redbeat::nodes") == "zset"
    assert set(runtime_for(app).store.nodes()) == {scheduler.node_id}
    scheduler.close()


def test_item3_an_app_cluster_client_answering_bytes():
    """A RedisCluster the application set without decode_responses: redbeat's round
    trips go through a twin on the same nodes that answers text."""
    from redis.cluster import ClusterNode, RedisCluster

    from support.deployments import ClusterDeployment

    deployment = ClusterDeployment(replicas=0).start()
    try:
        app = make_app(deployment.url, redbeat_key_prefix="{redbeat}:")
        host, port = deployment.addresses[0]
        app.redbeat_redis = RedisCluster(startup_nodes=[ClusterNode(host, port)])
        RedBeatSchedulerEntry("c", "tasks.c", 5.0, app=app).save()
        assert RedBeatSchedulerEntry.from_key("{redbeat}:c", app=app).task == "tasks.c"
        assert app.redbeat_redis.hget("{redbeat}:c", "definition").startswith(b"{")
    finally:
        deployment.stop()

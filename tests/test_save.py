"""``RedBeatSchedulerEntry.save()`` in one round trip (save.lua), keeping what two did:
the stored run history, the one next-run rule (nextrun.py) applied to it, one atomic
write. Real redis-server; round trips counted on the client."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from celery.schedules import crontab

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.entry import EntryNotFound, meta_json
from redbeat.manage import delete_entry, set_enabled
from redbeat.nextrun import next_run
from redbeat.policy import DEFAULT, EntryPolicy
from redbeat.runtime import store_for
from support.counting import counting_client

SCHEDULE = "redbeat::schedule"


def counted_app(redis_server):
    app = make_app(redis_server.url)
    app.redbeat_redis = counting_client(redis_server.url)
    store_for(app).preload()  # connected, scripts loaded: outside the counts
    return app


def saved(app, entry: RedBeatSchedulerEntry) -> int:
    """Save ``entry``; the round trips it took."""
    counter = app.redbeat_redis.counter
    before = counter.round_trips
    entry.save()
    return counter.round_trips - before


def score(redis_server, name: str) -> float | None:
    return redis_server.client().zscore(SCHEDULE, f"redbeat:{name}")


def ran_at(redis_server, name: str, last: datetime, count: int, at: float) -> None:
    """Record a run as the tick does: meta (with a count) and the next score together."""
    with redis_server.client().pipeline(transaction=True) as pipe:
        pipe.hset(f"redbeat:{name}", "meta", meta_json(last, count))
        pipe.zadd(SCHEDULE, {f"redbeat:{name}": at})
        pipe.execute()


def test_a_new_entry_and_a_resave_of_it_are_one_round_trip_each(redis_server):
    app = counted_app(redis_server)
    entry = RedBeatSchedulerEntry("new", "tasks.x", 60.0, args=[1], app=app)
    assert saved(app, entry) == 1
    assert score(redis_server, "new") == entry.score
    assert saved(app, entry) == 1  # its own meta is the stored one
    cron = RedBeatSchedulerEntry("cron", "tasks.x", crontab(minute="*/5"), app=app)
    assert saved(app, cron) == 1
    assert score(redis_server, "cron") == cron.score


def test_an_unchanged_entry_built_afresh_keeps_its_history_and_score_in_one_round_trip(
        redis_server):
    """The application that saves its entries at every start: the stored meta (a run 30 s
    ago) stays, and so does the score the rule gave it, in one round trip."""
    app = counted_app(redis_server)
    RedBeatSchedulerEntry("daily", "tasks.x", 60.0, app=app).save()
    last = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=30)
    schedule = RedBeatSchedulerEntry("daily", "tasks.x", 60.0, app=app).schedule
    rule = next_run(schedule, DEFAULT, "daily", last, last).score
    ran_at(redis_server, "daily", last, 7, rule)
    meta = redis_server.client().hget("redbeat:daily", "meta")
    assert saved(app, RedBeatSchedulerEntry("daily", "tasks.x", 60.0, app=app)) == 1
    assert score(redis_server, "daily") == rule
    assert redis_server.client().hget("redbeat:daily", "meta") == meta  # 7 runs kept


def test_a_changed_schedule_is_scored_from_the_stored_last_run(redis_server):
    app = counted_app(redis_server)
    last = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=30)
    RedBeatSchedulerEntry("edited", "tasks.x", 60.0, app=app, last_run_at=last).save()
    ran_at(redis_server, "edited", last, 3, (last + timedelta(seconds=60)).timestamp())
    faster = RedBeatSchedulerEntry("edited", "tasks.x", 10.0, app=app)  # last run: now
    assert saved(app, faster) == 2  # the rule is Python's: the stored meta, then the write
    assert score(redis_server, "edited") == (last + timedelta(seconds=10)).timestamp()
    assert '"total_run_count": 3' in redis_server.client().hget("redbeat:edited", "meta")


def test_the_same_last_run_with_a_count_stored_is_one_round_trip(redis_server):
    """What ``redbeat disable``/``edit`` save: the entry as loaded (its last run), under
    a meta that also holds the run count."""
    app = counted_app(redis_server)
    last = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=30)
    RedBeatSchedulerEntry("loaded", "tasks.x", 60.0, app=app, last_run_at=last).save()
    ran_at(redis_server, "loaded", last, 4, (last + timedelta(seconds=60)).timestamp())
    entry = RedBeatSchedulerEntry.from_key("redbeat:loaded", app=app)
    entry.args = [2]
    assert saved(app, entry) == 1
    assert score(redis_server, "loaded") == (last + timedelta(seconds=60)).timestamp()


def test_a_quarantined_or_policy_changed_entry_is_rescored_and_cleared(redis_server):
    app = counted_app(redis_server)
    client = redis_server.client()
    last = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=30)
    entry = RedBeatSchedulerEntry("sick", "tasks.x", 60.0, app=app, last_run_at=last)
    entry.save()
    ran_at(redis_server, "sick", last, 1, -1)
    client.hset("redbeat:sick", "quarantine", '{"reason": "broken"}')
    assert saved(app, RedBeatSchedulerEntry("sick", "tasks.x", 60.0, app=app)) == 2
    assert client.hget("redbeat:sick", "quarantine") is None
    assert score(redis_server, "sick") == (last + timedelta(seconds=60)).timestamp()
    jittered = RedBeatSchedulerEntry("sick", "tasks.x", 60.0, app=app,
                                     policy=EntryPolicy(jitter=5.0))
    assert saved(app, jittered) == 2
    expected = next_run(jittered.schedule, jittered.policy, "sick", last, last).score
    assert score(redis_server, "sick") == expected
    assert client.hget("redbeat:sick", "policy") == jittered.policy.to_json()
    assert saved(app, RedBeatSchedulerEntry("sick", "tasks.x", 60.0, app=app)) == 2
    assert client.hget("redbeat:sick", "policy") is None  # removed with the policy


def test_a_run_recorded_between_the_read_and_the_write_is_not_overwritten(redis_server):
    """The score is written only while the meta it was worked out from is the stored
    one: a tick that records a run in between makes the save work it out again."""
    app = make_app(redis_server.url)
    client = redis_server.client()
    last = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=120)
    RedBeatSchedulerEntry("raced", "tasks.x", 60.0, app=app, last_run_at=last).save()
    ran_at(redis_server, "raced", last, 1, (last + timedelta(seconds=60)).timestamp())
    later = last + timedelta(seconds=60)
    store = store_for(app)
    asked: list[str | None] = []
    entry = RedBeatSchedulerEntry("raced", "tasks.x", 30.0, app=app)

    def rescore(stored: str | None) -> float:
        asked.append(stored)
        if len(asked) == 1:  # a tick runs the slot meanwhile
            ran_at(redis_server, "raced", later, 2, (later + timedelta(seconds=60)).timestamp())
        return entry._score_after(stored)

    store.save(entry.key, entry.definition_json(), meta_json(entry.last_run_at), entry.score,
               "{}", None, rescore)
    assert asked == [meta_json(last, 1), meta_json(later, 2)]
    assert score(redis_server, "raced") == (later + timedelta(seconds=30)).timestamp()
    assert client.hget("redbeat:raced", "meta") == meta_json(later, 2)


def test_an_entry_deleted_between_the_read_and_the_write_is_saved_as_new(redis_server):
    app = make_app(redis_server.url)
    last = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=120)
    RedBeatSchedulerEntry("gone", "tasks.x", 60.0, app=app, last_run_at=last).save()
    entry = RedBeatSchedulerEntry("gone", "tasks.x", 30.0, app=app)
    asked: list[str | None] = []

    def rescore(stored: str | None) -> float:
        asked.append(stored)
        if len(asked) == 1:
            entry.store.delete(entry.key)
        return entry._score_after(stored)

    entry.store.save(entry.key, entry.definition_json(), meta_json(entry.last_run_at),
                     entry.score, "{}", None, rescore)
    assert asked == [meta_json(last), None]
    assert score(redis_server, "gone") == entry.score
    assert redis_server.client().hget("redbeat:gone", "meta") == meta_json(entry.last_run_at)


def test_a_disabled_entry_is_one_round_trip_and_keeps_its_history(redis_server):
    app = counted_app(redis_server)
    last = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=30)
    RedBeatSchedulerEntry("off", "tasks.x", 60.0, app=app, last_run_at=last).save()
    ran_at(redis_server, "off", last, 2, (last + timedelta(seconds=60)).timestamp())
    off = RedBeatSchedulerEntry("off", "tasks.x", 60.0, app=app, enabled=False)
    trips = saved(app, off)
    assert trips <= 2
    assert '"total_run_count": 2' in redis_server.client().hget("redbeat:off", "meta")
    assert score(redis_server, "off") == off.copy(last_run_at=last).score


def test_from_key_delete_and_the_operators_delete_are_one_round_trip(redis_server):
    app = counted_app(redis_server)
    client = redis_server.client()
    counter = app.redbeat_redis.counter
    RedBeatSchedulerEntry("a", "tasks.x", 60.0, app=app).save()
    RedBeatSchedulerEntry("b", "tasks.x", 60.0, app=app).save()
    client.sadd("redbeat::statics", "b")
    before = counter.round_trips
    entry = RedBeatSchedulerEntry.from_key("redbeat:a", app=app)
    entry.delete()
    delete_entry(app, "b")
    assert counter.round_trips - before == 3
    assert client.exists("redbeat:a", "redbeat:b") == 0
    assert client.zcard(SCHEDULE) == 0
    assert client.smembers("redbeat::statics") == set()
    client.set("redbeat:other", "another client's string")
    with pytest.raises(EntryNotFound):
        delete_entry(app, "other")
    assert client.get("redbeat:other") == "another client's string"
    RedBeatSchedulerEntry("c", "tasks.x", 60.0, app=app).save()
    before = counter.round_trips
    set_enabled(app, "c", False)  # read (no history), then the save
    assert counter.round_trips - before == 2

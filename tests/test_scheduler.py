"""The tick on a real Redis, with a controlled clock."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from celery.schedules import crontab

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.entry import meta_json
from redbeat.schedulers import get_redis
from support.counting import counting_client
from support.held import held_definitions, held_records
from support.recording import T0, Clock, Recording, at, leader


def hour_ago() -> datetime:
    """A ``last_run_at`` that makes an hourly entry due now on the real clock (a new
    entry first runs one interval after it is created)."""
    return datetime.now(timezone.utc) - timedelta(hours=1, seconds=1)


def test_due_interval_is_sent_with_its_slot_id_and_rescheduled(app):
    clock = Clock()
    entry = RedBeatSchedulerEntry("every-10", "tasks.x", 10.0, app=app,
                                  last_run_at=at(-10))
    entry.save()
    scheduler = leader(app, clock)
    scheduler.tick()
    slot_ms = round(T0 * 1000)
    assert scheduler.sent == [("every-10", f"every-10:{slot_ms}")]
    stored = RedBeatSchedulerEntry.from_key(entry.key, app=app)
    assert stored.last_run_at == at(0) and stored.total_run_count == 1
    assert get_redis(app).zscore(app.redbeat_conf.schedule_key, entry.key) == T0 + 10
    assert get_redis(app).zcard(app.redbeat_conf.keys.pending) == 0  # confirmed


def test_not_due_is_not_sent_and_sleep_is_until_due(app):
    clock = Clock()
    RedBeatSchedulerEntry("later", "tasks.x", 9.5, app=app, last_run_at=at(-9)).save()
    scheduler = leader(app, clock)
    assert scheduler.tick() == pytest.approx(0.5)
    assert scheduler.sent == []


def test_missed_slots_are_coalesced_into_one_run(app):
    clock = Clock()
    RedBeatSchedulerEntry("minutely", "tasks.x", 60.0, app=app, last_run_at=at(-3600 - 30)).save()
    scheduler = leader(app, clock)
    scheduler.tick()
    assert scheduler.sent == [("minutely", f"minutely:{round((T0 - 30) * 1000)}")]
    scheduler.tick()
    assert len(scheduler.sent) == 1


def test_a_short_relative_interval_keeps_its_own_grid_after_downtime(app):
    """Issue 12, item 2: 7 s relative, due 10:00:00, beat down until 10:01:05.3: the
    catch-up run is the chain's 10:01:03 (it was 10:01:01, from now - 60 s), and the
    runs after it stay on the chain."""
    from celery.schedules import schedule

    ten = datetime(2027, 5, 4, 10, 0, 0, tzinfo=timezone.utc)
    RedBeatSchedulerEntry("rel", "tasks.x", schedule(timedelta(seconds=7), relative=True),
                          app=app, last_run_at=ten - timedelta(seconds=7)).save()
    clock = Clock((ten + timedelta(minutes=1, seconds=5.3)).timestamp())
    scheduler = leader(app, clock)
    scheduler.tick()
    for seconds in (70, 70.5, 77, 84):
        clock.now = (ten + timedelta(seconds=seconds)).timestamp()
        scheduler.tick()
    dues = [int(task_id.rsplit(":", 1)[1]) / 1000 - ten.timestamp()
            for _, task_id in scheduler.sent]
    assert dues == [63, 70, 77, 84]


def test_early_score_is_corrected_without_sending(app):
    clock = Clock()
    entry = RedBeatSchedulerEntry("hourly", "tasks.x", 3600.0, app=app, last_run_at=at(-60))
    entry.save()
    client = get_redis(app)
    client.zadd(app.redbeat_conf.schedule_key, {entry.key: T0 - 100})  # as 2.4.2 stores it
    scheduler = leader(app, clock)
    scheduler.tick()
    assert scheduler.sent == []
    assert client.zscore(app.redbeat_conf.schedule_key, entry.key) == T0 + 3540


def test_disabled_entries_keep_a_due_score_and_an_in_place_enable_runs_them(app):
    """Issue 21 item 2: a disabled entry keeps a real due score, as in 2.4.2; read as due
    it sends nothing and is scored at its next time (read once per slot, not per tick),
    and enabling it by rewriting its definition in place, as code written for 2.4.2 does
    (HSET, no ZADD), makes it run at its next slot."""
    # on the real clock: without Celery's own static (celery.backend_cleanup, daily at
    # 4:00 UTC), which a run spanning 4:00 would send too
    app.conf.result_expires = None
    clock = Clock(time.time())
    entry = RedBeatSchedulerEntry("off", "tasks.x", 60.0, app=app, enabled=False)
    entry.save()
    client = get_redis(app)
    key = app.redbeat_conf.schedule_key
    assert client.zscore(key, entry.key) > clock.now
    client.zadd(key, {entry.key: 1})  # overdue
    scheduler = leader(app, clock)
    scheduler.tick()
    assert scheduler.sent == []
    rescored = client.zscore(key, entry.key)
    assert clock.now < rescored <= clock.now + 60
    definition = json.loads(client.hget(entry.key, "definition"))
    client.hset(entry.key, "definition", json.dumps({**definition, "enabled": True}))
    clock.now = rescored + 0.5
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["off"]


def test_member_without_hash_is_removed(app, caplog):
    client = get_redis(app)
    client.zadd(app.redbeat_conf.schedule_key, {"redbeat:ghost": 0})
    scheduler = leader(app, Clock())
    scheduler.tick()
    assert client.zscore(app.redbeat_conf.schedule_key, "redbeat:ghost") is None


def test_poison_entry_is_quarantined_and_others_run(app):
    client = get_redis(app)
    client.hset("redbeat:bad", "definition", "{not json")
    client.zadd(app.redbeat_conf.schedule_key, {"redbeat:bad": 0})
    RedBeatSchedulerEntry("good", "tasks.x", 5.0, app=app, last_run_at=at(0)).save()
    scheduler = leader(app, Clock(T0 + 1e6))
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["good"]
    assert "definition" in json.loads(client.hget("redbeat:bad", "quarantine"))["reason"]
    assert client.zscore(app.redbeat_conf.schedule_key, "redbeat:bad") == -1


def test_raw_redis_entries_run(app):
    """The documented recipe for writers in other languages: HSET + ZADD 0."""
    client = get_redis(app)
    client.hset("redbeat:raw-interval", "definition", json.dumps({
        "name": "raw-interval", "task": "tasks.raw",
        "schedule": {"__type__": "interval", "every": 30, "relative": False}}))
    client.zadd("redbeat::schedule", {"redbeat:raw-interval": 0})
    client.hset("redbeat:raw-cron", "definition", json.dumps({
        "name": "raw-cron", "task": "tasks.report", "args": [], "kwargs": {}, "options": {},
        "enabled": True, "schedule": {"__type__": "crontab", "minute": "0", "hour": "3"}}))
    client.zadd("redbeat::schedule", {"redbeat:raw-cron": 0})
    scheduler = leader(app, Clock())
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["raw-interval"]
    # the crontab is not due at 12:00: it waits for 03:00 the next day
    next_cron = datetime(2026, 11, 24, 3, tzinfo=timezone.utc).timestamp()
    assert client.zscore("redbeat::schedule", "redbeat:raw-cron") == next_cron


def test_standby_does_not_dispatch_and_takes_over_on_release(app, redis_server):
    clock = Clock()
    RedBeatSchedulerEntry("e", "tasks.x", 1.0, app=app, last_run_at=at(-1)).save()
    first = leader(app, clock)
    second = Recording(make_app(redis_server.url), clock=clock)
    assert second.tick() == pytest.approx(1.0)  # standby polls every second
    assert not second.leading
    holder = get_redis(app).get(app.redbeat_conf.lock_key)
    assert holder == first.lock.token and holder.split(":")[1].isdigit()
    first.close()
    assert get_redis(app).get(app.redbeat_conf.lock_key) is None
    assert second.tick() == 0.0 and second.leading
    second.tick()
    assert first.sent == [] and [n for n, _ in second.sent] == ["e"]


def test_expired_lock_is_taken_by_a_standby(redis_server):
    fast = {"redbeat_lock_timeout": 4, "redbeat_poll_interval": 1}
    app_a, app_b = make_app(redis_server.url, **fast), make_app(redis_server.url, **fast)
    a = leader(app_a, Clock())
    b = Recording(app_b, clock=Clock())
    b.tick()
    ttl = get_redis(app_a).pttl(app_a.redbeat_conf.lock_key)
    assert 3000 < ttl <= 4000
    get_redis(app_a).pexpire(app_a.redbeat_conf.lock_key, 1)  # as if A froze past expiry
    import time
    time.sleep(0.01)
    assert b.tick() == 0.0 and b.leading
    a.tick()  # A finds the lock gone to B and stands by, without crashing
    assert not a.leading


def test_commit_after_losing_the_lock_dispatches_nothing(app):
    clock = Clock()
    RedBeatSchedulerEntry("e", "tasks.x", 1.0, app=app, last_run_at=at(-5)).save()
    scheduler = leader(app, clock)
    client = get_redis(app)
    real_commit = scheduler.store.commit

    def commit_after_takeover(ops, lease, node, claimed_at):
        client.set(app.redbeat_conf.lock_key, "other-host:1:abc")  # another node took over
        return real_commit(ops, lease, node, claimed_at)

    scheduler.store.commit = commit_after_takeover
    scheduler.tick()
    assert scheduler.sent == [] and not scheduler.leading
    stored = RedBeatSchedulerEntry.from_key("redbeat:e", app=app)
    assert stored.last_run_at == at(-5)  # nothing written


def test_exit_on_lock_loss_setting(redis_server):
    app = make_app(redis_server.url, redbeat_exit_on_lock_loss=True)
    scheduler = leader(app, Clock())
    get_redis(app).set(app.redbeat_conf.lock_key, "other-host:1:abc")
    with pytest.raises(SystemExit):
        scheduler.tick()


def test_statics_sync_keeps_history_and_removes_dropped(redis_server):
    schedule = {"s1": {"task": "tasks.a", "schedule": 10.0},
                "s2": {"task": "tasks.b", "schedule": crontab(minute=0)}}
    app = make_app(redis_server.url, beat_schedule=schedule)
    client = get_redis(app)
    RedBeatSchedulerEntry("dynamic", "tasks.d", 10.0, app=app).save()
    clock = Clock()
    first = leader(app, clock)
    assert client.smembers("redbeat::statics") >= {"s1", "s2"}
    first.tick()
    # a new static first runs one interval after it is synced
    assert not [name for name, _ in first.sent if name.startswith("s")]
    clock.now += 10
    first.tick()
    assert ("s1", f"s1:{round((T0 + 10) * 1000)}") in first.sent
    first.close()

    changed = make_app(redis_server.url, beat_schedule={
        "s1": {"task": "tasks.a2", "schedule": 10.0},
        "broken": {"task": "tasks.x", "schedule": "not a schedule"}})
    second = leader(changed, clock)
    s1 = RedBeatSchedulerEntry.from_key("redbeat:s1", app=changed)
    assert s1.task == "tasks.a2" and s1.total_run_count == 1  # history kept
    assert not client.exists("redbeat:s2") and "s2" not in client.smembers("redbeat::statics")
    assert client.exists("redbeat:dynamic")
    assert not client.exists("redbeat:broken")
    second.close()


def test_a_static_whose_key_holds_something_else_replaces_it(redis_server):
    app = make_app(redis_server.url, beat_schedule={
        "s1": {"task": "tasks.a", "schedule": 10.0},
        "s2": {"task": "tasks.b", "schedule": 10.0}})
    get_redis(app).set("redbeat:s1", "junk")  # not a hash: would fail every HSET
    clock = Clock()
    scheduler = leader(app, clock)
    clock.now += 10
    scheduler.tick()
    assert sorted(name for name, _ in scheduler.sent) == ["s1", "s2"]
    assert RedBeatSchedulerEntry.from_key("redbeat:s1", app=app).task == "tasks.a"


def test_standby_writes_statics_at_start_up_only(redis_server):
    """As 2.4.2 did, every node writes its beat_schedule when it starts (issue 21 item 6);
    afterwards only the leader does."""
    app = make_app(redis_server.url)
    first = leader(app, Clock())
    other = make_app(redis_server.url, beat_schedule={"s9": {"task": "t", "schedule": 5.0}})
    standby = Recording(other, clock=Clock())
    assert get_redis(app).exists("redbeat:s9")  # written by the standby's setup_schedule
    get_redis(app).delete("redbeat:s9")
    standby.tick()
    assert not get_redis(app).exists("redbeat:s9")  # a standby's tick never writes them
    first.close()


@pytest.mark.parametrize("due_count", [1, 500, 2000])
def test_round_trips_per_tick_do_not_grow_with_due_entries(redis_server, due_count):
    """A regression to per-entry round trips cannot land: 3 for any number due."""
    app = make_app(redis_server.url, redbeat_batch_size=5000)
    writer = get_redis(app)
    definition = {"task": "tasks.x", "args": None, "kwargs": {}, "options": {},
                  "schedule": {"__type__": "interval", "every": 60.0, "relative": False},
                  "enabled": True}
    with writer.pipeline() as pipe:
        for i in range(due_count):
            pipe.hset(f"redbeat:e{i}", "definition", json.dumps({"name": f"e{i}", **definition}))
            pipe.zadd("redbeat::schedule", {f"redbeat:e{i}": T0 - 1})
        pipe.execute()
    app.redbeat_redis = client = counting_client(redis_server.url)
    # the lease is measured on a clock of the test's: on a loaded machine the 2000 sends
    # outlasted the real 5-s lease (1837 sent), which is not what is counted here
    scheduler = Recording(app, clock=Clock(), monotonic=Clock(0.0))
    assert scheduler.tick() == 0.0  # the lock taken
    before = client.counter.round_trips
    scheduler.tick()
    busy = client.counter.round_trips - before
    assert len(scheduler.sent) == due_count
    before = client.counter.round_trips
    scheduler.tick()
    idle = client.counter.round_trips - before
    assert (busy, idle) == (3, 1)


def test_backlog_is_drained_in_bounded_batches(redis_server):
    app = make_app(redis_server.url, redbeat_batch_size=100)
    for i in range(250):
        RedBeatSchedulerEntry(f"b{i}", "tasks.x", 3600.0, app=app, last_run_at=at(0)).save()
    scheduler = leader(app, Clock(T0 + 10**6))
    intervals = [scheduler.tick() for _ in range(3)]
    assert intervals[:2] == [0.0, 0.0]  # full batches: tick again at once
    assert len(scheduler.sent) == 250
    assert len({task_id for _, task_id in scheduler.sent}) == 250


class SlowBroker(Recording):
    """Each send takes ``send_seconds`` of the scheduler's monotonic clock, and as long
    of the lock's real time to live (so the lock expires in Redis as it would had the
    time really passed), without sleeping."""

    send_seconds = 1.0
    on_send = None

    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        self.monotonic.now += self.send_seconds
        client = get_redis(self.app)
        key = self.app.redbeat_conf.lock_key
        left = client.pttl(key)
        if left > 0:
            client.pexpire(key, max(1, left - int(self.send_seconds * 1000)))
        super().apply_async(entry, producer, advance, **kwargs)
        if self.on_send is not None:
            self.on_send(self)


def test_slow_publishing_keeps_the_lock_alive(redis_server):
    """A broker slower than the lock timeout must not hand leadership away: the publish
    renews the lock every third of its timeout, and every slot still goes out once."""
    app = make_app(redis_server.url, redbeat_lock_timeout=4)
    for i in range(6):
        RedBeatSchedulerEntry(f"slow{i}", "tasks.x", 3600.0, app=app, last_run_at=hour_ago()).save()
    scheduler = SlowBroker(app, monotonic=Clock(1000.0))  # 6 sends: 6 s > the 4 s lock
    for _ in range(3):
        scheduler.tick()
        assert scheduler.leading
    assert scheduler.monotonic.now == 1006.0
    assert sorted(task_id for _, task_id in scheduler.sent) == sorted(
        {task_id for _, task_id in scheduler.sent}) and len(scheduler.sent) == 6
    assert get_redis(app).zcard(app.redbeat_conf.keys.pending) == 0
    assert get_redis(app).get(app.redbeat_conf.lock_key) == scheduler.lock.token
    scheduler.close()


def test_the_commit_renews_the_lease_from_when_it_was_asked_for(redis_server):
    """commit.lua renews the lease; its reply may come late (the WAIT for replicas, a
    starved leader), so the lease the sends are measured against starts when the commit
    was asked for, not when its reply came back."""
    app = make_app(redis_server.url, redbeat_lock_timeout=4)
    RedBeatSchedulerEntry("due", "tasks.x", 3600.0, app=app, last_run_at=hour_ago()).save()
    scheduler = Recording(app, monotonic=Clock(1000.0))
    scheduler.tick()  # takes the lock
    original_commit = scheduler.store.commit

    def late_reply(*args, **kwargs):
        asked_at = scheduler.monotonic.now
        result = original_commit(*args, **kwargs)
        scheduler.monotonic.now = asked_at + 1.5
        return result

    scheduler.monotonic.now = 1000.5  # the tick's own read renews from 1000.5...
    scheduler.store.commit = late_reply
    original_fetch = scheduler.store.fetch

    def fetch(*args, **kwargs):
        result = original_fetch(*args, **kwargs)
        scheduler.monotonic.now += 0.5  # ...and the commit is asked for at 1001.0
        return result

    scheduler.store.fetch = fetch
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["due"]
    assert scheduler.lock.renewed_at == 1001.0  # not 1002.5, when the reply came
    scheduler.close()


def test_lock_lost_while_publishing_stops_and_confirms_what_was_sent(redis_server):
    app = make_app(redis_server.url, redbeat_lock_timeout=4)
    for i in range(4):
        RedBeatSchedulerEntry(f"p{i}", "tasks.x", 3600.0, app=app, last_run_at=hour_ago()).save()
    client = get_redis(app)

    def take_over(scheduler):
        if len(scheduler.sent) == 2:
            client.set(app.redbeat_conf.lock_key, "other:1:x")  # taken over

    scheduler = SlowBroker(app, monotonic=Clock(1000.0))
    scheduler.send_seconds = 1.4  # past a third of the lock: the next send checks it
    scheduler.on_send = take_over
    scheduler.tick()  # takes the lock
    scheduler.tick()  # sends two, finds the lock taken when it renews before the third
    assert len(scheduler.sent) == 2 and not scheduler.leading
    pending = client.zrange(app.redbeat_conf.keys.pending, 0, -1)
    assert len(pending) == 2 and not set(pending) & {tid for _, tid in scheduler.sent}
    scheduler.close()


def test_member_whose_key_is_not_a_hash_is_removed_and_others_run(app):
    client = get_redis(app)
    client.set("redbeat:stringy", "oops")
    client.zadd(app.redbeat_conf.schedule_key, {"redbeat:stringy": 0})
    RedBeatSchedulerEntry("fine", "tasks.x", 5.0, app=app, last_run_at=at(0)).save()
    scheduler = leader(app, Clock(T0 + 1e6))
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["fine"]
    assert client.zscore(app.redbeat_conf.schedule_key, "redbeat:stringy") is None
    assert client.get("redbeat:stringy") == "oops"  # not ours to delete


def broker_task_ids(broker) -> list[str]:
    """Task ids of the messages waiting in a Redis broker's default queue."""
    return [json.loads(raw)["headers"]["id"] for raw in broker.client().lrange("celery", 0, -1)]


def test_broker_outage_keeps_the_slot_pending_and_resends_it_with_the_same_id(redis_server):
    """Real Celery publishing to a real Redis broker that goes away and comes back."""
    from support.redis_server import RedisServer

    with RedisServer() as broker:
        app = make_app(redis_server.url, broker_url=broker.url, task_publish_retry=False,
                       broker_connection_timeout=1)
        RedBeatSchedulerEntry("job", "tasks.job", 3600.0, app=app, last_run_at=hour_ago()).save()
        RedBeatSchedulerEntry("next", "tasks.next", 3600.0, app=app, last_run_at=hour_ago()).save()
        scheduler = RedBeatScheduler(app)
        assert scheduler.producer is not None  # connected while the broker is up, as in beat
        broker.stop()
        scheduler.tick()
        scheduler.tick()
        pending = get_redis(app).zrange(app.redbeat_conf.keys.pending, 0, -1)
        assert len(pending) == 2
        broker.start()
        scheduler.tick()
        assert sorted(broker_task_ids(broker)) == sorted(pending)
        assert get_redis(app).zcard(app.redbeat_conf.keys.pending) == 0
        scheduler.close()


def test_a_message_celery_refuses_is_dropped_and_does_not_block_others(redis_server, caplog):
    from support.redis_server import RedisServer

    with RedisServer() as broker:
        app = make_app(redis_server.url, broker_url=broker.url)
        RedBeatSchedulerEntry("bad", "tasks.bad", 3600.0, options={"serializer": "nope"},
                              app=app, last_run_at=hour_ago()).save()
        RedBeatSchedulerEntry("good", "tasks.good", 3600.0, app=app, last_run_at=hour_ago()).save()
        scheduler = RedBeatScheduler(app)
        scheduler.tick()
        scheduler.tick()
        ids = broker_task_ids(broker)
        assert [task_id.split(":")[0] for task_id in ids] == ["good"]
        assert "cannot be published" in caplog.text
        assert get_redis(app).zcard(app.redbeat_conf.keys.pending) == 0
        scheduler.close()


def test_an_entry_whose_next_run_cannot_be_computed_is_quarantined(app):
    """A last run near the end of time overflows the date arithmetic."""
    client = get_redis(app)
    doomsday = RedBeatSchedulerEntry("doomsday", "tasks.x", 10**9, app=app)
    client.hset(doomsday.key, mapping={
        "definition": doomsday.definition_json(),
        "meta": meta_json(datetime(9999, 12, 1, tzinfo=timezone.utc)),
    })
    client.zadd(app.redbeat_conf.schedule_key, {doomsday.key: 0})
    RedBeatSchedulerEntry("fine", "tasks.x", 5.0, app=app, last_run_at=at(0)).save()
    scheduler = leader(app, Clock(T0 + 1e6))
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["fine"]
    reason = json.loads(client.hget("redbeat:doomsday", "quarantine"))["reason"]
    assert "OverflowError" in reason


def test_corrupt_bytes_in_a_key_and_a_definition_are_quarantined(app, redis_server):
    raw = redis_server.client(decode_responses=False)
    raw.hset(b"redbeat:bad\xff", b"definition", b'{"name": "bad\xff", "task": "t"}')
    raw.zadd(b"redbeat::schedule", {b"redbeat:bad\xff": 0})
    raw.hset(b"redbeat:junk", b"definition", b"\xfe\xff{")
    raw.zadd(b"redbeat::schedule", {b"redbeat:junk": 0})
    RedBeatSchedulerEntry("fine", "tasks.x", 5.0, app=app, last_run_at=at(0)).save()
    scheduler = leader(app, Clock(T0 + 1e6))
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["fine"]
    assert raw.zscore(b"redbeat::schedule", b"redbeat:bad\xff") == -1
    assert raw.hexists(b"redbeat:bad\xff", b"quarantine")
    assert raw.zscore(b"redbeat::schedule", b"redbeat:junk") == -1


def test_an_evicting_redis_is_warned_about_or_refused(caplog):
    from support.redis_server import RedisServer

    with RedisServer(extra_args=["--maxmemory-policy", "allkeys-lru"]) as server:
        RedBeatScheduler(make_app(server.url)).close()
        assert "maxmemory-policy is allkeys-lru" in caplog.text
        with pytest.raises(SystemExit, match="refused"):
            RedBeatScheduler(make_app(server.url, redbeat_refuse_evicting_redis=True))


def test_sleep_honours_a_score_corrected_in_this_tick(app):
    """celery-redbeat saves due times cut to the second (a fractional interval's too);
    the corrected time, not the poll interval, decides how long the leader sleeps."""
    RedBeatSchedulerEntry("cut", "tasks.x", 3599.5, app=app, last_run_at=at(-3599.1)).save()
    get_redis(app).zadd(app.redbeat_conf.schedule_key, {"redbeat:cut": int(T0)})
    scheduler = leader(app, Clock())
    assert scheduler.tick() == pytest.approx(0.4, abs=0.01)


class BrokerDown(Recording):
    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        raise ConnectionRefusedError("broker down")


def test_a_pending_message_holds_the_claimed_definition_byte_for_byte(app):
    """commit.lua writes the message; the definition has quotes, slashes, escapes and
    text beyond ASCII, all of which must come back exactly."""
    from redbeat.planning import Claim, pending_message, read_pending
    from redbeat.store import Row, definition_sha1

    entry = RedBeatSchedulerEntry("café/\"x\"", "tasks.x", 10.0, app=app,
                                  args=["naïve ☃", "tab\there", "\u2028"], last_run_at=at(-10))
    entry.save()
    scheduler = BrokerDown(app, clock=Clock())
    scheduler.tick()
    scheduler.tick()
    pending = held_records(get_redis(app))
    task_id = f"{entry.name}:{round(T0 * 1000)}"
    assert list(pending) == [task_id]
    message = json.loads(pending[task_id])
    definition = get_redis(app).hget(entry.key, "definition")
    sha = definition_sha1(definition)
    assert message == {"key": entry.key, "definition_sha1": sha,
                       "due": T0, "claimed_at": T0, "node": scheduler.node_id,
                       "reason": "scheduled"}
    # the definition is held once, byte for byte, under the name the message gives it
    assert held_definitions(get_redis(app)) == {sha: (definition, 1)}
    resent = read_pending(app, pending[task_id], RedBeatSchedulerEntry,
                          held={sha: definition})
    assert resent.entry.args == entry.args and resent.due == at(0)
    # the Python producer (run-now's) writes the same message for the same slot
    python_made = pending_message(Row(entry.key, T0, definition, None),
                                  Claim(task_id, resent.entry, at(0)), at(0), scheduler.node_id)
    assert json.loads(python_made) == message


def test_the_tick_runs_on_fakeredis_whose_lua_lacks_sha1hex(fake_app, caplog):
    """fakeredis (many projects' test Redis, 2.4.2's own suite's) has no
    ``redis.sha1hex`` in EVAL: the scripts compute the digest themselves there (issue 21
    item 8), so a tick sends the due entry once, and the next tick nothing."""
    RedBeatSchedulerEntry("now", "tasks.x", 10.0, app=fake_app,
                          last_run_at=datetime.now(timezone.utc) - timedelta(minutes=1)).save()
    scheduler = Recording(fake_app)
    scheduler.tick()  # takes the lock and syncs the statics
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["now"]
    scheduler.tick()
    assert len(scheduler.sent) == 1
    assert "Redis unavailable" not in caplog.text and "sha1hex" not in caplog.text


def test_a_paused_schedule_sends_nothing_held_or_due_until_resumed(app):
    """tick.lua asks whether the schedule is paused and whether slots are held in one
    call: each answer must still count on its own, and together."""
    from redbeat import manage

    clock = Clock()
    RedBeatSchedulerEntry("e", "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
    scheduler = leader(app, clock)
    manage.pause(app)
    scheduler.tick()
    assert scheduler.sent == [] and scheduler.leading
    manage.run_now(app, "e")  # a held slot while paused
    scheduler.tick()
    assert scheduler.sent == []
    manage.resume(app)
    scheduler.tick()
    assert sorted(name for name, _ in scheduler.sent) == ["e", "e"]


@pytest.mark.parametrize("statics", [1, 300])
def test_start_up_is_five_round_trips_and_a_restart_writes_no_static(redis_server, statics):
    """Construction (scripts loaded, the statics written as every node does) and the
    first tick (the lock, the statics again as the new leader, the sweep reading the
    heartbeats) cost five round trips whatever the number of statics: the leader's second write is
    decided on the server and writes nothing that is stored as configured."""
    schedule = {f"s{i}": {"task": "tasks.s", "schedule": 60.0} for i in range(statics)}
    costs = []
    for _ in range(2):  # the first start, then a restart
        app = make_app(redis_server.url, beat_schedule=schedule)
        app.redbeat_redis = client = counting_client(redis_server.url)
        client.ping()  # the connection's handshake is not the scheduler's
        before = client.counter.round_trips
        scheduler = leader(app, Clock())
        costs.append(client.counter.round_trips - before)
        scheduler.close()
        client.hset("redbeat:s0", "changed", "by hand")  # rewritten only if s0 is
    assert costs == [5, 5]
    assert client.hget("redbeat:s0", "changed") == "by hand"
    assert client.smembers("redbeat::statics") >= set(schedule)


def test_a_new_leader_writes_back_only_the_statics_changed_since_its_start_up(redis_server):
    schedule = {"s1": {"task": "tasks.a", "schedule": 60.0},
                "s2": {"task": "tasks.b", "schedule": 60.0}}
    first = leader(make_app(redis_server.url), Clock())
    app = make_app(redis_server.url, beat_schedule=schedule)
    standby = Recording(app, clock=Clock())  # writes s1 and s2 at start-up
    client = get_redis(app)
    client.hset("redbeat:s1", "definition",
                client.hget("redbeat:s1", "definition").replace("tasks.a", "tasks.edited"))
    client.hset("redbeat:s2", "changed", "by hand")
    first.close()
    assert standby.tick() == 0.0 and standby.leading
    assert RedBeatSchedulerEntry.from_key("redbeat:s1", app=app).task == "tasks.a"
    assert client.hget("redbeat:s2", "changed") == "by hand"  # as configured: not written
    standby.close()


def test_an_idle_tick_runs_seven_commands_on_the_server(redis_server):
    """One round trip: the lock renewed, the heartbeat, the replicas (INFO), paused or
    held slots (one EXISTS), the earliest score; Redis's clock (TIME) only when the fleet
    clock may have moved, the evicted-keys count only under an evicting policy."""
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("hourly", "tasks.x", 3600.0, app=app).save()
    scheduler = Recording(app)  # the host's clock: the fleet clock is on
    scheduler.tick()
    scheduler.tick()  # measured Redis's clock
    admin = redis_server.client()
    admin.config_resetstat()
    for _ in range(10):
        scheduler.tick()
    calls = {name: stats["calls"] for name, stats in admin.info("commandstats").items()
             if name != "cmdstat_config|resetstat"}
    assert scheduler.sent == [] and calls["cmdstat_evalsha"] == 10
    assert sum(calls.values()) == 70, calls
    scheduler.close()


def test_the_leaders_sweep_forgets_the_heartbeats_of_nodes_gone_without_closing(app):
    """sweep.lua reads the heartbeats in its own round trip; the leader drops those older
    than any live node's can be, and the unreadable ones, and keeps the others."""
    client = get_redis(app)
    nodes = app.redbeat_conf.keys.nodes
    client.zadd(nodes, {"gone:1:aa": T0 - 3600, "live:2:bb": -(T0 - 1),
                        "garbage": float("-inf")})
    scheduler = leader(app, Clock())  # taking the lead sweeps
    assert set(client.zrange(nodes, 0, -1)) == {"live:2:bb", scheduler.node_id}
    scheduler.close()

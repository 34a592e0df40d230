"""The hooks a celery-redbeat 2.4.2 user overrides, driven through the real ``tick()`` on a
real Redis: scheduler subclasses (``maybe_due``, ``is_due``, ``reserve``, ``apply_async``,
``send_task``, ``setup_schedule``), patched instances, entry subclasses (constructor,
``is_due``, ``due_at``, ``reschedule``, ``generate_key``, ``_next_instance``), and the
``Lease`` behind ``scheduler.lock``.

What was published is recorded from Celery's ``before_task_publish`` signal, so the
real ``apply_async``/``send_task`` run down to the (in-memory) broker. Entries on the
per-entry path decide "due" with Celery's clock (``app.now()``), so those tests use the
real clock and entries whose last run was over an hour ago.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from celery.schedules import schedstate
from celery.signals import before_task_publish
from redis.exceptions import LockNotOwnedError

from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.entry import to_score
from redbeat.lock import Lease
from redbeat.schedulers import get_redis
from support.recording import after_interval

HOUR = 3600.0
SCHEDULE_KEY = "redbeat::schedule"


def overdue() -> datetime:
    """A last run that makes an hourly entry due now on the real clock (a whole second:
    the runs of an hourly entry fall on whole seconds)."""
    return (datetime.now(timezone.utc) - timedelta(hours=1, seconds=1)).replace(microsecond=0)


def slot_id(name: str, last_run_at: datetime, every: float = HOUR) -> str:
    """The batched path's task id of the slot after ``last_run_at``."""
    return f"{name}:{round((last_run_at.timestamp() + every) * 1000)}"


def stored_meta(app, key: str) -> dict:
    return json.loads(get_redis(app).hget(key, "meta"))


def stored_entry(app, key: str, entry_class=RedBeatSchedulerEntry) -> RedBeatSchedulerEntry:
    return entry_class.from_key(key, app=app)


def score(app, key: str) -> float | None:
    return get_redis(app).zscore(SCHEDULE_KEY, key)


def lead(scheduler: RedBeatScheduler) -> RedBeatScheduler:
    """The first tick takes the lock (and syncs statics); the next one dispatches."""
    assert scheduler.tick() == 0.0 and scheduler.leading
    return scheduler


def is_uuid(task_id: str) -> bool:
    return len(task_id) == 36 and task_id.count("-") == 4


@pytest.fixture
def published():
    """(task name, task id) of every message Celery publishes during the test."""
    sent: list[tuple[str, str]] = []

    def record(sender=None, headers=None, **kwargs):
        sent.append((sender, headers["id"]))

    before_task_publish.connect(record, weak=False)
    yield sent
    before_task_publish.disconnect(record)


class PassThroughIsDue(RedBeatScheduler):
    """Overrides a per-entry hook without changing what it decides."""

    def is_due(self, entry):
        return super().is_due(entry)


# -- which path ----------------------------------------------------------------------------


class Plain(RedBeatScheduler):
    pass


def test_a_subclass_overriding_nothing_keeps_the_batched_path(app, published):
    last = overdue()
    RedBeatSchedulerEntry("plain", "tasks.x", HOUR, args=[1], app=app, last_run_at=last).save()
    scheduler = lead(Plain(app))
    assert scheduler.per_entry is False
    scheduler.tick()
    assert published == [("tasks.x", slot_id("plain", last))]
    stored = stored_entry(app, "redbeat:plain")
    assert stored.last_run_at == last + timedelta(hours=1)  # the slot's due time
    assert stored.total_run_count == 1
    scheduler.tick()
    assert len(published) == 1


@pytest.mark.parametrize("hook", ["maybe_due", "is_due", "reserve"])
def test_each_scheduler_hook_selects_the_per_entry_path(app, hook):
    subclass = type("Hooked", (RedBeatScheduler,),
                    {hook: lambda self, *a, **kw: getattr(super(subclass, self), hook)(*a, **kw)})
    assert subclass(app).per_entry is True
    instance = RedBeatScheduler(app)
    setattr(instance, hook, getattr(instance, hook))  # assigned on the instance
    assert instance.per_entry is True


@pytest.mark.parametrize("hook", ["apply_async", "send_task", "setup_schedule"])
def test_hooks_called_on_both_paths_keep_the_batched_one(app, hook):
    subclass = type("Hooked", (RedBeatScheduler,),
                    {hook: lambda self, *a, **kw: getattr(super(subclass, self), hook)(*a, **kw)})
    assert subclass(app).per_entry is False


# -- scheduler hooks -----------------------------------------------------------------------


def test_maybe_due_override_gets_each_due_entry_and_sends_through_reserve(app, published):
    calls = []

    class Custom(RedBeatScheduler):
        def maybe_due(self, entry, **kwargs):
            calls.append((entry.name, type(entry), sorted(kwargs)))
            return super().maybe_due(entry, **kwargs)

    RedBeatSchedulerEntry("due", "tasks.x", HOUR, app=app, last_run_at=overdue()).save()
    RedBeatSchedulerEntry("later", "tasks.x", HOUR, app=app).save()  # first runs in an hour
    scheduler = lead(Custom(app))
    before = datetime.now(timezone.utc)
    scheduler.tick()
    after = datetime.now(timezone.utc)
    assert calls == [("due", RedBeatSchedulerEntry, ["producer"])]
    assert [task for task, _ in published] == ["tasks.x"]
    assert is_uuid(published[0][1])  # Celery's own id on this path
    stored = stored_entry(app, "redbeat:due")
    assert stored.total_run_count == 1 and before <= stored.last_run_at <= after
    assert score(app, "redbeat:due") == \
        to_score(after_interval(stored.last_run_at, timedelta(hours=1)))
    scheduler.tick()
    assert len(calls) == 1 and len(published) == 1  # rescheduled: not read again


def test_is_due_override_decides_what_runs(app, published):
    asked = []

    class Selective(RedBeatScheduler):
        def is_due(self, entry):
            asked.append(entry.name)
            if entry.name == "refused":
                return schedstate(False, 30.0)
            return super().is_due(entry)

    last = overdue()
    for name in ("refused", "allowed"):
        RedBeatSchedulerEntry(name, f"tasks.{name}", HOUR, app=app, last_run_at=last).save()
    scheduler = lead(Selective(app))
    assert scheduler.tick() == pytest.approx(1.0)  # never more than a poll interval
    assert sorted(asked) == ["allowed", "refused"]
    assert [task for task, _ in published] == ["tasks.allowed"]
    refused = stored_entry(app, "redbeat:refused")
    assert refused.last_run_at == last and refused.total_run_count == 0  # untouched
    assert stored_entry(app, "redbeat:allowed").total_run_count == 1


def test_is_due_assigned_on_an_instance_is_used(app, published):
    RedBeatSchedulerEntry("e", "tasks.x", HOUR, app=app, last_run_at=overdue()).save()
    scheduler = RedBeatScheduler(app)
    asked = []
    scheduler.is_due = lambda entry: asked.append(entry.name) or schedstate(False, 60.0)
    lead(scheduler).tick()
    assert scheduler.per_entry is True
    assert asked == ["e"] and published == []


def test_reserve_override_records_the_run(app, published):
    reserved = []

    class Reserving(RedBeatScheduler):
        def reserve(self, entry):
            following = super().reserve(entry)
            reserved.append((entry.total_run_count, following.total_run_count))
            return following

    RedBeatSchedulerEntry("e", "tasks.x", HOUR, app=app, last_run_at=overdue()).save()
    lead(Reserving(app)).tick()
    assert reserved == [(0, 1)]
    assert len(published) == 1
    meta = stored_meta(app, "redbeat:e")
    assert meta["total_run_count"] == 1 and meta["last_run_at"]["__type__"] == "datetime"


@pytest.mark.parametrize("base", [RedBeatScheduler, PassThroughIsDue], ids=["batched", "per-entry"])
def test_apply_async_override_is_called(app, published, base):
    applied = []

    class Applying(base):
        def apply_async(self, entry, producer=None, advance=True, **kwargs):
            applied.append((entry.name, entry.options.get("task_id"), advance, producer))
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)

    last = overdue()
    RedBeatSchedulerEntry("e", "tasks.x", HOUR, app=app, last_run_at=last).save()
    scheduler = lead(Applying(app))
    scheduler.tick()
    [(name, task_id, advance, producer)] = applied
    assert name == "e" and producer is not None
    stored = stored_entry(app, "redbeat:e")
    assert stored.total_run_count == 1
    if base is RedBeatScheduler:
        assert (task_id, advance) == (slot_id("e", last), False)  # the slot's own id
        assert published == [("tasks.x", task_id)]
        assert stored.last_run_at == last + timedelta(hours=1)
    else:
        assert (task_id, advance) == (None, True)  # Celery reserves, then sends
        assert len(published) == 1 and is_uuid(published[0][1])


@pytest.mark.parametrize("base", [RedBeatScheduler, PassThroughIsDue], ids=["batched", "per-entry"])
def test_send_task_override_replaces_the_publish(app, published, base):
    calls = []

    class Sending(base):
        def send_task(self, *args, **kwargs):
            calls.append((args, kwargs))  # and does not publish

    last = overdue()
    RedBeatSchedulerEntry("e", "tasks.unregistered", HOUR, args=[1, 2], kwargs={"a": 3},
                          app=app, last_run_at=last).save()
    lead(Sending(app)).tick()
    [(args, kwargs)] = calls
    assert args == ("tasks.unregistered", [1, 2], {"a": 3})
    assert kwargs["producer"] is not None and kwargs["headers"] == {"celery_beat_task": True}
    if base is RedBeatScheduler:
        assert kwargs["task_id"] == slot_id("e", last)
    assert published == []
    assert stored_entry(app, "redbeat:e").total_run_count == 1


def test_send_task_patched_on_an_instance(app, published):
    last = overdue()
    RedBeatSchedulerEntry("e", "tasks.x", HOUR, app=app, last_run_at=last).save()
    scheduler = RedBeatScheduler(app)
    calls = []
    scheduler.send_task = lambda *args, **kwargs: calls.append((args, kwargs))
    lead(scheduler).tick()
    assert scheduler.per_entry is False
    assert [(args[0], kwargs["task_id"]) for args, kwargs in calls] == \
        [("tasks.x", slot_id("e", last))]
    assert published == []
    assert get_redis(app).zcard(app.redbeat_conf.keys.pending) == 0  # confirmed


@pytest.mark.parametrize("base", [RedBeatScheduler, PassThroughIsDue], ids=["batched", "per-entry"])
def test_setup_schedule_override_adds_entries_at_start(app, published, base):
    setups = []

    class Installing(base):
        def setup_schedule(self):
            super().setup_schedule()
            setups.append(self)
            self.update_from_dict({"installed": {
                "task": "tasks.installed", "schedule": HOUR, "last_run_at": overdue()}})

    scheduler = Installing(app)
    assert setups == [scheduler]
    assert get_redis(app).exists("redbeat:installed")
    lead(scheduler).tick()
    assert [task for task, _ in published] == ["tasks.installed"]
    assert len(setups) == 1  # called once, at construction


# -- entry hooks ---------------------------------------------------------------------------


class TenantEntry(RedBeatSchedulerEntry):
    """An entry with its own constructor argument, stored in its definition."""

    built: list[tuple[str, str]] = []

    def __init__(self, *args, tenant="default", **kwargs):
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        TenantEntry.built.append((self.name, tenant))

    @property
    def definition(self):
        return {**super().definition, "tenant": self.tenant}


def test_entry_constructor_and_its_extra_argument_survive_from_key(app, published):
    TenantEntry.built.clear()
    entry = TenantEntry("t", "tasks.x", HOUR, app=app, tenant="acme", last_run_at=overdue())
    entry.save()
    loaded = TenantEntry.from_key(entry.key, app=app)
    assert type(loaded) is TenantEntry
    assert loaded.tenant == "acme"
    assert loaded.last_run_at == entry.last_run_at
    assert TenantEntry.built[-1] == ("t", "acme")  # through the constructor

    seen = []

    class Scheduler(RedBeatScheduler):
        Entry = TenantEntry

        def apply_async(self, entry, producer=None, advance=True, **kwargs):
            seen.append((type(entry), entry.tenant))
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)

    scheduler = lead(Scheduler(app))
    assert scheduler.per_entry is True
    scheduler.tick()
    assert seen == [(TenantEntry, "acme")]
    assert len(published) == 1
    after = TenantEntry.from_key(entry.key, app=app)
    assert after.total_run_count == 1 and after.tenant == "acme"


def test_entry_constructor_without_stored_argument_gets_its_default(app):
    TenantEntry.built.clear()
    RedBeatSchedulerEntry("plain", "tasks.x", HOUR, app=app).save()  # no "tenant" stored
    loaded = TenantEntry.from_key("redbeat:plain", app=app)
    assert loaded.tenant == "default" and TenantEntry.built == [("plain", "default")]


def test_entry_constructor_that_does_not_take_a_stored_key_still_loads(app):
    built = []

    class Counted(RedBeatSchedulerEntry):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)  # Celery's constructor refuses ``tenant``
            built.append(self.name)

    TenantEntry("t", "tasks.x", HOUR, app=app, tenant="acme").save()
    loaded = Counted.from_key("redbeat:t", app=app)
    assert type(loaded) is Counted and built == ["t"]
    assert not hasattr(loaded, "tenant")


@pytest.mark.parametrize("how", ["argument", "assignment"])
def test_a_lock_key_given_in_code_is_used_as_given_as_in_242(app, how):
    if how == "argument":
        scheduler = RedBeatScheduler(app, lock_key="shared-lock")
    else:
        scheduler = RedBeatScheduler(app)
        scheduler.lock_key = "shared-lock"
    lead(scheduler)
    assert get_redis(app).get("shared-lock") == scheduler.lock.token
    scheduler.close()


def test_an_entry_hook_that_raises_skips_that_entry_and_beat_goes_on(app, published):
    class Broken(RedBeatSchedulerEntry):
        def is_due(self):
            if self.name == "bad":
                raise ValueError("bug in a subclass")
            return super().is_due()

    class Scheduler(RedBeatScheduler):
        Entry = Broken

    for name in ("bad", "good"):
        Broken(name, f"tasks.{name}", HOUR, app=app, last_run_at=overdue()).save()
    scheduler = lead(Scheduler(app))
    scheduler.tick()
    assert [task for task, _ in published] == ["tasks.good"] and scheduler.leading


def test_entry_is_due_that_refuses_keeps_the_entry_from_running(app, published):
    asked = []

    class Never(RedBeatSchedulerEntry):
        def is_due(self):
            asked.append(self.name)
            return schedstate(False, 30.0)

    class Scheduler(RedBeatScheduler):
        Entry = Never

    last = overdue()
    Never("n", "tasks.x", HOUR, app=app, last_run_at=last).save()
    scheduler = lead(Scheduler(app))
    scheduler.tick()
    scheduler.tick()
    assert asked == ["n", "n"] and published == []
    stored = stored_entry(app, "redbeat:n")
    assert stored.last_run_at == last and stored.total_run_count == 0


class Delayed(RedBeatSchedulerEntry):
    """Runs two minutes after the schedule says (2.4.2 scores an entry by ``due_at``)."""

    @property
    def due_at(self):
        due = super().due_at
        return None if due is None else due + timedelta(minutes=2)


def test_entry_due_at_sets_the_score(app, published):
    created = Delayed("d", "tasks.x", 10.0, app=app)
    created.save()
    assert score(app, created.key) == \
        to_score(after_interval(created.last_run_at, timedelta(seconds=130)))

    before = datetime.now(timezone.utc)
    Delayed("late", "tasks.x", HOUR, app=app, last_run_at=overdue()).save()
    late_score = score(app, "redbeat:late")
    assert late_score >= before.timestamp() + 120  # overdue now, delayed two minutes

    class Scheduler(RedBeatScheduler):
        Entry = Delayed

    lead(Scheduler(app)).tick()
    assert published == []  # not read before its score


def test_entry_due_at_is_used_after_a_run(app, published):
    class Scheduler(RedBeatScheduler):
        Entry = Delayed

    RedBeatSchedulerEntry("e", "tasks.x", HOUR, app=app, last_run_at=overdue()).save()
    lead(Scheduler(app)).tick()
    assert len(published) == 1
    stored = stored_entry(app, "redbeat:e")
    assert score(app, "redbeat:e") == \
        to_score(after_interval(stored.last_run_at, timedelta(hours=1, minutes=2)))


def test_entry_reschedule_override(app, published):
    calls = []

    class SkipOne(RedBeatSchedulerEntry):
        def reschedule(self, last_run_at=None):
            calls.append(last_run_at)
            moment = last_run_at or datetime.now(timezone.utc)
            super().reschedule(moment + timedelta(hours=1))  # skip the next run

    class Scheduler(RedBeatScheduler):
        Entry = SkipOne

    entry = SkipOne("s", "tasks.x", HOUR, app=app, last_run_at=overdue())
    entry.save()
    before = datetime.now(timezone.utc)
    SkipOne.from_key(entry.key, app=app).reschedule()
    assert calls == [None]
    stored = stored_entry(app, entry.key)
    assert stored.last_run_at >= before + timedelta(hours=1)
    assert score(app, entry.key) == to_score(after_interval(stored.last_run_at, timedelta(hours=1)))
    assert stored_meta(app, entry.key)["last_run_at"]["__type__"] == "datetime"
    scheduler = lead(Scheduler(app))
    assert scheduler.per_entry is True
    scheduler.tick()
    assert published == [] and len(calls) == 1  # the tick never reschedules by itself


class TenantKeys(RedBeatSchedulerEntry):
    @staticmethod
    def generate_key(app, name):
        return "tenantA:" + name


def test_entry_generate_key_round_trips_through_save_from_key_and_tick(app, published):
    client = get_redis(app)
    entry = TenantKeys("g", "tasks.x", HOUR, app=app, last_run_at=overdue())
    entry.save()
    assert entry.key == "tenantA:g"
    assert client.exists("tenantA:g") and not client.exists("redbeat:g")
    assert client.zscore(SCHEDULE_KEY, "tenantA:g") is not None
    loaded = TenantKeys.from_key("tenantA:g", app=app)
    assert (type(loaded), loaded.name, loaded.key) == (TenantKeys, "g", "tenantA:g")

    class Scheduler(RedBeatScheduler):
        Entry = TenantKeys

    scheduler = lead(Scheduler(app))
    scheduler.tick()
    assert [task for task, _ in published] == ["tasks.x"]
    assert stored_meta(app, "tenantA:g")["total_run_count"] == 1
    assert not client.exists("redbeat:g")
    scheduler.tick()
    assert len(published) == 1


def test_entry_generate_key_for_statics_and_their_removal(redis_server, published):
    from conftest import make_app

    class Scheduler(RedBeatScheduler):
        Entry = TenantKeys

    schedule = {"s1": {"task": "tasks.s1", "schedule": HOUR},
                "s2": {"task": "tasks.s2", "schedule": HOUR}}
    app = make_app(redis_server.url, beat_schedule=schedule)
    client = get_redis(app)
    first = lead(Scheduler(app))
    assert client.exists("tenantA:s1") and client.exists("tenantA:s2")
    assert not client.exists("redbeat:s1")
    first.close()

    fewer = make_app(redis_server.url, beat_schedule={"s1": schedule["s1"]})
    lead(Scheduler(fewer)).close()
    assert client.exists("tenantA:s1")
    assert not client.exists("tenantA:s2")  # removed where it was written
    assert client.zscore(SCHEDULE_KEY, "tenantA:s2") is None


def test_entry_next_instance_override_is_called_when_bound_as_next(app, published):
    """As in Celery and 2.4.2, ``next(entry)`` calls ``__next__``; a subclass rebinds it
    to its own ``_next_instance``."""
    advanced = []

    class Counting(RedBeatSchedulerEntry):
        def _next_instance(self, last_run_at=None, only_update_last_run_at=False):
            advanced.append(self.name)
            return super()._next_instance(last_run_at, only_update_last_run_at)

        __next__ = next = _next_instance

    class Scheduler(RedBeatScheduler):
        Entry = Counting

    Counting("c", "tasks.x", HOUR, app=app, last_run_at=overdue()).save()
    lead(Scheduler(app)).tick()
    assert advanced == ["c"] and len(published) == 1
    assert stored_meta(app, "redbeat:c")["total_run_count"] == 1


# -- the lease behind scheduler.lock ---------------------------------------------------------


def test_lease_acquire_owned_locked_extend_release(app):
    scheduler = RedBeatScheduler(app)
    lock = scheduler.lock
    client = get_redis(app)
    assert isinstance(lock, Lease) and lock.name == "redbeat::lock"
    assert not lock.locked() and not lock.owned()
    assert lock.acquire(blocking=False) is True
    assert lock.owned() and lock.locked()
    assert client.get(lock.name) == lock.token
    assert 4000 < client.pttl(lock.name) <= 5000  # the default lease: 5 polls of 1 s
    assert lock.extend(2) is True
    assert client.pttl(lock.name) <= 2000
    assert lock.reacquire() is True
    assert client.pttl(lock.name) > 4000
    assert lock.acquire(blocking=False) is True  # held already: kept
    lock.release()
    assert not lock.locked() and client.get(lock.name) is None
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_lease_refuses_another_tokens_lock(app):
    scheduler = RedBeatScheduler(app)
    lock = scheduler.lock
    assert lock.acquire(blocking=False)
    get_redis(app).set(lock.name, "other-host:1:abc", px=5000)  # another node took over
    assert lock.locked() and not lock.owned()
    with pytest.raises(LockNotOwnedError):
        lock.extend()
    with pytest.raises(LockNotOwnedError):
        lock.reacquire()
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert get_redis(app).get(lock.name) == "other-host:1:abc"  # left alone
    assert lock.acquire(blocking=False) is False
    started = time.monotonic()
    assert lock.acquire(blocking_timeout=0.3, sleep=0.05) is False
    assert 0.25 < time.monotonic() - started < 30  # gave up at its timeout, not never


def test_a_second_scheduler_cannot_take_a_held_lease(app, redis_server):
    from conftest import make_app

    first = lead(RedBeatScheduler(app))
    second = RedBeatScheduler(make_app(redis_server.url))
    assert second.lock.token != first.lock.token
    assert second.lock.locked() and not second.lock.owned()
    assert second.lock.acquire(blocking=False) is False
    first.close()  # releases
    assert second.lock.acquire(blocking=False) is True and second.lock.owned()


def test_lock_key_and_timeout_assigned_in_a_subclass_init(app, published):
    class Custom(RedBeatScheduler):
        def __init__(self, app, **kwargs):
            super().__init__(app, **kwargs)
            self.lock_key = "redbeat:custom-lock"  # an assigned key is used as given
            self.lock_timeout = 30

    scheduler = Custom(app)
    token = scheduler.lock.token
    assert scheduler.lock_key == "redbeat:custom-lock"
    assert scheduler.lock_timeout == 30.0
    assert (scheduler.lock.name, scheduler.lock.timeout) == ("redbeat:custom-lock", 30.0)
    assert "`redbeat:custom-lock` 30.00 seconds" in scheduler.info
    RedBeatSchedulerEntry("e", "tasks.x", HOUR, app=app, last_run_at=overdue()).save()
    lead(scheduler).tick()
    client = get_redis(app)
    assert client.get("redbeat:custom-lock") == token  # the token survived the rebuilds
    assert 29000 < client.pttl("redbeat:custom-lock") <= 30000
    assert client.get("redbeat::lock") is None
    assert len(published) == 1
    scheduler.lock_timeout = None  # back to the default
    assert scheduler.lock_timeout == 5.0 and scheduler.lock.token == token
    scheduler.close()
    assert client.get("redbeat:custom-lock") is None


@pytest.mark.parametrize("loop", [
    {}, {"max_interval": 10}, {"max_interval": 300}, {"conf": {"beat_max_loop_interval": 300}},
], ids=["default", "max-interval-10", "max-interval-300", "beat_max_loop_interval-300"])
def test_the_default_lease_is_five_polls_whatever_the_loop_interval(redis_server, loop):
    from conftest import make_app

    app = make_app(redis_server.url, **loop.get("conf", {}))
    scheduler = RedBeatScheduler(app, max_interval=loop.get("max_interval"))
    assert app.redbeat_conf.lock_timeout is None  # not set
    assert scheduler.lock_timeout == 5.0 and scheduler.lock.timeout == 5.0
    assert "`redbeat::lock` 5.00 seconds (5.0s)" in scheduler.info
    lead(scheduler)
    assert 4000 < get_redis(app).pttl("redbeat::lock") <= 5000


@pytest.mark.parametrize("how", ["setting", "argument"])
def test_an_explicit_lock_timeout_is_honoured(redis_server, how):
    from conftest import make_app

    app = make_app(redis_server.url, beat_max_loop_interval=300,
                   **({"redbeat_lock_timeout": 42} if how == "setting" else {}))
    scheduler = RedBeatScheduler(app, **({"lock_timeout": 42} if how == "argument" else {}))
    assert scheduler.lock_timeout == 42.0
    assert "42.00 seconds" in scheduler.info
    lead(scheduler)
    assert 41000 < get_redis(app).pttl("redbeat::lock") <= 42000


def test_lock_key_none_disables_locking(app, published):
    class Unlocked(RedBeatScheduler):
        def __init__(self, app, **kwargs):
            super().__init__(app, **kwargs)
            self.lock_key = None

    scheduler = Unlocked(app)
    assert scheduler.lock is None
    RedBeatSchedulerEntry("e", "tasks.x", HOUR, app=app, last_run_at=overdue()).save()
    scheduler.tick()
    scheduler.tick()
    assert len(published) == 1
    assert get_redis(app).get("redbeat::lock") is None


def test_an_update_from_dict_override_shapes_the_statics(redis_server):
    from conftest import make_app

    class Shaping(RedBeatScheduler):
        def update_from_dict(self, dict_):
            dict_ = {name: spec for name, spec in dict_.items() if name != "dropped"}
            dict_["extra"] = {"task": "tasks.extra", "schedule": 20.0}
            return super().update_from_dict(dict_)

    app = make_app(redis_server.url, beat_schedule={
        "kept": {"task": "tasks.k", "schedule": 30.0},
        "dropped": {"task": "tasks.d", "schedule": 30.0}})
    scheduler = lead(Shaping(app))
    client = get_redis(app)
    assert client.exists("redbeat:kept") and client.exists("redbeat:extra")
    assert not client.exists("redbeat:dropped")
    scheduler.close()


def test_a_redis_py_lock_put_on_the_scheduler_is_carried_on(app, published):
    scheduler = RedBeatScheduler(app)
    lock = get_redis(app).lock(scheduler.lock_key, timeout=30)
    assert lock.acquire(blocking=False)
    scheduler.lock = lock  # as 2.4.2's beat_init handler did
    RedBeatSchedulerEntry("e", "tasks.x", HOUR, app=app, last_run_at=overdue()).save()
    scheduler.tick()
    scheduler.tick()
    assert len(published) == 1 and scheduler.leading
    assert scheduler.lock.owned() and scheduler.lock.name == scheduler.lock_key
    scheduler.close()

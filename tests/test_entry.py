"""RedBeatSchedulerEntry: the 2.4.2 API on fakeredis (no Lua involved)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from celery.schedules import crontab

from redbeat import RedBeatSchedulerEntry
from redbeat.entry import InvalidEntry

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)


def test_save_writes_the_242_layout(fake_app):
    entry = RedBeatSchedulerEntry("job", "tasks.job", 30.0, args=[1, 2], kwargs={"a": 1},
                                  options={"queue": "q"}, app=fake_app).save()
    client = fake_app.redbeat_redis
    stored = client.hgetall("redbeat:job")
    assert json.loads(stored["definition"]) == {
        "name": "job", "task": "tasks.job", "args": [1, 2], "kwargs": {"a": 1},
        "options": {"queue": "q"},
        "schedule": {"__type__": "interval", "every": 30.0, "relative": False}, "enabled": True,
    }
    # a new entry counts as having run when it was created (as in Celery and 2.4.2):
    # a datetime 2.4.2 reads, and the first run one interval later (from its whole second)
    meta = RedBeatSchedulerEntry.decode_meta(stored["meta"])
    assert set(meta) == {"last_run_at"} and meta["last_run_at"] == entry.last_run_at
    assert entry.next_due() == entry.last_run_at.replace(microsecond=0) + timedelta(seconds=30)
    assert json.loads(stored["changed"])["by"] == "python-api"
    assert client.zscore("redbeat::schedule", "redbeat:job") == pytest.approx(entry.score)
    assert entry.key == "redbeat:job" and entry.rank == 0


def test_resave_keeps_meta(fake_app):
    entry = RedBeatSchedulerEntry("job", "tasks.job", 30.0, app=fake_app, last_run_at=NOW)
    entry.save()
    RedBeatSchedulerEntry("job", "tasks.other", 60.0, app=fake_app).save()
    loaded = RedBeatSchedulerEntry.from_key("redbeat:job", app=fake_app)
    assert loaded.task == "tasks.other" and loaded.last_run_at == NOW
    assert loaded.next_due() == NOW + timedelta(seconds=60)


def test_from_key_of_missing_key_raises_key_error(fake_app):
    with pytest.raises(KeyError):
        RedBeatSchedulerEntry.from_key("redbeat:nope", app=fake_app)


def test_delete(fake_app):
    entry = RedBeatSchedulerEntry("job", "tasks.job", 30.0, app=fake_app).save()
    entry.delete()
    assert not fake_app.redbeat_redis.exists("redbeat:job")
    assert fake_app.redbeat_redis.zcard("redbeat::schedule") == 0


def test_reschedule_and_next(fake_app):
    entry = RedBeatSchedulerEntry("job", "tasks.job", 30.0, app=fake_app).save()
    entry.reschedule(last_run_at=NOW)
    assert fake_app.redbeat_redis.zscore("redbeat::schedule", entry.key) == NOW.timestamp() + 30
    following = next(entry)
    assert following.total_run_count == 1
    loaded = RedBeatSchedulerEntry.from_key(entry.key, app=fake_app)
    assert loaded.total_run_count == 1 and loaded.last_run_at == following.last_run_at


def test_due_at_for_crontab_and_is_due(fake_app):
    future = datetime(2100, 11, 23, 12, 0, tzinfo=timezone.utc)  # due_at is never before now
    entry = RedBeatSchedulerEntry("c", "t", crontab(minute=0, hour=3), app=fake_app,
                                  last_run_at=future)
    assert entry.due_at == datetime(2100, 11, 24, 3, tzinfo=timezone.utc)
    overdue = RedBeatSchedulerEntry("i", "t", 10.0, app=fake_app,
                                    last_run_at=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert overdue.is_due()[0] is True
    assert RedBeatSchedulerEntry("d", "t", 10.0, app=fake_app, enabled=False).is_due()[0] is False


def test_prefix_is_used_literally(fake_app):
    fake_app.conf.redbeat_key_prefix = "myapp"
    entry = RedBeatSchedulerEntry("job1", "t", 5.0, app=fake_app).save()
    assert entry.key == "myappjob1"
    assert fake_app.redbeat_redis.zscore("myapp:schedule", "myappjob1") is not None
    assert fake_app.redbeat_conf.lock_key == "myapp:lock"


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        ("{oops", "definition: JSONDecodeError"),
        ('["a"]', "must be a JSON object"),
        ('{"name": "x", "task": "t"}', "missing 'schedule'"),
        ('{"name": "x", "task": "t", "schedule": {"__type__": "lunar"}}', "unknown schedule type"),
        ('{"name": "x", "task": 5, "schedule": {"__type__": "interval", "every": 1}}',
         "'task' must be a string"),
        ('{"name": "y", "task": "t", "schedule": {"__type__": "interval", "every": 1}}',
         "belongs to key"),
        ('{"name": "x", "task": "t", "schedule": {"__type__": "crontab", "minute": "99"}}',
         "definition:"),
        ('{"name": "x", "task": "t", "args": {}, "schedule": {"__type__": "interval", "every": 1}}',
         "'args' must be a list"),
    ],
)
def test_invalid_definitions_say_why(fake_app, definition, reason):
    with pytest.raises(InvalidEntry) as error:
        RedBeatSchedulerEntry.decode(fake_app, "redbeat:x", definition, None)
    assert reason in error.value.reason


def test_settings_accept_both_spellings(fake_app):
    from redbeat.settings import RedBeatConfig

    fake_app.conf.REDBEAT_KEY_PREFIX = "upper:"
    fake_app.conf.redbeat_lock_key = None
    config = RedBeatConfig(fake_app)
    assert config.key_prefix == "upper:" and config.lock_key is None
    assert config.schedule_key == "upper::schedule"


def test_lock_timeout_is_raised_when_too_close_to_the_poll(fake_app, caplog):
    from redbeat.settings import RedBeatConfig

    fake_app.conf.redbeat_lock_timeout = 1
    config = RedBeatConfig(fake_app)
    assert config.lease_timeout() == 4.0
    assert "too close" not in caplog.text  # kept until the scheduler runs (logging set up)
    config.log_notices()
    config.log_notices()
    assert caplog.text.count("too close") == 1


def test_lock_key_outside_prefix_gets_the_prefix(fake_app):
    from redbeat.settings import RedBeatConfig

    fake_app.conf.redbeat_lock_key = "mylock"
    assert RedBeatConfig(fake_app).lock_key == "redbeat:mylock"


def test_meta_fast_paths_agree_with_the_codec():
    """The hot-path meta patterns give the codec's exact text and values."""
    import json as plain_json

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from redbeat import decoder
    from redbeat.entry import as_utc_zone, meta_json, parse_meta

    @settings(max_examples=200, deadline=None)
    @given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9998, 1, 1),
                        timezones=st.just(timezone.utc)), st.integers(0, 10**9))
    def agree(moment, count):
        slow = plain_json.dumps({"last_run_at": decoder.tagged(as_utc_zone(moment)),
                                 "total_run_count": count})
        assert meta_json(moment, count) == slow
        assert meta_json(moment) == plain_json.dumps(  # what a save writes
            {"last_run_at": decoder.tagged(as_utc_zone(moment))})
        assert parse_meta("k", slow) == (moment, count)
        by_codec = decoder.loads(slow)
        assert (by_codec["last_run_at"], by_codec["total_run_count"]) == (moment, count)

    agree()
    dumped = '{"last_run_at": {"__type__": "datetime", "year": 2026, "month": 11, "day": 22, ' \
             '"hour": 11, "minute": 45, "second": 25, "microsecond": 23355, "timezone": "UTC"}}'
    assert parse_meta("k", dumped) == (datetime(2026, 11, 22, 11, 45, 25, 23355,
                                                tzinfo=timezone.utc), 0)


def test_the_changed_field_is_the_json_of_its_object():
    import json as plain_json

    from redbeat.entry import changed_json, node_name

    for by in ("python-api", "cli", 'a "quoted"\\ \u00e9 \u2028 name'):
        text = changed_json(by)
        parsed = plain_json.loads(text)
        assert text == plain_json.dumps(parsed)
        assert (parsed["by"], parsed["node"]) == (by, node_name())
        assert isinstance(parsed["at"], int)

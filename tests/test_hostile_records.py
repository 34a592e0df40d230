"""Single hostile records and edits that must not stop a tick, stop a node or send a slot
twice: an entry edited between a tick's read and its commit, schedule members outside
the prefix or naming an internal key, entry names that would be internal keys, unreadable
pending records, and a hash created between the read and the commit. Real redis-server,
real tick, injected clock."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.manage import import_entries
from redbeat.schedulers import get_redis
from support.held import forge_record, nothing_held
from support.recording import Recording

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc).timestamp()


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=timezone.utc)


def leading(app, now: list[float]) -> Recording:
    scheduler = Recording(app, clock=lambda: now[0])
    assert scheduler.tick() == 0.0  # takes the lock
    return scheduler


def save(app, name, every=10.0, args=None, since=-10.0):
    return RedBeatSchedulerEntry(name, "tasks.x", every, args=args or [], app=app,
                                 last_run_at=at(since)).save()


def test_an_edit_between_read_and_commit_sends_nothing_then_the_slot_once(app):
    now = [T0]
    save(app, "edited", args=["old"])
    scheduler = leading(app, now)
    real_commit = scheduler.store.commit

    def edit_then_commit(ops, lease, node, claimed_at):
        save(app, "edited", args=["new"])  # an editor saves while the tick is planning
        return real_commit(ops, lease, node, claimed_at)

    scheduler.store.commit = edit_then_commit
    scheduler.tick()
    assert scheduler.sent == []  # the claim was not recorded, so it is not published
    scheduler.store.commit = real_commit
    scheduler.tick()
    assert [(m.name, m.options["task_id"], m.args) for m in scheduler.messages] == [
        ("edited", f"edited:{round(T0 * 1000)}", ["new"])]
    stored = RedBeatSchedulerEntry.from_key("redbeat:edited", app=app)
    assert stored.total_run_count == 1


def test_members_outside_the_prefix_or_naming_internal_keys_are_removed_untouched(app):
    now = [T0]
    client = get_redis(app)
    client.hset("otherapp:x", mapping={"definition": "theirs"})
    client.zadd("redbeat::nodes", {"someone": 1})
    client.zadd("redbeat::schedule", {"otherapp:x": 1, "redbeat::nodes": 1, "redbeat::lock": 1})
    save(app, "good")
    scheduler = leading(app, now)
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["good"]
    members = set(client.zrange("redbeat::schedule", 0, -1))
    assert "redbeat:good" in members
    assert not members & {"otherapp:x", "redbeat::nodes", "redbeat::lock"}
    assert client.hgetall("otherapp:x") == {"definition": "theirs"}  # never written
    assert client.type("redbeat::nodes") == "zset"  # never written as an entry
    assert client.type("redbeat::lock") == "string"  # still the lock, not a hash


@pytest.mark.parametrize("name", [":lock", ":nodes", ":pending", ":schedule", ":statics",
                                  ":view:by-last-run:building"])
def test_entry_names_that_are_internal_keys_are_refused(app, name):
    with pytest.raises(ValueError, match="reserved"):
        RedBeatSchedulerEntry(name, "tasks.x", 10.0, app=app).save()
    document = {"format": "redbeat-export/1", "entries": [
        {"name": name, "definition": {"name": name, "task": "tasks.x", "schedule": {
            "__type__": "interval", "every": 10.0, "relative": False}}}]}
    with pytest.raises(ValueError, match="reserved"):
        import_entries(app, document)
    assert get_redis(app).type(f"redbeat:{name}") in ("none", "string", "hash", "zset", "set")
    assert get_redis(app).type("redbeat::lock") in ("none", "string")


@pytest.mark.parametrize("record", [
    json.dumps({"key": "redbeat:p", "definition": None, "due": 1e300}),
    "[" * 100_000 + "]" * 100_000,
    "not json",
    json.dumps({"key": "redbeat:p"}),
    json.dumps([1, 2, 3]),
])
def test_an_unreadable_pending_record_is_dropped_and_the_others_run(app, record):
    now = [T0]
    save(app, "good")
    scheduler = leading(app, now)
    forge_record(get_redis(app), "poison:1", record)
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["good"]
    assert nothing_held(get_redis(app))
    assert scheduler.leading


def test_a_hash_created_between_read_and_commit_is_left_to_the_next_tick(app):
    now = [T0]
    client = get_redis(app)
    client.zadd("redbeat::schedule", {"redbeat:late": 0})  # member first, hash not yet
    scheduler = leading(app, now)
    real_commit = scheduler.store.commit

    def hash_arrives_then_commit(ops, lease, node, claimed_at):
        RedBeatSchedulerEntry("late", "tasks.x", 10.0, app=app, last_run_at=at(-10)).save()
        client.zadd("redbeat::schedule", {"redbeat:late": 0})
        return real_commit(ops, lease, node, claimed_at)

    scheduler.store.commit = hash_arrives_then_commit
    scheduler.tick()
    scheduler.store.commit = real_commit
    assert client.zscore("redbeat::schedule", "redbeat:late") == 0  # not parked
    assert "quarantine" not in client.hgetall("redbeat:late")
    now[0] += 1
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["late"]


def test_a_reserved_name_is_refused_even_with_another_prefix(redis_server):
    app = make_app(redis_server.url, redbeat_key_prefix="tenant1:")
    with pytest.raises(ValueError, match="reserved"):
        RedBeatSchedulerEntry(":pending", "tasks.x", timedelta(seconds=10), app=app).save()


def test_a_static_keeps_its_policy_and_loses_a_removed_one(redis_server):
    spec = {"task": "tasks.s", "schedule": 10.0, "jitter": 2.0, "ttl": 60}
    app = make_app(redis_server.url, beat_schedule={"s1": spec})
    now = [T0]
    leading(app, now).close()
    stored = json.loads(get_redis(app).hget("redbeat:s1", "policy"))
    assert stored == {"jitter": 2.0, "ttl": 60}
    plain = make_app(redis_server.url, beat_schedule={"s1": {"task": "tasks.s",
                                                              "schedule": 10.0}})
    leading(plain, now).close()
    assert get_redis(plain).hget("redbeat:s1", "policy") is None


def test_a_static_whose_next_run_cannot_be_found_is_skipped_and_the_others_synced(
        redis_server):
    from redbeat.schedules import rrule

    never = rrule("DAILY", dtstart=datetime(2026, 1, 1), bymonth=2, bymonthday=30)
    app = make_app(redis_server.url, beat_schedule={
        "never": {"task": "tasks.n", "schedule": never},
        "fine": {"task": "tasks.f", "schedule": 10.0}})
    now = [T0]
    scheduler = leading(app, now)
    client = get_redis(app)
    assert client.exists("redbeat:fine") and not client.exists("redbeat:never")
    assert scheduler.leading
    scheduler.close()


@pytest.mark.parametrize("policy", ['{"ttl": 1e17}', '{"ttl": Infinity}', '{"jitter": 1e12}',
                                    '{"jitter": NaN}', '{"misfire_grace_time": NaN}',
                                    '{"misfire_grace_time": -1}'])
def test_a_policy_beyond_any_meaning_is_quarantined_and_the_others_run(app, policy):
    """A finished entry's ttl of 1e17 s reached commit.lua's EXPIRE, which Redis refused:
    the whole commit failed and beat stood by, sending nothing, on every tick."""
    now = [T0]
    save(app, "good")
    client = get_redis(app)
    ended = '"end_time": {"__type__": "datetime", "year": 2020, "month": 1, "day": 1, ' \
        '"hour": 0, "minute": 0, "second": 0, "microsecond": 0, "timezone": "UTC"}'
    client.hset("redbeat:bad", mapping={
        "definition": json.dumps({"name": "bad", "task": "tasks.x",
                                  "schedule": {"__type__": "interval", "every": 10.0}}),
        "policy": policy[:-1] + ", " + ended + "}"})
    client.zadd("redbeat::schedule", {"redbeat:bad": T0 - 5})
    scheduler = leading(app, now)
    for step in range(3):
        now[0] = T0 + 10 * step
        scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["good"] * 3
    assert "policy" in json.loads(client.hget("redbeat:bad", "quarantine"))["reason"]
    assert client.zscore("redbeat::schedule", "redbeat:bad") == -1


def test_a_policy_in_an_unknown_zone_is_listed_shown_and_quarantined(app):
    from click.testing import CliRunner

    from redbeat.cli import main

    save(app, "good")
    client = get_redis(app)
    client.hset("redbeat:zoned", mapping={
        "definition": json.dumps({"name": "zoned", "task": "tasks.x",
                                  "schedule": {"__type__": "interval", "every": 10.0}}),
        "policy": json.dumps({"start_time": {
            "__type__": "datetime", "year": 2030, "month": 1, "day": 1, "hour": 0,
            "minute": 0, "second": 0, "microsecond": 0, "timezone": "Mars/Olympus"}})})
    client.zadd("redbeat::schedule", {"redbeat:zoned": T0 - 5})
    url = app.conf.redbeat_redis_url
    for args in (["list"], ["show", "zoned"]):
        result = CliRunner().invoke(main, ["--url", url, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "Mars/Olympus" in result.output or args == ["list"]
    scheduler = leading(app, [T0])
    scheduler.tick()
    reason = json.loads(client.hget("redbeat:zoned", "quarantine"))["reason"]
    assert reason.startswith("policy: ZoneInfoNotFoundError") and "Mars/Olympus" in reason
    assert [name for name, _ in scheduler.sent] == ["good"]


@pytest.mark.parametrize("score", ["inf", "1e300"])
def test_a_score_no_date_can_hold_is_shown_as_no_next_run(app, score):
    """Another client's ZADD of inf or 1e300: list, status and the web's table and nodes
    page failed (OverflowError) for the whole schedule; now that entry shows no next run
    and beat sends the others."""
    from click.testing import CliRunner

    from redbeat.cli import main
    from redbeat.web import create_app

    save(app, "good")
    save(app, "far")
    get_redis(app).zadd("redbeat::schedule", {"redbeat:far": score})
    url = app.conf.redbeat_redis_url
    for args in (["list"], ["list", "--sort", "name"], ["status"], ["show", "far"]):
        result = CliRunner().invoke(main, ["--url", url, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    web = create_app(app).test_client()
    for page in ("/entries", "/entries?order=name", "/nodes", "/entry?name=far"):
        assert web.get(page, headers={"Host": "127.0.0.1"}).status_code == 200, page
    scheduler = leading(app, [T0])
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["good"]


def test_a_lock_without_expiry_is_named_as_the_reason_no_beat_leads(app, caplog):
    """Another client's SET of the lock without PX is never released: every beat stands
    by for good. status said 'lock expires in -0.0s', beat 'expires in now', check 'nobody
    holds the lock'; each now says that the lock never expires and must be deleted."""
    import logging

    from click.testing import CliRunner

    from redbeat.cli import main
    from redbeat.health import check

    save(app, "waiting")
    get_redis(app).set("redbeat::lock", "elsewhere:1:0123456789abcdef")
    scheduler = Recording(app, clock=lambda: T0)
    with caplog.at_level(logging.INFO, logger="celery.beat"):
        scheduler.tick()
        scheduler.tick()
    stuck = "no beat can take the lead until the key is deleted"
    assert [record.levelname for record in caplog.records if stuck in record.getMessage()] \
        == ["ERROR"]
    assert scheduler.sent == [] and not scheduler.leading
    result = CliRunner().invoke(main, ["--url", app.conf.redbeat_redis_url, "status"])
    assert f"elsewhere pid 1 (lock never expires: {stuck})" in result.output
    health = check(app, pid=None, now=T0 + 1)
    assert not health.healthy and stuck in health.reason


def test_a_last_run_at_the_edge_of_time_is_shown_as_written(app):
    """A last run at year 1, +14:00, is before the earliest UTC time: list, show and the
    web's pages failed with an OverflowError for the whole schedule."""
    from click.testing import CliRunner

    from redbeat.cli import main
    from redbeat.web import create_app

    save(app, "good")
    client = get_redis(app)
    client.hset("redbeat:old", mapping={
        "definition": json.dumps({"name": "old", "task": "tasks.x",
                                  "schedule": {"__type__": "interval", "every": 10.0}}),
        "meta": json.dumps({"total_run_count": 3, "last_run_at": {
            "__type__": "datetime", "year": 1, "month": 1, "day": 1, "hour": 0, "minute": 0,
            "second": 0, "microsecond": 0, "timezone": 14 * 3600}})})
    client.zadd("redbeat::schedule", {"redbeat:old": T0 - 5})
    url = app.conf.redbeat_redis_url
    for args in (["list"], ["list", "--sort", "last"], ["show", "old"]):
        result = CliRunner().invoke(main, ["--url", url, *args], catch_exceptions=False)
        assert result.exit_code == 0 and "0001-01-01T00:00:00+14:00" in result.output
    web = create_app(app).test_client()
    for page in ("/entries", "/entries?order=last", "/entry?name=old"):
        assert web.get(page, headers={"Host": "127.0.0.1"}).status_code == 200, page
    scheduler = leading(app, [T0])
    scheduler.tick()
    assert [name for name, _ in scheduler.sent] == ["good"]


@pytest.mark.parametrize("failures", [
    '{"count": 1e400, "recent": [{"at_epoch": 1}]}',
    '{"count": 1, "recent": [{"at_epoch": 1e300, "task_id": "x"}]}',
    '{"count": 1, "recent": [{"at": "2026-01-01T00:00:00", "task_id": "naive"}]}',
])
def test_a_failure_record_another_client_wrote_never_fails_a_listing(app, failures):
    """A count of 1e400 or a time past year 9999 (OverflowError) and a naive time
    (compared with the aware last run: TypeError) failed list, status, show and the
    web's table for the whole schedule."""
    from click.testing import CliRunner

    from redbeat.cli import main
    from redbeat.web import create_app

    save(app, "odd")
    client = get_redis(app)
    client.hset("redbeat:odd", "failures", failures)
    client.zadd("redbeat::failing", {"redbeat:odd": T0})
    url = app.conf.redbeat_redis_url
    for args in (["list"], ["list", "--state", "failing"], ["status"], ["show", "odd"]):
        result = CliRunner().invoke(main, ["--url", url, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    web = create_app(app).test_client()
    for page in ("/entries", "/entry?name=odd"):
        assert web.get(page, headers={"Host": "127.0.0.1"}).status_code == 200, page


@pytest.mark.parametrize("count", ["1e400", "-1e400", "-5", '"many"'])
def test_a_failure_is_recorded_over_a_count_another_client_wrote(app, count):
    """failure.lua wrote the count back with cjson, which cannot encode inf: the script
    failed and no failure of that entry was recorded again."""
    from redbeat.failures import read_failures
    from redbeat.runtime import store_for

    save(app, "odd")
    client = get_redis(app)
    client.hset("redbeat:odd", "failures", f'{{"count": {count}, "recent": []}}')
    assert store_for(app).record_failure("redbeat:odd", "odd:1", "TypeError()", "node", at=T0)
    failures = read_failures(client.hgetall("redbeat:odd"))
    assert failures is not None and failures.count == 1


@pytest.mark.parametrize(("suffix", "kind"), [("nodes", "zset"), ("pending", "zset"),
                                              ("statics", "set")])
def test_another_type_at_an_internal_key_is_named_by_beat_the_cli_and_the_web(
        app, caplog, suffix, kind):
    """Another client's SET over one of redbeat's own keys fails every script touching it:
    beat said 'Redis unavailable ... standing by until it returns', which it never did,
    and the CLI and the web only Redis's WRONGTYPE. Each now names the key."""
    import logging

    from click.testing import CliRunner

    from redbeat.cli import main
    from redbeat.web import create_app

    save(app, "e")
    get_redis(app).set(f"redbeat::{suffix}", "garbage")
    said = f"redbeat::{suffix} holds a string, where redbeat keeps a {kind}"
    with caplog.at_level(logging.ERROR, logger="celery.beat"):
        scheduler = Recording(app, clock=lambda: T0)
        scheduler.tick()
        scheduler.tick()
    assert [record.getMessage() for record in caplog.records] == [
        f"beat: {said}; nothing is sent until it is deleted (another client wrote it)"]
    command = ["status"] if suffix != "statics" else ["list"]
    result = CliRunner().invoke(main, ["--url", app.conf.redbeat_redis_url, *command])
    assert (result.exit_code, said in result.output) == (1, True), result.output
    page = "/nodes" if suffix != "statics" else "/entries"
    answer = create_app(app).test_client().get(page, headers={"Host": "127.0.0.1"})
    assert answer.status_code == 503 and said in answer.get_data(as_text=True)


def test_a_member_whose_key_is_not_a_hash_fails_no_listing(app, tmp_path):
    """Another client's string at an entry key, with a member in the schedule: list,
    export and the web's table failed with WRONGTYPE for the whole schedule
    (until a tick dropped the member, only once it was due), and an export held it
    without a definition, which import refuses."""
    from click.testing import CliRunner

    from redbeat.cli import main
    from redbeat.web import create_app

    save(app, "good")
    client = get_redis(app)
    client.set("redbeat:stray", "not a hash")
    client.zadd("redbeat::schedule", {"redbeat:stray": T0 + 86400})
    url = app.conf.redbeat_redis_url
    runner = CliRunner()
    for args in (["list"], ["list", "--sort", "name"], ["list", "--task", "tasks.*"]):
        result = runner.invoke(main, ["--url", url, *args], catch_exceptions=False)
        assert result.exit_code == 0 and "good" in result.output, (args, result.output)
    assert runner.invoke(main, ["--url", url, "show", "stray"]).exit_code == 3
    exported = runner.invoke(main, ["--url", url, "export"], catch_exceptions=False)
    assert [entry["name"] for entry in json.loads(exported.stdout)["entries"]] == ["good"]
    source = tmp_path / "export.json"
    source.write_text(exported.stdout)
    assert runner.invoke(main, ["--url", url, "import", str(source)]).exit_code == 0
    web = create_app(app).test_client()
    for page in ("/entries", "/entries?order=name", "/entries?order=last",
                 "/entries?state=quarantined", "/entries?name=str"):
        assert web.get(page, headers={"Host": "127.0.0.1"}).status_code == 200, page

"""Both-way compatibility with the data celery-redbeat 2.4.2 wrote (tests/fixtures)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from redbeat import RedBeatSchedulerEntry
from redbeat.schedulers import get_redis
from support.dump import dump_hashes, load_dump, read_dump
from support.recording import Recording

DUMP = read_dump()
HASHES = dump_hashes(DUMP)
SCORES = dict(DUMP["keys"]["redbeat::schedule"]["value"])
#: The dump was taken right after a scheduler started; scores of entries already
#: overdue then are "now" (2.4.2 stores overdue as now), not their next run.
GENERATED_AT = datetime(2026, 11, 22, 11, 45, 25, tzinfo=timezone.utc).timestamp()


@pytest.fixture
def dumped(app):
    load_dump(get_redis(app))
    return app


@pytest.mark.parametrize("key", sorted(HASHES))
def test_every_entry_loads(dumped, key):
    entry = RedBeatSchedulerEntry.from_key(key, app=dumped)
    definition = json.loads(HASHES[key]["definition"])
    assert entry.name == definition["name"] and entry.task == definition["task"]
    assert entry.enabled == definition["enabled"]
    assert entry.args == definition["args"] and entry.kwargs == definition["kwargs"]
    assert entry.options == definition["options"]


@pytest.mark.parametrize("key", sorted(HASHES))
def test_next_run_matches_score(dumped, key):
    entry = RedBeatSchedulerEntry.from_key(key, app=dumped)
    score = SCORES[key]
    # the real next run (``due_at`` says "now" for an overdue entry, as in 2.4.2)
    due = entry.next_run_after(entry.last_run_at)
    if score == -1:
        assert due is None  # rrule with count exhausted
        return
    assert due is not None
    if due.timestamp() >= GENERATED_AT + 1:
        # 2.4.2 truncates to whole seconds and computes crontabs from a "now" a little
        # after last_run_at, which can land a second early
        assert abs(due.timestamp() - score) <= 1.0, (due, score)
    else:
        assert score >= GENERATED_AT - 1  # stale: 2.4.2 stored "overdue" as "now"


@pytest.mark.parametrize("key", sorted(HASHES))
def test_reencoding_is_identical(dumped, key):
    entry = RedBeatSchedulerEntry.from_key(key, app=dumped)
    assert json.loads(entry.definition_json()) == json.loads(HASHES[key]["definition"])


def test_saved_entries_have_the_same_fields_and_shapes(dumped):
    client = dumped.redbeat_redis
    for key, fields in HASHES.items():
        entry = RedBeatSchedulerEntry.from_key(key, app=dumped)
        clone = entry.copy(name="copy-" + entry.name)
        clone.last_run_at = entry.last_run_at
        clone.save()
        saved = client.hgetall(clone.key)
        assert set(fields) <= set(saved)
        assert set(saved) - set(fields) <= {"changed", "created"}  # audit fields 2.4.2 never reads
        ours = json.loads(saved["definition"])
        theirs = json.loads(fields["definition"])
        assert list(ours) == list(theirs)
        assert {k: v for k, v in ours.items() if k != "name"} == \
            {k: v for k, v in theirs.items() if k != "name"}
        meta = json.loads(saved["meta"])
        assert list(meta) == ["last_run_at"]
        assert meta["last_run_at"] is None or set(meta["last_run_at"]) == set(
            json.loads(fields["meta"])["last_run_at"])


def test_a_dumped_schedule_runs(dumped):
    """Take over the 2.4.2 Redis (its lock expired) and run the due entries."""
    client = dumped.redbeat_redis
    client.delete("redbeat::lock")
    now = GENERATED_AT + 400  # past every interval entry's stored score
    scheduler = Recording(dumped, clock=lambda: now)
    assert scheduler.tick() == 0.0  # took the lock, synced statics
    scheduler.tick()
    names = {name for name, _ in scheduler.sent}
    # overdue in the dump: the meta-* entries (last run in January) and 'counted'
    assert {"meta-naive", "meta-offset", "meta-utc", "meta-zone", "counted",
            "interval-30s"} <= names
    assert "interval-relative" not in names  # disabled
    assert "rrule-count" not in names  # finished
    # disabled: scored at its next time, as 2.4.2 keeps a disabled entry's due score
    assert client.zscore("redbeat::schedule", "redbeat:interval-relative") > now
    scheduler.close()

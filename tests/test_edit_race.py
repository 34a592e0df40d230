"""An entry re-saved every few milliseconds while two real ``celery beat`` nodes run it.

The editor saves ``RedBeatSchedulerEntry(...)`` with new args and the same 1-second
schedule in a tight loop, so saves land between a tick's read and its commit. A claim
whose commit was skipped (the entry changed since the read) must not be published
(commit eb8a437) and must be read again at once (the in-process test, on the scheduler's
clock), and a re-save keeps the entry's run history, so it must neither starve the
entry, nor move its slots, nor cost it one. Sends are counted from the Redis broker's
queue; the editor runs for a number of the leader's sends, not of seconds, and the
entry runs every missed slot (no coalescing), so a beat a loaded machine holds back
sends its slots late instead of failing the test.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.entry_fields import meta_json
from redbeat.policy import EntryPolicy
from redbeat.schedulers import get_redis
from support.broker_audit import (
    broker_messages,
    ids_per_due_time,
    lateness,
    logged_sends,
    repeated_ids,
    slots_by_entry,
)
from support.processes import LIVENESS, CeleryProcess, Cluster
from support.recording import T0, Clock, at
from support.recording import leader as leading_scheduler
from support.redis_server import RedisServer
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

#: slots of "edited" the leader sends while the editor runs (thousands of saves)
EDITED_SLOTS = 8
EVERY = {"edited": 1.0, "steady-3s": 3.0, "steady-5s": 5.0, "steady-7s": 7.0}
#: every missed slot is sent, so a slot late on a loaded machine is late, not coalesced
EACH_SLOT = EntryPolicy(coalesce=False, max_catch_up=100)
SENT_EDITED = "Sending due task edited"


def edit_in_a_loop(app, leader: CeleryProcess, slots: int) -> tuple[int, float, float]:
    """Re-save "edited" with new args every ~2 ms until the leader has logged ``slots``
    more sends of it; returns saves, start and end."""
    target = leader.log().count(SENT_EDITED) + slots
    saves, began = 0, time.time()
    while saves % 50 or leader.log().count(SENT_EDITED) < target:
        assert time.time() - began < LIVENESS, f"{slots} sends of edited not seen"
        saves += 1
        RedBeatSchedulerEntry(
            "edited",
            "beatapp.record",
            EVERY["edited"],
            args=[f"v{saves}"],
            app=app,
            policy=EACH_SLOT,
        ).save()
        time.sleep(0.002)
    return saves, began, time.time()


def version(argsrepr: str) -> int:
    return int(argsrepr.strip("[]'\"").lstrip("v"))


def test_a_tight_edit_loop_sends_each_slot_once_and_keeps_the_cadence(tmp_path, redis_server):
    app = make_app(redis_server.url)
    now = datetime.now(timezone.utc)
    for name, every in EVERY.items():
        # the others half a second out of phase and seldom due: a claim of "edited" whose
        # commit was skipped must be read again at once, not when another entry wakes the
        # leader, nor a second later, when the next slot is due too
        phase = timedelta(0) if name == "edited" else timedelta(seconds=0.5)
        RedBeatSchedulerEntry(
            name,
            "beatapp.record",
            every,
            args=["v0"],
            app=app,
            last_run_at=now - phase,
            policy=EACH_SLOT,
        ).save()
    with RedisServer() as broker:
        cluster = Cluster(tmp_path, redis_server.url, broker.url, redbeat_lock_timeout=3)
        nodes = [cluster.beat("beat0"), cluster.beat("beat1")]
        try:
            wait_until(lambda: sum("Leading as" in n.log() for n in nodes) == 1, 120, "a leader")
            leader = next(n for n in nodes if "Leading as" in n.log())
            leader.wait_for(SENT_EDITED, count=2)
            saves, began, ended = edit_in_a_loop(make_app(redis_server.url), leader, EDITED_SLOTS)
            leader.wait_for(SENT_EDITED, count=leader.log().count(SENT_EDITED) + 2)
        finally:
            cluster.stop()
        exits = [n.process.returncode for n in nodes]
        messages = broker_messages(broker.url)
    logs = "".join(n.log() for n in nodes)
    client = get_redis(app)
    pending = client.zrange("redbeat::pending", 0, -1)  # claimed, publish cut short by SIGTERM
    slots = slots_by_entry(messages)
    edited = [m for m in messages if m.name == "edited"]
    in_window = [d for d in slots["edited"] if began * 1000 <= d <= ended * 1000]
    # the slots of "edited" due while editing: its grid (the first slot sent, before the
    # edits, plus whole seconds) within the window
    grid = [
        d for d in range(slots["edited"][0], round(ended * 1000) + 1, 1000) if d >= began * 1000
    ]
    late = {tid: s for tid, s in lateness(logged_sends(logs)).items() if tid.startswith("edited:")}
    late_window = [s for tid, s in late.items() if began <= int(tid.split(":")[1]) / 1000 <= ended]
    counts = {
        name: RedBeatSchedulerEntry.from_key(f"redbeat:{name}", app=app).total_run_count
        for name in EVERY
    }
    print(
        f"\nedit race: {saves} saves in {ended - began:.1f}s "
        f"({(ended - began) / saves * 1000:.1f} ms apart); {len(messages)} messages; "
        f"slots per entry { ({n: len(s) for n, s in slots.items()}) }; run counts {counts}; "
        f"edited slots due while editing {len(in_window)} of {len(grid)}; "
        f"edited send lateness median {statistics.median(late_window) * 1000:.0f} ms, "
        f"max {max(late_window) * 1000:.0f} ms, "
        f"{sum(s > 0.25 for s in late_window)} sent >250 ms late; "
        f"pending at the end {sorted(pending)}; exit codes {exits}"
    )

    assert repeated_ids(messages) == {}
    assert all(len(ids) == 1 for ids in ids_per_due_time(messages).values())
    for name, due in slots.items():
        step = round(EVERY[name] * 1000)
        assert all((b - a) % step == 0 for a, b in zip(due, due[1:], strict=False)), name
        # every claim counted is a slot sent, or one still pending (re-sent by the next
        # leader under the same id); a skipped claim counts as neither
        held = {int(t.rsplit(":", 1)[1]) for t in pending if t.rsplit(":", 1)[0] == name}
        assert counts[name] == len(set(due) | held), (name, counts, len(due), held)
    # the edits neither starve the entry, nor move it off its grid, nor cost it a slot:
    # every slot due while editing was sent
    assert sorted(set(grid) - set(in_window)) == [], (grid, in_window)
    # each slot is sent with the definition its claim was fenced with: never an older
    # version after a newer one, and the final version once the edits stopped
    versions = [version(m.argsrepr) for m in sorted(edited, key=lambda m: m.due_ms or 0)]
    assert versions == sorted(versions), versions
    assert versions[-1] == saves
    assert "Traceback" not in logs
    assert exits == [0, 0]


def test_a_tick_that_left_an_edited_claim_ticks_again_at_once(app):
    """The tick whose commit left "edited" alone (saved between the read and the commit)
    asks to run again at once: sleeping until the next due entry would let the edited
    entry's next slot come due too, and the two be coalesced into one run."""
    clock = Clock()
    RedBeatSchedulerEntry("edited", "tasks.x", 1.0, args=["v0"], app=app, last_run_at=at(-1)).save()
    RedBeatSchedulerEntry("steady", "tasks.x", 7.5, app=app, last_run_at=at(-7)).save()
    scheduler = leading_scheduler(app, clock)
    real_commit = scheduler.store.commit

    def edit_then_commit(*args: Any) -> Any:
        RedBeatSchedulerEntry("edited", "tasks.x", 1.0, args=["v1"], app=app).save()
        return real_commit(*args)

    scheduler.store.commit = edit_then_commit
    assert scheduler.tick() == 0.0  # at once, not at 0.5 s (steady) nor 1 s (next slot)
    assert scheduler.sent == []
    scheduler.store.commit = real_commit
    scheduler.tick()
    assert [(m.name, m.options["task_id"], m.args) for m in scheduler.messages] == [
        ("edited", f"edited:{round(T0 * 1000)}", ["v1"])
    ]
    scheduler.close()


def test_a_resave_keeps_the_next_run_of_the_stored_history(app):
    """Re-saving a stored entry built afresh (its in-memory last run is now) scores it by
    the stored last run, not one interval from now."""
    last = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=30)
    RedBeatSchedulerEntry("kept", "tasks.x", 60.0, app=app, last_run_at=last).save()
    score = get_redis(app).zscore("redbeat::schedule", "redbeat:kept")
    assert score == (last + timedelta(seconds=60)).timestamp()
    RedBeatSchedulerEntry("kept", "tasks.x", 60.0, args=[1], app=app).save()  # last run: now
    assert get_redis(app).zscore("redbeat::schedule", "redbeat:kept") == score
    RedBeatSchedulerEntry("kept", "tasks.x", 10.0, args=[2], app=app).save()  # faster now
    assert get_redis(app).zscore("redbeat::schedule", "redbeat:kept") == score - 50


@pytest.mark.parametrize("changed", ["definition", "meta", "meta deleted"])
def test_a_commit_leaves_alone_an_entry_whose_definition_or_meta_alone_changed(app, changed):
    """The fingerprint is the definition's sha1 then the meta's: a change to either one
    since the read (another node's meta, a raw write of the definition as code written
    for 2.4.2 does) leaves the entry to the next tick, which sends its slot once."""
    clock = Clock()
    entry = RedBeatSchedulerEntry("job", "tasks.x", 1.0, app=app, last_run_at=at(-1)).save()
    scheduler = leading_scheduler(app, clock)
    client = get_redis(app)
    real_commit = scheduler.store.commit

    def change_then_commit(*args: Any) -> Any:
        if changed == "definition":
            text = client.hget(entry.key, "definition")
            client.hset(entry.key, "definition", text.replace('"args": null', '"args": [7]'))
        elif changed == "meta":  # the same last run, another count
            client.hset(entry.key, "meta", meta_json(at(-1), 5))
        else:
            client.hdel(entry.key, "meta")
        return real_commit(*args)

    scheduler.store.commit = change_then_commit
    assert scheduler.tick() == 0.0 and scheduler.sent == []
    scheduler.store.commit = real_commit
    scheduler.tick()
    assert [(m.options["task_id"], m.args) for m in scheduler.messages] == [
        (f"job:{round(T0 * 1000)}", [7] if changed == "definition" else None)
    ]
    scheduler.close()

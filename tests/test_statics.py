"""statics.sync on a real Redis: what it writes when the stored statics change under it."""

from __future__ import annotations

import logging
from typing import Any

from redbeat import RedBeatSchedulerEntry, statics
from redbeat.entry import meta_json
from redbeat.runtime import store_for
from redbeat.store import ScheduleStore, StaticsSync
from support.recording import at

#: Calls after which a sync that has not stopped is taken to loop forever (the test
#: fails instead of hanging).
RUNAWAY = 20


class RacedStore(ScheduleStore):
    """The app's store, with a writer that records a new run of ``key`` just before each
    sync_statics.lua call: the stored run history the sync worked a score out from is
    never the one stored when the script checks it (a tick of another node running the
    static between every two calls, for as long as ``racing``)."""

    def __init__(self, store: ScheduleStore, key: str) -> None:
        super().__init__(store.client, store.keys, store.retry)
        self.key = key
        self.racing = True
        self.calls = 0

    def sync_statics(self, *args: Any, **kwargs: Any) -> StaticsSync:
        self.calls += 1
        if self.calls > RUNAWAY:
            raise AssertionError(f"statics.sync still calling after {RUNAWAY} calls")
        if self.racing:
            self.client.hset(self.key, "meta", meta_json(at(self.calls), self.calls))
        return super().sync_statics(*args, **kwargs)


def test_a_writer_changing_a_static_under_every_call_cannot_keep_the_sync_going(app, caplog):
    """The static was edited in beat_schedule since it last ran, so its score follows
    from its run history, which the writer changes before each call: the sync gives up
    after SYNC_CALLS calls, says so once, leaves the static as stored, and the next sync
    (the writer gone) writes it."""
    RedBeatSchedulerEntry("s1", "tasks.old", 60.0, app=app, last_run_at=at(-60)).save()
    configured = RedBeatSchedulerEntry("s1", "tasks.new", 60.0, app=app)
    prepared = statics.Prepared({"s1": {"task": "tasks.new", "schedule": 60.0}}, {"s1": configured})
    store = RacedStore(store_for(app), configured.key)

    def key_of(name: str) -> str:
        return RedBeatSchedulerEntry.generate_key(app, name)

    with caplog.at_level(logging.INFO, logger="celery.beat"):
        statics.sync(store, prepared, key_of, None, at(0), fresh=False)
    assert store.calls == statics.SYNC_CALLS
    warnings = [
        record.getMessage() for record in caplog.records if record.levelno == logging.WARNING
    ]
    assert len(warnings) == 1 and "'s1'" in warnings[0]
    assert RedBeatSchedulerEntry.from_key(configured.key, app=app).task == "tasks.old"

    store.racing, store.calls = False, 0
    statics.sync(store, prepared, key_of, None, at(0), fresh=False)
    assert store.calls == 2  # asked about s1, then wrote it from its stored history
    stored = RedBeatSchedulerEntry.from_key(configured.key, app=app)
    assert stored.task == "tasks.new" and stored.total_run_count == statics.SYNC_CALLS

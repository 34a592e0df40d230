"""Only ``redbeat.store`` sends Redis commands (docs/design.md). conftest.py fails any
test during which another redbeat module sent one (support/senders.py); these tests
show the recorder sees a sender where it is, and drive every public path of the
package in one place against a real redis-server so the claim is checked even when
this file runs alone."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.cli import main
from redbeat.health import check
from redbeat.manage import due_entries, export_entries, import_entries, list_entries, status
from support import senders
from support.recording import Recording


def test_a_command_sent_from_another_redbeat_module_is_recorded(redis_server):
    client = redis_server.client()
    outside = {"__name__": "redbeat.manage", "client": client}
    exec(compile("def probe():\n    return client.ping()\n", "manage.py", "exec"), outside)
    client.ping()  # connected by the test: the handshake is not the probe's
    outside["probe"]()
    found = senders.take()
    assert [(v.module, v.function, v.command) for v in found] == [
        ("redbeat.manage", "probe", "PING")]


def test_a_command_sent_by_the_store_or_a_test_is_not(redis_server):
    client = redis_server.client()
    inside = {"__name__": "redbeat.store", "client": client}
    exec(compile("def probe():\n    return client.ping()\n", "store.py", "exec"), inside)
    senders.take()
    inside["probe"]()
    client.set("from-a-test", "1")
    assert senders.take() == []


class Refusing(Recording):
    def apply_async(self, entry, producer=None, advance=True, **kwargs):
        if entry.name == "refused":
            raise TypeError("not serialisable")  # recorded on the entry as a failure
        super().apply_async(entry, producer, advance, **kwargs)


class PerEntry(Refusing):
    """Overrides a 2.4.2 hook, so its ticks take the per-entry path."""

    def is_due(self, entry):
        return super().is_due(entry)


@pytest.mark.parametrize("scheduler", [Refusing, PerEntry])
def test_every_public_path_sends_through_the_store(redis_server, scheduler):
    app = make_app(redis_server.url, redbeat_lock_timeout=5,
                   beat_schedule={"static": {"task": "tasks.s", "schedule": 60.0}})
    past = datetime.now(timezone.utc) - timedelta(seconds=90)
    entry = RedBeatSchedulerEntry("due", "tasks.x", 60.0, app=app, last_run_at=past)
    entry.save()
    RedBeatSchedulerEntry("refused", "tasks.x", 60.0, app=app, last_run_at=past).save()
    beat = scheduler(app=app, lazy=False)
    try:
        beat.tick()
        beat.tick()
        assert "due" in {name for name, _ in beat.sent}  # published, so every stage of a tick ran
        lease = beat.lock
        assert lease is not None and lease.owned() and lease.locked()
        lease.extend()
    finally:
        beat.close()
    loaded = RedBeatSchedulerEntry.from_key(entry.key, app=app)
    loaded.update(RedBeatSchedulerEntry("due", "tasks.y", 30.0, app=app))
    loaded.reschedule()
    assert [info.name for info in list_entries(app)]
    due_entries(app, now=time.time())
    status(app)
    check(app)
    document = export_entries(app)
    import_entries(app, json.loads(json.dumps(document, default=str)))
    runner = CliRunner()
    url = ["--url", redis_server.url]
    for args in (["add", "cli", "tasks.z", "--every", "1m"], ["list"], ["status"],
                 ["show", "due"], ["disable", "due"], ["enable", "due"], ["run-now", "due"],
                 ["export"], ["check"], ["delete", "due"]):
        result = runner.invoke(main, [*url, *args])
        assert result.exit_code in (0, 1), (args, result.output)
    loaded.delete()

"""Labels and the audit trail: the pure rules as tables (redbeat.labels, redbeat.audit),
then what a real Redis holds after Python, raw writes, statics and an import, and
changes by label (redbeat.groups)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
from celery import Celery

from conftest import make_app
from redbeat import RedBeatSchedulerEntry, groups, manage
from redbeat import labels as label_rules
from redbeat.audit import Change, read
from redbeat.schedulers import RedBeatScheduler


@pytest.mark.parametrize("given, stored", [
    (None, ()),
    ("tenant:42", ("tenant:42",)),  # one label, not its characters
    ([" b ", "a", "b"], ("a", "b")),
    ((), ()),
])
def test_labels_normalized(given, stored):
    assert label_rules.normalized(given) == stored


@pytest.mark.parametrize("given", [[""], ["  "], [3], ["a\nb"], ["x" * 101],
                                   [str(n) for n in range(33)]])
def test_labels_refused(given):
    with pytest.raises(ValueError):
        label_rules.normalized(given)


@pytest.mark.parametrize("text, labels, problem", [
    (None, (), None),
    ('["b", "a"]', ("a", "b"), None),
    ("not json", (), "labels field is not JSON"),
    ('{"a": 1}', (), "labels field must be a JSON array of strings"),
    ("[1]", (), "label 1 is not a string"),
])
def test_labels_field_read_leniently_with_the_reason(text, labels, problem):
    assert label_rules.from_field(text) == labels
    if problem is None:
        assert label_rules.parse_field(text) == labels
    else:
        with pytest.raises(ValueError, match=f"^{re.escape(problem)}"):
            label_rules.parse_field(text)


MS = 1_800_000_000_000
AT = datetime.fromtimestamp(MS / 1000, timezone.utc)


@pytest.mark.parametrize("text, change", [
    (None, None),
    ("garbage", None),
    (json.dumps({"at": MS, "by": "cli", "actor": "ana", "node": "h:1"}),
     Change(AT, "cli", "ana", "h:1")),
    # an earlier release's record: no actor, at in ISO 8601
    (json.dumps({"at": "2027-01-15T10:00:00", "by": "python-api", "node": "h:2"}),
     Change(datetime(2027, 1, 15, 10, tzinfo=timezone.utc), "python-api", None, "h:2")),
    (json.dumps({"at": True, "by": "web"}), Change(None, "web", None, None)),
])
def test_audit_records_read(text, change):
    assert read(text) == change


def test_audit_channel_words():
    assert Change(None, "static-sync", "beat", None).through == "statics"
    assert Change(None, "python-api", None, None).through == "python"


# -- on a real Redis ---------------------------------------------------------------------


def saved(app: Celery, name: str, **fields) -> RedBeatSchedulerEntry:
    return RedBeatSchedulerEntry(name, "tasks.x", 60.0, app=app, **fields).save()


def test_labels_saved_kept_and_read(app, redis_server):
    client = redis_server.client()
    saved(app, "a", labels=["tenant:1", "billing"])
    assert json.loads(client.hget("redbeat:a", "labels")) == ["billing", "tenant:1"]
    # an application that re-saves its entry without naming labels keeps them
    saved(app, "a")
    assert RedBeatSchedulerEntry.from_key("redbeat:a", app=app).labels == ("billing",
                                                                          "tenant:1")
    saved(app, "a", labels=[])  # named, and none: removed
    assert client.hget("redbeat:a", "labels") is None
    # another program's raw write counts at once
    client.hset("redbeat:a", "labels", json.dumps(["raw"]))
    assert [info.name for info in groups.labelled(app, "raw")] == ["a"]
    assert manage.get_entry(app, "a").labels == ("raw",)


def test_created_once_changed_every_time_with_who(app, redis_server):
    saved(app, "a").save(changed_by="cli", actor="ana")
    info = manage.get_entry(app, "a")
    assert info.created.by == "python-api" and info.created.actor  # the OS user
    assert info.changed.by == "cli" and info.changed.actor == "ana"
    assert info.created.at <= info.changed.at
    manage.set_enabled(app, "a", False, changed_by="web", actor="bob")
    again = manage.get_entry(app, "a")
    assert again.created == info.created and again.changed.actor == "bob"


def test_an_entry_of_an_earlier_release_gets_no_false_created(app, redis_server):
    saved(app, "old")
    redis_server.client().hdel("redbeat:old", "created")
    saved(app, "old")
    assert manage.get_entry(app, "old").created is None


def test_statics_carry_labels_and_say_beat_created_them(redis_server):
    app = make_app(redis_server.url, beat_schedule={
        "nightly": {"task": "tasks.x", "schedule": 3600.0, "labels": ["ops"]}})
    scheduler = RedBeatScheduler(app=app, lazy=True)
    scheduler.setup_schedule()
    scheduler.tick()
    info = manage.get_entry(app, "nightly")
    assert info.labels == ("ops",)
    assert (info.created.by, info.created.actor) == ("static-sync", "beat")
    scheduler.close()


def test_export_and_import_carry_labels_and_created(app, redis_server):
    saved(app, "a", labels=["x"])
    document = manage.export_entries(app)
    created = manage.get_entry(app, "a").created
    other = make_app(redis_server.url, redbeat_key_prefix="other:")
    manage.import_entries(other, document)
    info = manage.get_entry(other, "a")
    assert info.labels == ("x",) and info.created == created
    assert info.changed.by == "import"


def test_changes_by_label(app, redis_server):
    for n in range(5):
        saved(app, f"t1-{n}", labels=["tenant:1"])
    saved(app, "t2", labels=["tenant:2"])
    saved(app, "both", labels=["tenant:1", "tenant:2"])
    assert {i.name for i in groups.labelled(app, ["tenant:1", "tenant:2"])} == {"both"}
    off = groups.set_enabled(app, "tenant:1", False, changed_by="cli", actor="ana")
    assert sorted(off.changed) == ["both", *(f"t1-{n}" for n in range(5))]
    assert not manage.get_entry(app, "t1-0").entry.enabled
    assert manage.get_entry(app, "t1-0").changed.actor == "ana"
    assert manage.get_entry(app, "t2").entry.enabled
    assert groups.set_enabled(app, "tenant:1", False).changed == []  # already so
    queued = groups.run_all_now(app, "tenant:2")
    assert sorted(queued.changed) == ["both", "t2"]
    assert len(redis_server.client().zrange("redbeat::pending", 0, -1)) == 2
    gone = groups.delete(app, "tenant:1")
    assert len(gone.changed) == 6
    assert [info.name for info in manage.iter_entries(app)] == ["t2"]
    with pytest.raises(ValueError, match="at least one label"):
        groups.labelled(app, [])


def test_singleton_upsert_keeps_one_entry_per_label_and_task(app, redis_server):
    saved(app, "report-old", labels=["tenant:7"])
    RedBeatSchedulerEntry("other-task", "tasks.y", 60.0, app=app, labels=["tenant:7"]).save()
    saved(app, "report-tenant-8", labels=["tenant:8"])
    new = RedBeatSchedulerEntry("report-new", "tasks.x", 30.0, app=app)
    assert groups.save_singleton(new, "tenant:7") == ["report-old"]
    names = {info.name for info in manage.iter_entries(app)}
    assert names == {"report-new", "other-task", "report-tenant-8"}
    assert manage.get_entry(app, "report-new").labels == ("tenant:7",)
    assert groups.save_singleton(new, "tenant:7") == []  # idempotent


# -- the CLI -----------------------------------------------------------------------------


def cli(redis_server, *args: str):
    from click.testing import CliRunner

    from redbeat.cli import main
    return CliRunner().invoke(main, ["--url", redis_server.url, *args])


def test_cli_labels_from_add_to_bulk_changes(app, redis_server):
    for name in ("a", "b"):
        done = cli(redis_server, "--actor", "ana", "add", name, "tasks.x", "--every", "1m",
                   "--label", "tenant:1", "--label", "reports")
        assert done.exit_code == 0, done.output
    cli(redis_server, "add", "c", "tasks.x", "--every", "1m", "--label", "tenant:2")
    listed = cli(redis_server, "list", "--label", "tenant:1", "--json")
    assert [json.loads(line)["name"] for line in listed.output.splitlines()] == ["a", "b"]
    assert json.loads(listed.output.splitlines()[0])["labels"] == ["reports", "tenant:1"]
    shown = cli(redis_server, "show", "a")
    assert "labels:      reports, tenant:1" in shown.output
    assert "by ana through cli" in shown.output
    off = cli(redis_server, "disable", "--label", "tenant:1")
    assert off.exit_code == 0 and off.output.startswith("disable: 2 entries labelled tenant:1")
    assert not manage.get_entry(app, "b").entry.enabled
    assert manage.get_entry(app, "c").entry.enabled
    assert cli(redis_server, "disable", "a", "--label", "x").exit_code == 2  # one or other
    relabel = cli(redis_server, "edit", "c", "--label", "tenant:1")
    assert relabel.exit_code == 0, relabel.output
    assert manage.get_entry(app, "c").labels == ("tenant:1",)
    assert cli(redis_server, "edit", "c", "--no-labels").exit_code == 0
    assert manage.get_entry(app, "c").labels == ()
    gone = cli(redis_server, "delete", "--label", "tenant:1")
    assert gone.exit_code == 0 and "2 entries" in gone.output
    assert [info.name for info in manage.iter_entries(app)] == ["c"]

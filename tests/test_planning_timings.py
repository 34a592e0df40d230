"""A batch's shared timings (planning.Timings): entries planned together decide what
each would decide planned alone, whatever they share (schedule object, policy, last
run, stored score) and whatever tells them apart (a jitter, which depends on the name;
another last run or zone; a never-run entry's own score; the tick's default grace)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab

from redbeat import RedBeatSchedulerEntry
from redbeat.batch import Row
from redbeat.entry_fields import meta_json
from redbeat.planning import TickSettings, due_ms, plan_batch, slot_stamps

UTC = timezone.utc
NOW = datetime(2027, 6, 1, 12, 0, 0, 4000, tzinfo=UTC)
APP = Celery("timings-tests", set_as_current=False)
APP.conf.update(timezone="UTC", redbeat_redis_url="redis://unused:1/0")


def row(
    name: str, schedule: object, last: datetime | None, score: float | None = None, **policy: object
) -> Row:
    entry = RedBeatSchedulerEntry(name, "tasks.x", schedule, app=APP, last_run_at=last, **policy)
    return Row(
        entry.key,
        NOW.timestamp() if score is None else score,
        entry.definition_json(),
        None if last is None else meta_json(last),
        entry.policy.to_json(),
    )


def decided(rows: list[Row], settings: TickSettings) -> list[tuple[object, ...]]:
    plan = plan_batch(APP, rows, NOW, settings, RedBeatSchedulerEntry)
    return [*plan.ops, *((c.task_id, c.entry.name, c.due) for c in plan.claims)]


MINUTE_AGO = NOW.replace(microsecond=0) - timedelta(minutes=1)


def rows_sharing_a_schedule(schedule: object) -> list[Row]:
    return [
        *(row(f"same{i}", schedule, MINUTE_AGO) for i in range(3)),
        row("jittered", schedule, MINUTE_AGO, jitter=30),
        row("jittered2", schedule, MINUTE_AGO, jitter=30),
        row("older", schedule, MINUTE_AGO - timedelta(minutes=5), coalesce=False, max_catch_up=3),
        row(
            "graced",
            schedule,
            MINUTE_AGO - timedelta(hours=2),
            misfire_grace_time=90,
            coalesce=False,
        ),
        row("zoned", schedule, MINUTE_AGO.astimezone(ZoneInfo("Asia/Kolkata"))),
        row("never-ran", schedule, None, NOW.timestamp() - 3),
        row("never-ran-later", schedule, None, NOW.timestamp() + 20),
        row("never-ran-unscored", schedule, None, 0),
        row("windowed", schedule, MINUTE_AGO, end_time=NOW - timedelta(seconds=30)),
        row("disabled", schedule, MINUTE_AGO, enabled=False),
    ]


@pytest.mark.parametrize(
    "schedule",
    [60.0, timedelta(seconds=45), crontab(), crontab(minute="*/5", hour="8-18")],
    ids=["60 s", "45 s", "* * * * *", "*/5 8-18"],
)
@pytest.mark.parametrize("grace", [None, 120.0], ids=["no default grace", "grace 120 s"])
def test_a_batch_decides_what_each_entry_decides_alone(
    schedule: object, grace: float | None
) -> None:
    settings = TickSettings("node", misfire_grace_time=grace)
    rows = rows_sharing_a_schedule(schedule)
    alone = [decision for one in rows for decision in decided([one], settings)]
    together = decided(rows, settings)
    assert sorted(map(repr, together)) == sorted(map(repr, alone))
    # the batch did claim something for the entries sharing everything
    assert sum(1 for d in together if isinstance(d, tuple) and str(d[1]).startswith("same")) == 3


def test_a_slots_stamps_are_its_instants_whatever_its_zone() -> None:
    """slot_stamps is kept by due time: one instant in two zones is one key, and its
    texts are what the task id (epoch ms) and the pending record (repr of epoch s) say."""
    due = datetime(2027, 6, 1, 11, 59, 0, 123456, tzinfo=UTC)
    zoned = due.astimezone(ZoneInfo("Asia/Kolkata"))
    assert slot_stamps(zoned) == slot_stamps(due) == ("1811851140123", "1811851140.123456")
    assert due_ms(due) == "1811851140123"

"""The decisions of issue 27's policies, as tables with a fixed "now": ``overlap``
(skip, buffer_one), ``relative_to: "execution"`` and the bound on a silent run, from an
entry's latest run as the workers reported it (the ``run`` field tick.lua reads)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

from redbeat import RedBeatSchedulerEntry
from redbeat.batch import Row
from redbeat.decoder import loads
from redbeat.entry_fields import meta_json
from redbeat.keys import META, MISFIRES, RUN
from redbeat.planning import TickSettings, plan_batch
from redbeat.policy import EntryPolicy, misfire_record
from redbeat.runs import RunRecord, flight

T = datetime(2027, 5, 4, 12, 0, 0, tzinfo=timezone.utc)
NOW = T.timestamp()
APP = Celery("overlap-tests", set_as_current=False)
APP.conf.update(timezone="UTC", redbeat_redis_url="redis://unused:1/0")


def t(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def ms(seconds: float) -> int:
    return round(t(seconds).timestamp() * 1000)


def record(due: float, state: str, at: float, **more) -> str:
    """A run field: the run of the slot due at T+due, last reported at T+at."""
    return RunRecord(f"a:{ms(due)}", ms(due), state, NOW + at, **more).to_json()


def row(every: float, last: float, run: str | None, **policy) -> Row:
    entry = RedBeatSchedulerEntry("a", "tasks.x", every, app=APP, last_run_at=t(last), **policy)
    return Row(
        entry.key,
        NOW,
        entry.definition_json(),
        meta_json(entry.last_run_at),
        entry.policy.to_json(),
        None,
        "" if run is None else run,
    )


def decide(row_: Row, now: float = 0.0, lost_after: float = 100.0):
    """(claimed slots, new score, fields written, lost) relative to T."""
    plan = plan_batch(
        APP, [row_], t(now), TickSettings("node", lost_after=lost_after), RedBeatSchedulerEntry
    )
    (op,) = plan.ops
    fields = dict(op.fields)
    written = {}
    if RUN in fields:
        run = RunRecord.parse(fields[RUN])
        written["run"] = (
            run.state,
            round(run.due_ms / 1000 - NOW, 3),
            run.wake,
            None if run.buffered_ms is None else round(run.buffered_ms / 1000 - NOW),
        )
    if MISFIRES in fields:
        misfires = json.loads(fields[MISFIRES])
        written["misfires"] = (misfires["skipped"], misfires.get("overlap", 0))
    if META in fields:
        written["last"] = round(loads(fields[META])["last_run_at"].timestamp() - NOW)
    return (
        [round((claim.due - T).total_seconds(), 3) for claim in plan.claims],
        round(op.score - NOW, 3),
        written,
        [(key, report["task_id"]) for key, report in plan.lost],
    )


SKIP = {"overlap": "skip"}
BUFFER = {"overlap": "buffer_one"}
AFTER = {"relative_to": "execution"}

# (case, row, now, expected (claims, score, written fields, lost runs))
CASES = [
    (
        "skip: the previous run ended, the slot is claimed and queued",
        row(10, -10, record(-10, "success", -3), **SKIP),
        0,
        ([0], 10, {"run": ("queued", 0, False, None), "last": 0}, []),
    ),
    (
        "skip: never ran before, claimed",
        row(10, -10, None, **SKIP),
        0,
        ([0], 10, {"run": ("queued", 0, False, None), "last": 0}, []),
    ),
    (
        "skip: the previous run goes on, the slot is skipped and counted",
        row(10, -10, record(-10, "running", -8), **SKIP),
        0,
        ([], 10, {"misfires": (1, 1), "last": 0}, []),
    ),
    (
        "skip: a queued run holds the entry too",
        row(10, -10, record(-10, "queued", -10), **SKIP),
        0,
        ([], 10, {"misfires": (1, 1), "last": 0}, []),
    ),
    (
        "skip: a retrying run holds the entry too",
        row(10, -10, record(-10, "retry", -1), **SKIP),
        0,
        ([], 10, {"misfires": (1, 1), "last": 0}, []),
    ),
    (
        "skip: a run silent past its bound is lost; the slot is claimed",
        row(10, -10, record(-10, "running", -200), **SKIP),
        0,
        ([0], 10, {"run": ("queued", 0, False, None), "last": 0}, [("redbeat:a", f"a:{ms(-10)}")]),
    ),
    (
        "skip: the entry's own lost_after wins",
        row(10, -10, record(-10, "running", -20), lost_after=10, **SKIP),
        0,
        ([0], 10, {"run": ("queued", 0, False, None), "last": 0}, [("redbeat:a", f"a:{ms(-10)}")]),
    ),
    (
        "skip while running, beat was down: every missed slot counted",
        row(10, -40, record(-40, "running", -5), **SKIP),
        0,
        ([], 10, {"misfires": (4, 4), "last": 0}, []),
    ),
    (
        "skip, not coalescing: every missed slot counted",
        row(10, -40, record(-40, "running", -5), coalesce=False, **SKIP),
        0,
        ([], 10, {"misfires": (4, 4), "last": 0}, []),
    ),
    (
        "one run at a time: a catch-up of several slots runs the latest",
        row(10, -40, record(-40, "success", -35), coalesce=False, **SKIP),
        0,
        ([0], 10, {"run": ("queued", 0, False, None), "misfires": (3, 3), "last": 0}, []),
    ),
    (
        "buffer_one: the slot waits for the run, the entry parked until the run's bound",
        row(10, -10, record(-10, "running", -8), **BUFFER),
        0,
        ([], 92, {"run": ("running", -10, True, 0), "last": 0}, []),
    ),
    (
        "buffer_one, already waiting: parked again, nothing counted",
        row(10, 0, record(-10, "running", -8, buffered_ms=ms(0), wake=True), **BUFFER),
        15,
        ([], 92, {}, []),
    ),
    (
        "buffer_one: the run ended, the buffered slot goes, the ones since are skipped",
        row(10, 0, record(-10, "success", 25, buffered_ms=ms(0)), **BUFFER),
        25,
        ([0], 30, {"run": ("queued", 0, False, None), "misfires": (2, 2), "last": 20}, []),
    ),
    (
        "buffer_one: the run ended before the next slot: the buffered one goes alone",
        row(10, 0, record(-10, "success", 5, buffered_ms=ms(0)), **BUFFER),
        5,
        ([0], 10, {"run": ("queued", 0, False, None), "last": 0}, []),
    ),
    (
        "buffer_one: the run it waited for is lost: the buffered slot goes",
        row(10, 0, record(-10, "running", -150, buffered_ms=ms(0), wake=True), **BUFFER),
        5,
        ([0], 10, {"run": ("queued", 0, False, None), "last": 0}, [("redbeat:a", f"a:{ms(-10)}")]),
    ),
    (
        "execution: next run an interval after the previous run ended",
        row(10, -30, record(-30, "success", -4, finished=NOW - 4), **AFTER),
        0,
        ([], 6, {}, []),
    ),
    (
        "execution: due since it ended an interval ago: claimed, waiting for it",
        row(10, -30, record(-30, "success", -12, finished=NOW - 12), **AFTER),
        0,
        ([-2], 100, {"run": ("queued", -2, True, None), "last": -2}, []),
    ),
    (
        "execution: still running: waits until the run's bound",
        row(10, -30, record(-30, "running", -20), **AFTER),
        0,
        ([], 80, {}, []),
    ),
    (
        "execution: a failure counts as an end too",
        row(10, -30, record(-30, "failure", -5, finished=NOW - 5), **AFTER),
        0,
        ([], 5, {}, []),
    ),
    (
        "execution: lost, the next run an interval after it was given up on",
        row(10, -300, record(-300, "running", -150), **AFTER),
        0,
        ([], 10, {"run": ("lost", -300, False, None)}, [("redbeat:a", f"a:{ms(-300)}")]),
    ),
    (
        "execution: no run recorded yet: the schedule's slot",
        row(10, -10, None, **AFTER),
        0,
        ([0], 100, {"run": ("queued", 0, True, None), "last": 0}, []),
    ),
]


@pytest.mark.parametrize("case,row_,now,expected", CASES, ids=[c[0] for c in CASES])
def test_decisions(case, row_, now, expected):
    assert decide(row_, now) == expected


def test_an_entry_without_a_run_read_is_planned_as_before():
    """A row tick.lua did not watch (a 2.4.2-era read, a policy of allow) is planned
    from its slots alone, whatever the policy says."""
    entry = RedBeatSchedulerEntry("a", "tasks.x", 10, app=APP, last_run_at=t(-10), **SKIP)
    unwatched = Row(
        entry.key,
        NOW,
        entry.definition_json(),
        meta_json(entry.last_run_at),
        entry.policy.to_json(),
    )
    claims, score, written, lost = decide(unwatched)
    assert (claims, score, lost) == ([0], 10, []) and "run" not in written


def test_a_watched_rows_fingerprint_covers_its_run_field():
    base = row(10, -10, None, **SKIP)
    assert len(base.fingerprint) == 120
    assert base.fingerprint != base._replace(run=record(-10, "running", 0)).fingerprint
    assert len(base._replace(run=None).fingerprint) == 80


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "{",
        "[]",
        '{"task_id": "a:1"}',
        '{"task_id": "a:1", "due_ms": 1, "state": "odd", "at": 1}',
        '{"task_id": "a:1", "due_ms": 1, "state": "running", "at": "NaN"}',
    ],
)
def test_a_run_field_that_cannot_be_read_holds_nothing(text):
    assert RunRecord.parse(text) is None
    assert not flight(RunRecord.parse(text), NOW, 10).busy


@pytest.mark.parametrize(
    "values,problem",
    [
        ({"overlap": "never"}, "overlap"),
        ({"relative_to": "dispatch"}, "relative_to"),
        ({"lost_after": 0}, "lost_after"),
        ({"lost_after": -1}, "lost_after"),
    ],
)
def test_bad_policy_values_are_refused(values, problem):
    with pytest.raises(ValueError, match=problem):
        EntryPolicy(**values)


def test_overlap_misfires_are_counted_apart_and_late_ones_as_before():
    late = misfire_record(None, 2, t(0))
    assert json.loads(late) == {"skipped": 2, "last_skipped": t(0).isoformat()}
    both = json.loads(misfire_record(late, 3, t(10), "overlap"))
    assert (both["skipped"], both["overlap"], both["last_reason"]) == (5, 3, "overlap")

"""redbeat.web.actions: which actions the view offers and which it asks about first."""

from __future__ import annotations

import pytest

from redbeat.web.actions import applicable, needs_confirmation, refused_statics


@pytest.mark.parametrize(("state", "readable", "offered"), [
    ("enabled", True, ["disable", "run", "delete"]),
    ("failing", True, ["disable", "run", "delete"]),
    ("unscheduled", True, ["disable", "run", "delete"]),
    ("disabled", True, ["enable", "run", "delete"]),
    ("quarantined", True, ["release", "run", "delete"]),
    ("finished", True, ["run", "delete"]),
    ("quarantined", False, ["delete"]),  # nothing else can read it
])
def test_only_the_actions_that_apply(state, readable, offered):
    assert applicable(state, readable) == offered


@pytest.mark.parametrize(("action", "static", "every_match", "asked"), [
    ("delete", False, False, True), ("disable", False, False, True),
    ("enable", False, False, False), ("run", False, False, False),
    ("release", False, False, False), ("enable", True, False, True),
    ("run", True, False, False), ("run", False, True, True), ("enable", False, True, True),
])
def test_what_is_asked_first(action, static, every_match, asked):
    assert needs_confirmation(action, static, every_match) is asked


@pytest.mark.parametrize(("action", "forced", "left"), [
    ("delete", False, ["a", "b"]), ("disable", False, ["a", "b"]), ("enable", False, ["a", "b"]),
    ("delete", True, []), ("run", False, []),
])
def test_statics_are_left_alone_unless_forced(action, forced, left):
    assert refused_statics(action, {"b", "a"}, forced) == left


def test_history_rows_say_what_the_worker_reported() -> None:
    """A dispatch's row shows the worker's report when there is one (success, failure
    with its error line, runtime, worker), the broker's refusal, or "sent"."""
    from redbeat.manage import EntryInfo
    from redbeat.web.views import _history

    info = EntryInfo("job", "redbeat:job", 1.0, {})
    info.history = [{"task_id": f"job:{due}", "due": "2030-01-01T00:00:00+00:00",
                     "claimed_at": "2030-01-01T00:00:01+00:00", "node": "h:1"}
                    for due in (3, 2, 1)]
    outcomes = [{"task_id": "job:3", "outcome": "failure", "runtime": 0.25,
                 "worker": "celery@w1", "error": "ValueError: boom"},
                {"task_id": "job:2", "outcome": "success", "runtime": 2.5,
                 "worker": "celery@w1", "error": None}]
    rows = _history(info, None, outcomes)
    assert [row["outcome"] for row in rows] == [
        "failure in 0.25 s on celery@w1: ValueError: boom",
        "success in 2.50 s on celery@w1", "sent"]
    assert [row["kind"] for row in rows] == ["failing", "sent", "sent"]
    assert rows[0]["slot"].year == 2030 and rows[0]["sent"].second == 1

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


@pytest.mark.parametrize(("action", "static", "asked"), [
    ("delete", False, True), ("disable", False, True), ("enable", False, False),
    ("run", False, False), ("release", False, False),
    ("enable", True, True), ("run", True, False),
])
def test_what_is_asked_first(action, static, asked):
    assert needs_confirmation(action, static) is asked


@pytest.mark.parametrize(("action", "forced", "left"), [
    ("delete", False, ["a", "b"]), ("disable", False, ["a", "b"]), ("enable", False, ["a", "b"]),
    ("delete", True, []), ("run", False, []),
])
def test_statics_are_left_alone_unless_forced(action, forced, left):
    assert refused_statics(action, {"b", "a"}, forced) == left

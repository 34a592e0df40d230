"""Which actions the view offers, and which it asks about first: pure decisions, tested
as tables (tests/test_web_actions.py)."""

from __future__ import annotations

from collections.abc import Collection

#: Every action on an entry, as the forms name them, with the button's words.
ACTIONS = {"enable": "Enable", "disable": "Disable", "release": "Release quarantine",
           "run": "Run now", "delete": "Delete"}
#: What a bulk selection may do (release has its own page: ``redbeat unquarantine``).
BULK_ACTIONS = ("enable", "disable", "run", "delete")
#: Actions that stop runs or lose data: confirmed on a page of their own first.
CONFIRMED = frozenset({"disable", "delete"})
#: Actions the CLI refuses on a static entry without ``--force`` (run now is not a
#: change: it leaves the definition alone).
GUARDED = frozenset({"enable", "disable", "delete"})


def applicable(state: str, readable: bool) -> list[str]:
    """The actions that mean something for an entry in ``state`` (a ShownState):
    enable only what is disabled, disable only what runs, release only a quarantine;
    an entry whose definition cannot be read can only be deleted."""
    if not readable:
        return ["delete"]
    offered = {
        "enabled": ["disable", "run"], "failing": ["disable", "run"],
        "unscheduled": ["disable", "run"], "disabled": ["enable", "run"],
        "quarantined": ["release", "run"], "finished": ["run"],
    }.get(state, ["run"])
    return [*offered, "delete"]


def needs_confirmation(action: str, static: bool, every_match: bool = False) -> bool:
    """Asked first: a disable or delete always; any guarded change of a static entry
    (the page says the leader will undo it, and offers to force it); and any action
    on every entry matching a filter, whose count only that page shows."""
    return action in CONFIRMED or static and action in GUARDED or every_match


def refused_statics(action: str, statics: Collection[str], forced: bool) -> list[str]:
    """The static entries an action leaves alone: all of them unless forced (the CLI's
    ``--force``), none for an action that is not a change."""
    if action not in GUARDED or forced:
        return []
    return sorted(statics)


__all__ = ["ACTIONS", "BULK_ACTIONS", "CONFIRMED", "GUARDED", "applicable",
           "needs_confirmation", "refused_statics"]

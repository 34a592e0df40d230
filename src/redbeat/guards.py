"""What the command line refuses to change without ``--force``, decided apart from I/O.

Two mistakes look like successes when nothing stops them:

- A static entry (one from ``beat_schedule``) changed by hand: the leader writes
  ``beat_schedule`` over it when a beat next takes the lead or restarts, so a deleted
  static comes back and a disabled one runs again, hours after the command said "done".
- A task name no worker knows: beat sends it on time and every worker drops it as an
  unregistered task, which the scheduler never sees.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping
from typing import Any


def statics_among(names: Iterable[str], recorded: Collection[str],
                  configured: Mapping[str, Any] | None) -> list[str]:
    """The names a leader writes back: those it recorded as statics (``<prefix>:statics``)
    and, when the app is known, those its ``beat_schedule`` configures (a static the
    leader has not written yet is still one)."""
    configured = configured or {}
    return [name for name in names if name in recorded or name in configured]


def static_message(names: list[str], forced: bool) -> str:
    """One line: what happens to a change of these statics, and what to do instead."""
    which = ", ".join(repr(name) for name in names)
    noun = "a static entry" if len(names) == 1 else "static entries"
    back = ("this change lasts only until a beat next takes the lead or restarts, which "
            "writes beat_schedule again" if forced else
            "a change is undone when a beat next takes the lead or restarts (it writes "
            "beat_schedule again): change beat_schedule instead, or give --force")
    return f"{which} {'is' if len(names) == 1 else 'are'} {noun} (from beat_schedule); {back}"


def task_problem(task: str, registered: Collection[str], field: str) -> str | None:
    """Why ``task`` cannot be sent as it is named, or None: empty, or not one of the
    app's registered tasks (with the closest names, a typo being the usual cause)."""
    if not task.strip():
        return f"{field}: the task name is empty"
    if task in registered:
        return None
    close = difflib.get_close_matches(task, sorted(registered), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return (f"{field}: no task named {task!r} is registered by the app{hint} "
            "(give --force if workers elsewhere register it)")

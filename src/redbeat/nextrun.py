"""When an entry is sent next: the one rule, used by save, the tick, statics, the CLI
and the management API (a pure function of stored data and "now").

The rule, in order:

1. **Due time**: the schedule's first run after ``last_run_at``; for an entry that
   never ran, the time it was saved for (its score), or, with no score (written by
   hand, score 0), its first run at or after now.
2. **Window**: a due time before the policy's ``start_time`` moves to the schedule's
   first run at or after it (a one-off's, whose time has no run after it, to the start
   itself); one after ``end_time`` means no more runs (parked).
3. **Jitter**: the slot is sent a fixed delay after its due time, the same for the same
   (entry, slot) on every node and at every re-evaluation, so re-reading an entry never
   pushes it back; never past ``end_time``.
4. **Score**: the send time, rounded *up* to the millisecond (a tick never reads an
   entry before it is due), or -1 (parked) when there is no next run.

The due time is the slot: its task id and the ``last_run_at`` recorded when it runs.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from celery import schedules as celery_schedules

from .keys import PARKED_SCORE
from .nexttime import first_due, latest_slot, next_after, slots_between, utc
from .policy import EntryPolicy

#: Slots tried when telling which one a never-run entry's score was jittered from.
JITTER_SEARCH = 1000


class NextRun(NamedTuple):
    """A slot and when it is sent."""

    due: datetime  # the schedule's time: the task id and the next ``last_run_at``
    send_at: datetime  # due plus its jitter: the score

    @property
    def score(self) -> float:
        return to_score(self.send_at)


def to_score(moment: datetime | None) -> float:
    """A send time as a schedule score: epoch seconds rounded *up* to the millisecond,
    so a tick never selects an entry before it is due (and never reloads it for
    nothing); -1 (parked) for None."""
    if moment is None:
        return PARKED_SCORE
    return math.ceil(round(utc(moment).timestamp() * 1000, 3)) / 1000


def from_score(score: float) -> datetime:
    return datetime.fromtimestamp(score, tz=timezone.utc)


#: The last score a date can hold: 9999-12-31 23:59:59 UTC.
LATEST_SCORE = 253402300799.0


def score_time(score: float | None) -> datetime | None:
    """A stored score as the time it names, for showing; None for a parked (-1) or
    due-now (0) entry, and for a score no date can hold (another client's ``ZADD`` of
    inf or 1e300, which failed list, status and the web's pages)."""
    if score is None or not 0 < score <= LATEST_SCORE:
        return None
    return from_score(score)


def score_of(run: NextRun | None) -> float:
    return PARKED_SCORE if run is None else run.score


def placed(schedule: Any, policy: EntryPolicy, name: str,
           due: datetime | None) -> NextRun | None:
    """Steps 2 and 3 of the rule for a due time the schedule gave."""
    due = policy.window(schedule, due)
    if due is None:
        return None
    return NextRun(due, policy.send_time(name, due))


def next_run(schedule: Any, policy: EntryPolicy, name: str, last_run_at: datetime | None,
             now: datetime, score: float | None = None) -> NextRun | None:
    """The entry's next slot (overdue ones included: the due time may be before now),
    or None when it has no more runs. ``score`` is the stored score of an entry that
    never ran (None when unknown or not stored yet)."""
    if last_run_at is not None:
        return placed(schedule, policy, name, next_after(schedule, last_run_at))
    if score is not None and score > 0:
        return _saved_first(schedule, policy, name, from_score(score))
    return placed(schedule, policy, name, first_due(schedule, now))


def following_run(schedule: Any, policy: EntryPolicy, name: str,
                  slot: datetime) -> NextRun | None:
    """The slot after one that has just run (or been claimed)."""
    return placed(schedule, policy, name, next_after(schedule, slot))


def upcoming_runs(first: NextRun | None, schedule: Any, policy: EntryPolicy, name: str,
                  count: int, now: datetime | None = None) -> list[NextRun]:
    """``first`` and the slots after it, ``count`` at most, as the tick will send them
    (the window and jitter applied): what the CLI and the web view show. An overdue
    ``first`` (no beat ran it) goes out at the next tick together with the slots missed
    since, so the runs after it follow the latest slot at or before ``now``: listing the
    missed ones after it showed times already past."""
    runs: list[NextRun] = []
    run = first
    while run is not None and len(runs) < count:
        runs.append(run)
        after = run.due
        if len(runs) == 1 and now is not None and run.due < now:
            after = latest_slot(schedule, run.due, now)
        run = following_run(schedule, policy, name, after)
    return runs


def follows_app_zone(schedule: Any) -> bool:
    """Whether the schedule's runs depend on the app's time zone: a crontab without a
    zone of its own, or a ``relative=True`` interval (rounded on the app zone's clock).
    Where that zone is unknown (the standalone CLI), such an entry is saved due at once
    and beat works out its first run in its own zone (see ``entry.save``)."""
    if isinstance(schedule, celery_schedules.crontab):
        return getattr(schedule, "timezone", None) is None
    return isinstance(schedule, celery_schedules.schedule) and bool(schedule.relative)


def _saved_first(schedule: Any, policy: EntryPolicy, name: str,
                 send_at: datetime) -> NextRun | None:
    """The first slot of an entry that never ran, saved to be sent at ``send_at``.

    The score is a send time: the slot's due time plus its jitter. Reading it as a due
    time and adding the jitter again pushed such an entry back on every tick (a
    one-off, an entry written by hand), and a windowed one past its end. So the slot is
    the schedule's run that the score was jittered from; a score no run gives (written
    by hand, or an interval, whose runs follow from the save time) is both the slot's
    due time and its send time.
    """
    due = _unjittered(schedule, policy, name, send_at) or send_at
    moved = policy.window(schedule, due)
    if moved is None:
        return None
    if moved != due:  # a window edited since: the rule from the new start
        return NextRun(moved, policy.send_time(name, moved))
    return NextRun(due, send_at)


def _unjittered(schedule: Any, policy: EntryPolicy, name: str,
                send_at: datetime) -> datetime | None:
    if not policy.jitter:
        return None
    target = to_score(send_at)
    # from the window's start when it opens later: a never-run interval's first slot is
    # start_time, which a run "at or after send_at - jitter" of an interval is not
    earliest = policy.window(schedule,
                             first_due(schedule, send_at - timedelta(seconds=policy.jitter)))
    if earliest is None or earliest > send_at:
        return None
    for slot in slots_between(schedule, earliest, send_at, limit=JITTER_SEARCH):
        if to_score(policy.send_time(name, slot)) == target:
            return slot
    return None

"""The in-process scheduler kit: a real scheduler whose broker publish is recorded
instead of sent, a clock the test sets, and a leader built on both. Everything else
(Redis, scripts, lease) is real.

``Recording.messages`` keeps each message as Celery would have sent it (the entry copy
with its slot task id); ``sent`` is the (name, task id) pairs most tests compare, and
``task_ids`` the ids alone (None on the per-entry path, where Celery picks the id).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from redbeat import RedBeatScheduler, RedBeatSchedulerEntry

#: A fixed moment for tests driving the scheduler's clock (never compared with the real
#: one: entries get a last_run_at relative to it).
T0 = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc).timestamp()


def after_interval(last: datetime, every: timedelta) -> datetime:
    """The run after ``last`` of an interval of whole seconds: counted from ``last``'s
    whole second (docs/semantics.md)."""
    return last.replace(microsecond=0) + every


def at(seconds: float) -> datetime:
    """``seconds`` after T0, as an aware datetime."""
    return datetime.fromtimestamp(T0 + seconds, tz=timezone.utc)


class Clock:
    """A wall or monotonic clock the test moves by setting ``now``."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Recording(RedBeatScheduler):
    """The real scheduler; only the broker publish is recorded instead of sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.messages: list[RedBeatSchedulerEntry] = []
        super().__init__(*args, **kwargs)

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True,
                    **kwargs: Any) -> None:
        self.messages.append(entry)

    @property
    def sent(self) -> list[tuple[str, str | None]]:
        return [(entry.name, entry.options.get("task_id")) for entry in self.messages]

    @property
    def task_ids(self) -> list[str | None]:
        return [entry.options.get("task_id") for entry in self.messages]


def leader(app: Any, clock: Clock) -> Recording:
    """A Recording scheduler that has taken the lock and synced the statics."""
    scheduler = Recording(app, clock=clock)
    assert scheduler.tick() == 0.0
    return scheduler

"""Dispatches that did not go out: recorded on the entry, so they do not pass for runs.

A slot Celery or the broker refuses for what it is (a ``TypeError`` from the task's
signature, an argument the serializer cannot encode) would fail the same way forever,
so the scheduler logs it and drops it instead of blocking the slots behind it. The run
was claimed (the run count and history already name it), so without a record the CLI
showed it as a success. The scheduler records each one (``ScheduleStore.record_failure``,
with :func:`failure_json`) in the entry's ``failures`` field (never in ``meta``,
which keeps celery-redbeat 2.4.2's two keys) and in the ``<prefix>:failing`` set that
``status`` reads.

An entry is *failing* while its last failure is not older than its last claimed slot (less
a moment for a claim in flight): the next slot that goes out clears the state (the count
stays, as history).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from .entry_fields import parse_meta
from .keys import FAILURES, KeyLayout

#: Failures kept per entry besides the count.
RECENT = 5
#: Seconds a claimed slot may take to be published or refused.
IN_FLIGHT = 3.0
#: Longest reason stored (a repr of an exception can carry a whole argument).
REASON_LIMIT = 500


@dataclass(frozen=True)
class Failure:
    task_id: str
    at: datetime
    reason: str
    node: str


@dataclass(frozen=True)
class Failures:
    count: int
    recent: tuple[Failure, ...]

    @property
    def last(self) -> Failure | None:
        return self.recent[0] if self.recent else None

    def failing_since(self, last_run_at: datetime | None) -> bool:
        """Whether no dispatch has gone out since the last failure: its time is at least
        that of the last claimed slot (``meta``'s ``last_run_at``), less IN_FLIGHT, since
        the newest claim may not have been published, or refused, yet (without it, a
        refused entry read between a claim and its refusal looked healthy)."""
        last = self.last
        if last is None:
            return False
        if last_run_at is None:
            return True
        try:
            return last.at >= last_run_at - timedelta(seconds=IN_FLIGHT)
        except OverflowError:  # a last run in the first seconds of year 1
            return last.at >= last_run_at

    def task_ids(self) -> dict[str, Failure]:
        return {failure.task_id: failure for failure in self.recent}


def failure_json(task_id: str, reason: str, node: str, at: float) -> str:
    moment = datetime.fromtimestamp(at, tz=timezone.utc)
    return json.dumps({"task_id": task_id, "at": moment.isoformat(), "at_epoch": at,
                       "reason": reason[:REASON_LIMIT], "node": node})


def read_failures(fields: dict[str, str]) -> Failures | None:
    """The entry's failure record (None when it has none or it cannot be read: it is
    advisory, like the history)."""
    raw = fields.get(FAILURES)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        recent = tuple(_failure(item) for item in doc.get("recent") or () if isinstance(
            item, dict))
        return Failures(int(doc.get("count") or len(recent)), recent)
    except (ValueError, TypeError, AttributeError, RecursionError, OverflowError, OSError):
        return None  # another client's text: a count of 1e400, a time past year 9999...


def _failure(item: dict[str, Any]) -> Failure:
    at = item.get("at_epoch")
    moment = (datetime.fromtimestamp(float(at), tz=timezone.utc) if at is not None
              else datetime.fromisoformat(str(item.get("at"))))
    if moment.tzinfo is None:  # compared with the aware last run
        moment = moment.replace(tzinfo=timezone.utc)
    return Failure(str(item.get("task_id")), moment, str(item.get("reason")),
                   str(item.get("node")))


@dataclass(frozen=True)
class FailingSummary:
    """What ``status`` says about failed dispatches."""

    #: entries whose last dispatch failed: (name, their last failure), newest first
    failing: list[tuple[str, Failure]]
    #: failed dispatches recorded on the entries that still exist
    total: int


def failing_summary(rows: list[tuple[str, str | None, str | None]],
                    keys: KeyLayout) -> FailingSummary:
    """Which of the entries with a recorded failure (key, ``failures`` field, ``meta``:
    ``ScheduleStore.failure_rows``) are failing now, and how many failures they hold."""
    failing, total = [], 0
    for key, raw, meta in rows:
        failures = read_failures({FAILURES: raw} if raw else {})
        if failures is None:
            continue
        total += failures.count
        try:
            last_run_at, _ = parse_meta(key, meta)
        except ValueError:
            last_run_at = None
        if failures.failing_since(last_run_at) and failures.last is not None:
            failing.append((keys.name_of(key), failures.last))
    return FailingSummary(failing, total)

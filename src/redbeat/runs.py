"""An entry's latest run as the workers reported it, and whether it is still going (pure).

The entry hash's ``run`` field holds one JSON object: the latest run of the entry that a
worker with ``redbeat_worker_outcomes`` reported (started, then finished with an
outcome), or that beat wrote itself for an entry whose policy waits for its runs
(``overlap`` other than ``allow``, ``relative_to: "execution"``): ``queued`` when it
claims a slot, ``lost`` when a run stayed silent longer than its bound. lua/outcome.lua
writes the same keys on the workers' side::

    {"task_id": "backup:1764172800000", "due_ms": 1764172800000, "state": "success",
     "at": 1764172803.2, "started": 1764172800.4, "finished": 1764172803.2,
     "runtime": 2.8, "worker": "celery@host", "error": null}

``at`` is the latest report (epoch seconds, Redis's clock on the workers' side); ``wake``
(beat waits for this run: its worker lowers the entry's score when it finishes) and
``buffered_ms`` (a slot waiting for it, ``overlap: "buffer_one"``) are beat's marks.
A record that cannot be read counts as none: a run is never held up by a bad field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

#: States of a run that has not finished: a later slot waits for it (or is skipped).
ACTIVE = frozenset({"queued", "running", "retry"})
#: What a run ended as. ``retry`` is reported too, but the run goes on (same task id).
FINAL = frozenset({"success", "failure", "revoked", "lost"})
#: Every state a record may hold.
STATES = ACTIVE | FINAL
#: Outcomes that count towards "the last N runs failed" (``redbeat check``).
FAILED = frozenset({"failure", "lost"})


@dataclass(frozen=True)
class RunRecord:
    task_id: str
    due_ms: int
    state: str
    at: float
    started: float | None = None
    finished: float | None = None
    runtime: float | None = None
    worker: str | None = None
    error: str | None = None
    wake: bool = False
    buffered_ms: int | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @classmethod
    def parse(cls, text: str | None) -> RunRecord | None:
        """The record a ``run`` field holds; None when absent or unreadable."""
        if not text:
            return None
        try:
            values = json.loads(text)
            record = cls(
                task_id=str(values["task_id"]), due_ms=int(values["due_ms"]),
                state=str(values["state"]), at=_seconds(values["at"]),
                started=_maybe(values.get("started")),
                finished=_maybe(values.get("finished")),
                runtime=_maybe(values.get("runtime")),
                worker=_text(values.get("worker")), error=_text(values.get("error")),
                wake=values.get("wake") is True,
                buffered_ms=None if values.get("buffered_ms") is None
                else int(values["buffered_ms"]),
            )
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            return None
        return record if record.state in STATES else None

    def to_json(self) -> str:
        """The field's text: keys whose value is None (or false) left out."""
        return json.dumps({name: value for name in _FIELDS
                           if (value := getattr(self, name)) is not None and value is not False})

    def lost(self, now: float) -> RunRecord:
        """This run, given up on at ``now``."""
        return replace(self, state="lost", at=now, finished=now, wake=False, buffered_ms=None)


#: The record's keys, in the order they are written (asdict copies deeply: slower).
_FIELDS = tuple(field.name for field in fields(RunRecord))


def _seconds(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("not a time")
    return number


def _maybe(value: Any) -> float | None:
    return None if value is None else _seconds(value)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


class Flight(NamedTuple):
    """Where an entry's latest run stands at ``now``."""

    #: the latest run has not finished and has reported within its bound
    busy: bool
    #: the latest run as recorded (None: none recorded)
    record: RunRecord | None
    #: the latest run given up on now (to record as ``lost``), or None
    lost: RunRecord | None = None
    #: when a busy run will count as lost (epoch seconds)
    release_at: float | None = None

    @property
    def finished_at(self) -> float | None:
        """When the latest run ended (or was given up on), if it did."""
        ended = self.lost or self.record
        if ended is None or ended.active:
            return None
        return ended.finished if ended.finished is not None else ended.at


def flight(record: RunRecord | None, now: float, lost_after: float) -> Flight:
    """Whether the run ``record`` describes still holds its entry at ``now``: a run that
    has not finished holds it for ``lost_after`` seconds after its latest report (queued,
    started, retried), then counts as lost (its worker was killed, or never had the
    integration) and the entry is released."""
    if record is None or not record.active:
        return Flight(False, record)
    release_at = record.at + lost_after
    if now < release_at:
        return Flight(True, record, release_at=release_at)
    return Flight(False, record, lost=record.lost(now))


def slot_of_task(task_id: str) -> tuple[str, int] | None:
    """The entry name and due time (epoch ms) a beat task id ``<name>:<due ms>`` names;
    None for another id (Celery's random ones, a slot id of another shape)."""
    name, sep, due = task_id.rpartition(":")
    if not sep or not name or not (due.isascii() and due.isdigit()) or len(due) > 15:
        return None
    return name, int(due)


def summary(record: RunRecord | None, now: float, lost_after: float) -> str:
    """The latest run in words, as ``show``, ``list`` and the web view say it: "success
    in 2.80 s on celery@host", "running for 12 s on celery@host", "failure in 0.10 s on
    celery@host: ValueError: boom"; "-" when none was recorded. A run silent past its
    bound says so (beat or its next run records it as lost)."""
    if record is None:
        return "-"
    where = f" on {record.worker}" if record.worker else ""
    if record.active:
        since = record.started if record.state == "running" and record.started else record.at
        words = f"{record.state} for {max(now - since, 0):.0f} s{where}"
        if now - record.at >= lost_after:
            words += f" (silent {now - record.at:.0f} s: past its bound, counts as lost)"
        return words
    took = f" in {record.runtime:.2f} s" if record.runtime is not None else ""
    error = f": {record.error}" if record.error else ""
    return f"{record.state}{took}{where}{error}"

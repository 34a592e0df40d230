"""What really reached a Redis broker, and when beat logged sending it.

Long end-to-end tests count sends from the messages waiting in the broker's queue (no
worker consumes them), so every publish is there exactly as often as it happened. A
deterministic task id is ``<entry name>:<due epoch ms>``: its slot is read back from it.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

import redis

#: beat's log line for one publish, with Celery's default log format
SEND_LINE = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): INFO/MainProcess\] "
    r"Scheduler: Sending due task (\S+) \(\S+\) id=(\S+)$", re.M)


@dataclass(frozen=True)
class Message:
    task_id: str
    argsrepr: str

    @property
    def name(self) -> str:
        return self.task_id.rsplit(":", 1)[0]

    @property
    def due_ms(self) -> int | None:
        tail = self.task_id.rsplit(":", 1)[-1]
        return int(tail) if tail.isdigit() else None


def broker_messages(url: str, queue: str = "celery") -> list[Message]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        raw = client.lrange(queue, 0, -1)
    finally:
        client.close()
    messages = []
    for text in raw:
        headers = json.loads(text)["headers"]
        messages.append(Message(headers["id"], headers.get("argsrepr") or ""))
    return messages


def repeated_ids(messages: list[Message]) -> dict[str, int]:
    """Task ids that reached the broker more than once, with their counts."""
    return {task_id: n for task_id, n in Counter(m.task_id for m in messages).items() if n > 1}


def slots_by_entry(messages: list[Message]) -> dict[str, list[int]]:
    """Distinct due times (ms) sent per entry name, sorted."""
    slots: dict[str, set[int]] = defaultdict(set)
    for message in messages:
        if message.due_ms is not None:
            slots[message.name].add(message.due_ms)
    return {name: sorted(due) for name, due in slots.items()}


def ids_per_due_time(messages: list[Message]) -> dict[tuple[str, int], set[str]]:
    """(entry, due ms) -> the distinct task ids it was sent under."""
    ids: dict[tuple[str, int], set[str]] = defaultdict(set)
    for message in messages:
        if message.due_ms is not None:
            ids[(message.name, message.due_ms)].add(message.task_id)
    return ids


def logged_sends(log: str) -> list[tuple[float, str]]:
    """(epoch seconds, task id) of every publish a beat log records, in order."""
    sends = []
    for stamp, _, task_id in SEND_LINE.findall(log):
        when = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time
        sends.append((when, task_id))
    return sends


def logged_lines(log: str, text: str) -> list[tuple[float, str]]:
    """(epoch seconds, line) of the log lines containing ``text``."""
    found = []
    for line in log.splitlines():
        if text in line and line.startswith("[") and len(line) > 24:
            stamp = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append((stamp, line))
    return found


def lateness(sends: list[tuple[float, str]]) -> dict[str, float]:
    """Seconds between each slot's due time and its first logged publish."""
    late: dict[str, float] = {}
    for when, task_id in sends:
        tail = task_id.rsplit(":", 1)[-1]
        if tail.isdigit() and task_id not in late:
            late[task_id] = when - int(tail) / 1000
    return late

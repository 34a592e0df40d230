"""Schedule entries written straight to Redis in the format both packages read.

The celery-redbeat 2.4.2 layout: a hash ``redbeat:<name>`` with the JSON fields
``definition`` and ``meta``, and the sorted set ``redbeat::schedule`` whose member
``redbeat:<name>`` is scored with the next due time in epoch seconds. Needs only
redis-py, so the driver and the workers (under either interpreter) share it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import redis

SCHEDULE_KEY = "redbeat::schedule"
CHUNK = 10_000


def datetime_json(epoch: float) -> dict[str, Any]:
    """An aware UTC datetime in the packages' JSON encoding."""
    moment = time.gmtime(epoch)
    return {
        "__type__": "datetime",
        "year": moment.tm_year,
        "month": moment.tm_mon,
        "day": moment.tm_mday,
        "hour": moment.tm_hour,
        "minute": moment.tm_min,
        "second": moment.tm_sec,
        "microsecond": int(round((epoch % 1) * 1_000_000)) % 1_000_000,
        "timezone": "UTC",
    }


def write_entries(
    client: redis.Redis,
    entries: Iterable[tuple[str, float]],
    every: float,
    task: str,
    whole_seconds: bool = False,
    enabled: bool = True,
    ran_at: float | None = None,
) -> int:
    """Entries ``(name, due epoch)`` on an interval of ``every`` seconds whose last run
    was exactly ``every`` before the due time (or at ``ran_at``), scored with the due
    time; pipelined in chunks. Returns the count. ``whole_seconds`` scores them the way
    celery-redbeat 2.4.2's ``save()`` does: the due time truncated to the second (the
    meta keeps the exact last run)."""
    written = 0
    pipe = client.pipeline(transaction=False)
    for name, due in entries:
        definition = {
            "name": name,
            "task": task,
            "args": None,
            "kwargs": {},
            "options": {},
            "schedule": {"__type__": "interval", "every": every, "relative": False},
            "enabled": enabled,
        }
        last_run = due - every if ran_at is None else ran_at
        meta = {"last_run_at": datetime_json(last_run), "total_run_count": 0}
        key = f"redbeat:{name}"
        pipe.hset(key, mapping={"definition": json.dumps(definition), "meta": json.dumps(meta)})
        pipe.zadd(SCHEDULE_KEY, {key: int(due) if whole_seconds else due})
        written += 1
        if written % CHUNK == 0:
            pipe.execute()
    pipe.execute()
    return written


def add_background(client: redis.Redis, first: int, stop: int) -> None:
    """Entries ``n<first>``..``n<stop-1>``: monthly, last run now, so none falls due
    while the benchmark runs. They are the schedule's size N."""
    every = 30 * 86400.0
    due = time.time() + every
    write_entries(client, ((f"n{i}", due) for i in range(first, stop)), every, "tasks.idle")


def add_due(client: redis.Redis, count: int, tag: str = "due") -> list[str]:
    """``count`` hourly entries that fell due a second ago. Returns their keys."""
    due = float(int(time.time()) - 1)
    names = [f"{tag}{i}" for i in range(count)]
    write_entries(client, ((name, due) for name in names), 3600.0, "tasks.due")
    return [f"redbeat:{name}" for name in names]


def add_stale(client: redis.Redis, count: int) -> None:
    """``count`` entries whose score says due but that must not run: half disabled, half
    scored early (hourly, last run just now: really due in an hour), as celery-redbeat
    leaves them. Named like :func:`add_due`'s, after them."""
    now = time.time()
    half = count // 2
    write_entries(client, ((f"due{i}", now - 1) for i in range(half)), 3600.0, "tasks.off",
                  enabled=False)
    write_entries(client, ((f"due{i}", now - 1) for i in range(half, count)), 3600.0,
                  "tasks.early", ran_at=now)

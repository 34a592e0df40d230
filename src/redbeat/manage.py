"""Reading and changing entries from Python: what operators and the CLI use.

Nothing here runs in the tick; these helpers favour clarity over round trips, except
where a listing could be large (they page through the schedule in pipelines).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from celery import Celery

from .entry import InvalidEntry, RedBeatSchedulerEntry, store_for
from .settings import ensure_conf

PAGE = 500


def _decode_page(app: Celery, keys: list[str]) -> Iterator[RedBeatSchedulerEntry]:
    store = store_for(app)
    with store.client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hmget(key, "definition", "meta")
        replies = store.policy.call(pipe.execute)
    for key, (definition, meta) in zip(keys, replies, strict=True):
        if not definition:
            continue
        try:
            yield RedBeatSchedulerEntry.decode(app, key, definition, meta)
        except InvalidEntry:
            continue


def due_entries(app: Celery, now: float, limit: int = PAGE) -> list[RedBeatSchedulerEntry]:
    """Entries whose score is due at ``now`` (read only)."""
    config = ensure_conf(app)
    store = store_for(app)
    keys: list[Any] = store.policy.call(
        lambda: store.client.zrangebyscore(config.keys.schedule, 0, now, start=0, num=limit)
    )
    return list(_decode_page(app, keys))

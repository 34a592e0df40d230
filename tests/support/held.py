"""The held slots as a test reads and forges them in Redis (docs/data-format.md,
"Pending records"): the index ``<prefix>:pending`` (task ids scored by due time) with
each record at ``<prefix>:pending:<task id>``, and the index ``<prefix>:held-definitions``
(sha1 scored by how many records name it) with each text at
``<prefix>:held-definitions:<sha1>``."""

from __future__ import annotations

import json

PENDING, HELD = "redbeat::pending", "redbeat::held-definitions"


def held_ids(client, pending: str = PENDING) -> list[str]:
    """The held slots' task ids, the oldest due first."""
    return client.zrange(pending, 0, -1)


def held_count(client, pending: str = PENDING) -> int:
    return client.zcard(pending)


def held_records(client, pending: str = PENDING) -> dict[str, str | None]:
    """Task id -> record text (None: the index names a record that is gone)."""
    return {task_id: client.get(f"{pending}:{task_id}") for task_id in held_ids(client, pending)}


def forge_record(client, task_id: str, text: str, pending: str = PENDING) -> None:
    """A record written by hand, as an operator or a buggy client would: indexed at its
    due time (0 when it has none)."""
    try:
        due = float(json.loads(text).get("due", 0))
    except (ValueError, AttributeError, TypeError, RecursionError):
        due = 0.0
    client.set(f"{pending}:{task_id}", text)
    client.zadd(pending, {task_id: due})


def held_text(client, sha: str, held: str = HELD) -> str | None:
    return client.get(f"{held}:{sha}")


def held_refs(client, sha: str, held: str = HELD) -> int | None:
    """How many records the index counts as naming ``sha`` (None: not held)."""
    score = client.zscore(held, sha)
    return None if score is None else int(score)


def held_keys(client, prefix: str = "redbeat:") -> list[str]:
    """Every key of the held slots: the two indexes, the records and the texts."""
    return sorted(key for pattern in (f"{prefix}:pending*", f"{prefix}:held-definitions*")
                  for key in client.scan_iter(pattern))


def held_definitions(client, held: str = HELD) -> dict[str, tuple[str | None, int]]:
    """sha1 -> (its text, how many records the index counts as naming it)."""
    return {sha: (client.get(f"{held}:{sha}"), int(refs))
            for sha, refs in client.zrange(held, 0, -1, withscores=True)}


def nothing_held(client, prefix: str = "redbeat:") -> bool:
    """No index, no record, no text left: every held slot was released."""
    return held_keys(client, prefix) == []

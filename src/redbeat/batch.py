"""What a tick hands between the store and the planner: the rows tick.lua read and the
writes commit.lua applies, as plain data.

They live apart from ``store`` so the planner (pure, see docs/design.md) can build and
read them without importing the module that talks to Redis.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple


def _sha1(text: str) -> str:
    """The sha1 of ``text``'s bytes as read from Redis (``redis.sha1hex`` of the same)."""
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()


def fingerprint(definition: str | None, meta: str | None) -> str:
    """What commit.lua compares to know an entry is unchanged since it was read: the
    sha1 of its definition, then of its meta. Two digests, not one of both: the first is
    also the name of the held copy of a claimed slot's definition, so commit.lua checks
    the definition with the one digest it computes anyway."""
    return _sha1(definition or "") + _sha1(meta or "")


def definition_sha1(definition: str) -> str:
    """The name a pending record gives the definition it was claimed from (commit.lua's
    ``redis.sha1hex`` of the same bytes): held slots share one stored copy per text."""
    return _sha1(definition)


class Row(NamedTuple):
    """One due entry as tick.lua read it: raw text, decoded later. (A tuple: a tick
    builds a thousand of them.)"""

    key: str
    score: float
    definition: str | None
    meta: str | None
    policy: str | None = None
    misfires: str | None = None
    #: the entry's latest run (its ``run`` field, '' when it has none), read only for an
    #: entry whose policy waits for its runs; None when not read
    run: str | None = None

    @property
    def watched(self) -> bool:
        """Whether tick.lua read the entry's latest run (its policy waits for runs)."""
        return self.run is not None

    @property
    def fingerprint(self) -> str:
        """For a watched row, the ``run`` field's sha1 follows (120 hex digits): a worker
        reporting between the read and the commit changes what the plan was made from,
        so commit.lua leaves the entry to the next tick."""
        if not self.watched:
            return fingerprint(self.definition, self.meta)
        return fingerprint(self.definition, self.meta) + _sha1(self.run or "")


class Op(NamedTuple):
    """One write of commit.lua (see its header for the kinds)."""

    kind: str
    key: str
    fingerprint: str = ""
    score: float = 0.0
    fields: tuple[tuple[str, str], ...] = ()
    slots: tuple[tuple[str, str], ...] = ()  # (task id, due epoch seconds) to keep pending
    expire: int = 0
    #: (task id, due epoch milliseconds) of each claimed slot, for the history stream
    records: tuple[tuple[str, str], ...] = ()

    def as_json(self) -> list[Any]:
        """The operation as commit.lua reads it (see its header)."""
        return [
            self.kind,
            self.key,
            self.fingerprint,
            repr(self.score),
            self.expire,
            [text for pair in self.fields for text in pair],
            [text for pair in self.slots for text in pair],
            [text for pair in self.records for text in pair],
        ]

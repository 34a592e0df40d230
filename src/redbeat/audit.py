"""Who created and who last changed an entry, when, and through what (pure).

Two hash fields of the entry hold one record each, so the trail is bounded whatever
the entry's age: ``created`` (written once, by the first write of the entry) and
``changed`` (every write of the definition). A record is
``{"at": <epoch ms>, "by": <through what>, "actor": <who>, "node": "<host>:<pid>"}``:

- ``by``: ``python-api``, ``cli``, ``web``, ``import`` or ``static-sync`` (beat writing
  the app's ``beat_schedule``); the names earlier releases wrote, kept for the readers
  that know them.
- ``actor``: the operating-system user of the process, or whoever the caller names
  (the CLI's ``--actor``, the web view's signed-in user, ``beat`` for statics).

Records written by earlier releases (no ``actor``, ``at`` in ISO 8601) still read.
"""

from __future__ import annotations

import getpass
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone

#: What ``by`` says, in the words an operator reads
CHANNELS = {"python-api": "python", "cli": "cli", "web": "web", "import": "import",
            "static-sync": "statics"}


@dataclass(frozen=True)
class Change:
    at: datetime | None
    by: str | None
    actor: str | None
    node: str | None

    @property
    def through(self) -> str | None:
        return CHANNELS.get(self.by or "", self.by)


def current_user() -> str:
    """The operating-system user this process runs as (its uid where none is named)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no passwd entry (containers)
        return f"uid {os.getuid()}"


def read(text: str | None) -> Change | None:
    """The record a field holds, or None for no field or one no release wrote (another
    program's text is shown as it is by the caller, never an error of the page)."""
    if not text:
        return None
    try:
        record = json.loads(text)
        at = record.get("at")
        moment = (datetime.fromisoformat(at) if isinstance(at, str)
                  else datetime.fromtimestamp(at / 1000, tz=timezone.utc)
                  if isinstance(at, (int, float)) and not isinstance(at, bool) else None)
    except (ValueError, TypeError, AttributeError, RecursionError, OverflowError, OSError):
        return None
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)

    def text_of(name: str) -> str | None:
        value = record.get(name)
        return None if value is None else str(value)
    return Change(moment, text_of("by"), text_of("actor"), text_of("node"))

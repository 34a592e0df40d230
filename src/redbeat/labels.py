"""Labels on entries: what they may be, how the ``labels`` field holds them, and which
entries a selector picks (pure).

Labels group entries the way a project thinks of them (a tenant, a team, a feature:
``tenant:42``, ``billing``), so an operator can list, pause or delete a group at once
and an application can keep one entry per group and task. They live in the entry's
``labels`` hash field as a JSON array of strings, so any client can set them with one
``HSET`` and celery-redbeat 2.4.2, which reads only ``definition`` and ``meta``, never
sees them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

#: At most this many labels on an entry, and this many characters in one: a label is
#: a name, and every listing that filters by label reads them all.
MOST_LABELS = 32
LONGEST_LABEL = 100


def normalized(labels: Iterable[Any] | str | None) -> tuple[str, ...]:
    """Labels as stored: distinct, sorted, each a non-empty string without control
    characters or surrounding blanks. ValueError names the bad one."""
    if labels is None:
        return ()
    if isinstance(labels, str):
        labels = [labels]  # one label, not its characters
    found = set()
    for label in labels:
        if not isinstance(label, str):
            raise ValueError(f"label {label!r} is not a string")
        text = label.strip()
        if not text or len(text) > LONGEST_LABEL or not text.isprintable():
            raise ValueError(f"label {label!r} must be 1 to {LONGEST_LABEL} printable "
                             "characters")
        found.add(text)
    if len(found) > MOST_LABELS:
        raise ValueError(f"an entry has at most {MOST_LABELS} labels, not {len(found)}")
    return tuple(sorted(found))


def to_field(labels: tuple[str, ...]) -> str | None:
    """The ``labels`` field's text, or None (no field) for an entry without labels."""
    return json.dumps(list(labels)) if labels else None


def save_field(labels: tuple[str, ...] | None) -> str | None:
    """What a save sends for the field: None keeps the stored labels (the writer named
    none), ``[]`` removes them, anything else is the field's new text."""
    return None if labels is None else (to_field(labels) or "[]")


def from_field(text: str | None) -> tuple[str, ...]:
    """The labels a ``labels`` field holds. Another program writes this field too, so a
    text that is not a JSON array of labels reads as no labels rather than failing the
    listing it appears in; :func:`parse_field` says what is wrong with it."""
    try:
        return parse_field(text)
    except ValueError:
        return ()


def parse_field(text: str | None) -> tuple[str, ...]:
    """Strict :func:`from_field`: ValueError for a field that is not a JSON array of
    labels (what the CLI and the web view report for the entry)."""
    if not text:
        return ()
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"labels field is not JSON: {exc}") from exc
    if not isinstance(value, list):
        raise ValueError("labels field must be a JSON array of strings")
    return normalized(value)


def selected(labels: tuple[str, ...], wanted: Iterable[str]) -> bool:
    """True when the entry carries every wanted label (no label wanted: every entry)."""
    return set(wanted) <= set(labels)

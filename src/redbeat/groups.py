"""Entries by label: the ones that carry some labels, and changes to all of them at once.

Labels are read where they are stored, in each entry's hash, with no index to keep in
step: a label another program writes with ``HSET`` counts at once. A selection reads
only the ``labels`` field of every member, 2,000 members per round trip, then the
entries that match, a page per round trip; a change writes them in pipelines of the
same scripts a single change runs (save.lua, remove.lua), each entry's write atomic on
its own, so a change by label to 100,000 entries is a few hundred round trips.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from celery import Celery

from . import labels as label_rules
from .entry import RedBeatSchedulerEntry
from .keys import LABELS
from .manage import EntryInfo, entry_info, run_now
from .runtime import store_for

#: Members whose labels one round trip reads
WINDOW = 2000
#: Entries read (whole) or written per round trip
PAGE = 500


def wanted_labels(labels: Iterable[str] | str) -> tuple[str, ...]:
    """The labels a selection asks for; at least one (no label would be every entry)."""
    wanted = label_rules.normalized(labels)
    if not wanted:
        raise ValueError("name at least one label")
    return wanted


def labelled_keys(app: Celery, labels: Iterable[str] | str) -> list[str]:
    """The keys of the entries that carry every one of ``labels``, in due order."""
    wanted = wanted_labels(labels)
    store = store_for(app)
    keys, start = [], 0
    while rows := store.field_window(start, start + WINDOW - 1, LABELS):
        keys += [key for key, text in rows
                 if text and label_rules.selected(label_rules.from_field(text), wanted)]
        start += WINDOW
    return keys


def labelled(app: Celery, labels: Iterable[str] | str) -> list[EntryInfo]:
    """The entries that carry every one of ``labels``, as listings show them."""
    store = store_for(app)
    keys = labelled_keys(app, labels)
    found = []
    for first in range(0, len(keys), PAGE):
        page = keys[first:first + PAGE]
        for key, (fields, score, static) in zip(page, store.view_rows(page), strict=True):
            if fields:  # deleted since the labels were read
                name = store.keys.name_of(key)
                found.append(entry_info(app, key, score, fields, {name} if static else set()))
    return found


@dataclass
class Outcome:
    """What a change by label did, by entry name."""

    changed: list[str] = field(default_factory=list)
    #: name -> why it was left alone (an entry that cannot be read cannot be rewritten)
    skipped: dict[str, str] = field(default_factory=dict)


def _readable(infos: list[EntryInfo], outcome: Outcome) -> list[RedBeatSchedulerEntry]:
    entries = []
    for info in infos:
        if info.entry is None:
            outcome.skipped[info.name] = info.error or "unreadable"
        else:
            entries.append(info.entry)
    return entries


def set_enabled(app: Celery, labels: Iterable[str] | str, enabled: bool,
                changed_by: str = "python-api", actor: str | None = None) -> Outcome:
    """Enable or disable every entry that carries ``labels`` (those already so are left
    alone)."""
    outcome = Outcome()
    entries = [entry for entry in _readable(labelled(app, labels), outcome)
               if entry.enabled != enabled]
    for entry in entries:
        entry.enabled = enabled
    store_for(app).save_many([entry.save_request(changed_by, actor) for entry in entries])
    outcome.changed = [entry.name for entry in entries]
    return outcome


def delete(app: Celery, labels: Iterable[str] | str) -> Outcome:
    """Delete every entry that carries ``labels``."""
    store = store_for(app)
    keys = labelled_keys(app, labels)
    store.delete_many([(key, store.keys.name_of(key)) for key in keys])
    return Outcome(changed=[store.keys.name_of(key) for key in keys])


def run_all_now(app: Celery, labels: Iterable[str] | str) -> Outcome:
    """Have the leader send every entry that carries ``labels`` once, now (as
    :func:`redbeat.manage.run_now` does for one)."""
    outcome = Outcome()
    for entry in _readable(labelled(app, labels), outcome):
        run_now(app, entry.name)
        outcome.changed.append(entry.name)
    return outcome


def save_singleton(entry: RedBeatSchedulerEntry, label: str,
                   changed_by: str = "python-api", actor: str | None = None) -> list[str]:
    """Save ``entry`` as the one entry of its task that carries ``label`` (which it is
    given if it lacks it): the others of the same task with that label are deleted
    right after it is saved. Returns their names.

    For "one schedule per tenant and job": ``save_singleton(entry, "tenant:42")``
    replaces the tenant's earlier entry of that task even when it had another name.
    Two processes upserting the same label and task at the same moment may both keep
    theirs; serialise such writers (one process, or a lock) where that matters."""
    (wanted,) = wanted_labels([label])
    entry.labels = label_rules.normalized([*(entry.labels or ()), wanted])
    store = store_for(entry.app)
    others = [info for info in labelled(entry.app, [wanted])
              if info.name != entry.name and info.entry is not None
              and info.entry.task == entry.task]
    store.save_many([entry.save_request(changed_by, actor)])
    store.delete_many([(info.key, info.name) for info in others])
    return [info.name for info in others]

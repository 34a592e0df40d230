"""Static entries: ``beat_schedule`` (and the entries Celery's beat adds by itself)
written into Redis, keeping each one's run history, and the statics no longer
configured deleted.

The scheduler decides when (at start-up on every node, as 2.4.2 did, and again on taking
the lead) and which entries (its ``static_entries`` hook, or a 2.4.2 subclass's
``update_from_dict``); this module does the writing: one round trip whatever the number
of statics, where the server leaves alone what is stored as configured (a restart, or a
node taking the lead after its own start-up wrote them), and one more only for statics
whose score follows from a stored run history the server cannot apply the rule to, or
recorded statics to delete. The entries and their text are made once per settings
object (``Prepared``), so taking the lead costs no Python work per static. It never
imports the scheduler.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.schedules import crontab

from . import decoder
from . import labels as label_rules
from .entry import changed_json, meta_json
from .nextrun import next_run, score_of
from .store import FRESH, StaticWrite

if TYPE_CHECKING:
    from .entry import RedBeatSchedulerEntry
    from .lock import Lease
    from .settings import RedBeatConfig
    from .store import ScheduleStore

logger = logging.getLogger("celery.beat")

#: Calls of sync_statics.lua one sync makes at most. A static whose score follows from
#: its stored run history is written only while that history is the one its score was
#: worked out from; a writer changing it between each call and the next (ticks running
#: the entry, an operator's edits) would otherwise keep the sync, and the node's
#: start-up or lead, going round for as long as it writes.
SYNC_CALLS = 4


def celery_default_entries(app: Celery, configured: dict[str, Any]) -> dict[str, Any]:
    """The entries Celery's beat adds by itself: ``celery.backend_cleanup`` when
    results expire on a backend that cannot expire them (Celery's own rule)."""
    if (
        app.conf.result_expires
        and not app.backend.supports_autoexpire
        and "celery.backend_cleanup" not in configured
    ):
        return {
            "celery.backend_cleanup": {
                "task": "celery.backend_cleanup",
                "schedule": crontab("0", "4", "*"),
                "options": {"expires": 12 * 3600},
            }
        }
    return {}


def configured(app: Celery, config: RedBeatConfig) -> dict[str, Any]:
    """``beat_schedule`` with Celery's default entries, by name."""
    return {**celery_default_entries(app, config.schedule), **config.schedule}


def built(
    specs: dict[str, Any], make: Callable[[str, Any], RedBeatSchedulerEntry], what: str
) -> dict[str, RedBeatSchedulerEntry]:
    """Each of ``specs`` (name -> beat_schedule item) made an entry by ``make``; a
    malformed one is logged (as a ``what``) and skipped, so it cannot stop beat."""
    entries = {}
    for name, spec in specs.items():
        try:
            entries[name] = make(name, spec)
        except Exception as exc:
            logger.error("beat: Skipping %s %r: %r (%r)", what, name, exc, spec)
    return entries


def static_score(
    entry: RedBeatSchedulerEntry, meta_text: str | None, score: float | None, now: datetime
) -> float:
    """The score a static is written with: by the one rule (redbeat.nextrun), from its
    stored run history; a static seen the first time counts as having run now (its meta
    is written so), so it first runs one interval from now, as in Celery."""
    try:
        meta = decoder.loads(meta_text) if meta_text else {}
        last_run_at = meta.get("last_run_at") if isinstance(meta, dict) else None
    except ValueError:
        last_run_at = None
    if not isinstance(last_run_at, datetime):
        last_run_at = None if score is not None and score > 0 else now
    return score_of(next_run(entry.schedule, entry.policy, entry.name, last_run_at, now, score))


@dataclass
class Prepared:
    """The statics as entries, and as the text each is written with (``StaticWrite``
    without a score): made once, written at start-up and again on taking the lead, made
    again when the configured ``specs`` are no longer equal to what they were made
    from (2.4.2 code assigns ``app.redbeat_conf.schedule`` and calls setup_schedule)."""

    specs: dict[str, Any]
    entries: dict[str, RedBeatSchedulerEntry]
    writes: list[StaticWrite] = field(init=False)

    def __post_init__(self) -> None:
        self.specs = snapshot(self.specs)
        self.writes = [
            StaticWrite(
                entry.key,
                name,
                entry.definition_json(),
                entry.policy.to_json(),
                label_rules.save_field(entry.labels),
            )
            for name, entry in self.entries.items()
        ]

    def made_from(self, specs: dict[str, Any]) -> bool:
        return self.specs == snapshot(specs)


def prepared(
    made: Prepared | None,
    specs: dict[str, Any],
    entries: Callable[[], dict[str, RedBeatSchedulerEntry]],
) -> Prepared:
    """``made`` when it was made from items equal to ``specs``, else the statics made
    again (``entries``: the scheduler's ``static_entries``)."""
    if made is not None and made.made_from(specs):
        return made
    return Prepared(specs, entries())


def snapshot(specs: dict[str, Any]) -> dict[str, Any]:
    """``specs`` with each item copied: an item changed in place compares unequal."""
    return {name: copy.copy(spec) for name, spec in specs.items()}


def scored(
    write: StaticWrite,
    entry: RedBeatSchedulerEntry,
    meta_text: str | None,
    score: float | None,
    now: datetime,
    basis: str | None,
) -> StaticWrite | None:
    """``write`` with the score the rule gives from what is stored (``basis``: the meta it
    follows, or FRESH); None, logged, when the schedule has no next run within bounds."""
    try:
        upcoming = static_score(entry, meta_text, score, now)
    except (ValueError, OverflowError) as exc:  # a schedule past its bounds
        logger.error("beat: Skipping static entry %r: %s", entry.name, exc)
        return None
    return dataclasses.replace(write, score=upcoming, basis=basis)


def sync(
    store: ScheduleStore,
    prepared: Prepared,
    key_of: Callable[[str], str],
    lease: Lease | None,
    now: datetime,
    fresh: bool,
) -> None:
    """Write the ``prepared`` statics (the meta only on a static seen the first time;
    ``fresh``: their first scores worked out beforehand, saving a round trip when they
    are new) and delete the recorded statics not among them (``key_of``: the entry
    class's key for a name), fenced by ``lease`` (None: unfenced). A static whose stored
    run history changed under each of SYNC_CALLS calls is left as stored, logged."""
    pairs = list(zip(prepared.writes, prepared.entries.values(), strict=True))
    if fresh:
        pairs = [(scored(write, entry, None, None, now, FRESH), entry) for write, entry in pairs]
    changed, meta = changed_json("static-sync", actor="beat"), meta_json(now, 0)
    removed: list[tuple[str, str]] = []
    whole = True  # the first call names the recorded statics no longer configured
    for _ in range(SYNC_CALLS):
        sent = [(write, entry) for write, entry in pairs if write is not None]
        reply = store.sync_statics(
            [write for write, _ in sent], changed, meta, removed, lease, whole
        )
        for _, name in removed:
            logger.info("beat: Removed static entry %r (no longer in beat_schedule)", name)
        # what the stored data decides: each score worked out from what was read, held
        # by the script only while that is still what is stored
        pairs = [
            (scored(sent[i][0], sent[i][1], stored, score, now, stored), sent[i][1])
            for i, stored, score in reply.asked
        ]
        removed = [
            (key_of(name), name) for name in reply.unrecorded if name not in prepared.entries
        ]  # one skipped above is still configured
        whole = False
        if not removed and all(write is None for write, _ in pairs):
            logger.info("beat: Synced %d static entries", len(prepared.entries))
            return
    left = [entry.name for write, entry in pairs if write is not None]
    logger.warning(
        "beat: Static entries %s changed in Redis during each of %d writes; left "
        "as stored until this node next starts or takes the lead",
        ", ".join(map(repr, left)),
        SYNC_CALLS,
    )


def sync_through(
    store: ScheduleStore,
    specs: dict[str, Any],
    key_of: Callable[[str], str],
    update_from_dict: Callable[[dict[str, Any]], None],
) -> None:
    """2.4.2's way, for a subclass that overrides ``update_from_dict`` to shape the
    statics: the configured ``specs`` go through it, one save each."""
    for name in store.static_names() - set(specs):
        store.delete(key_of(name))
        store.forget_static(name)
        logger.info("beat: Removed static entry %r (no longer in beat_schedule)", name)
    update_from_dict(specs)
    store.record_statics(specs)
    logger.info("beat: Synced %d static entries through update_from_dict", len(specs))

"""Static entries: ``beat_schedule`` (and the entries Celery's beat adds by itself)
written into Redis, keeping each one's run history, and the statics no longer
configured deleted.

The scheduler decides when (on taking the lead; at start-up on every node) and which
entries (its ``static_entries`` hook, or a 2.4.2 subclass's ``update_from_dict``); this
module does the writing, in two round trips whatever the number of statics. It never
imports the scheduler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.schedules import crontab

from . import decoder
from . import labels as label_rules
from .entry import changed_json, meta_json
from .nextrun import next_run, score_of
from .store import StaticWrite

if TYPE_CHECKING:
    from .entry import RedBeatSchedulerEntry
    from .lock import Lease
    from .settings import RedBeatConfig
    from .store import ScheduleStore

logger = logging.getLogger("celery.beat")


def celery_default_entries(app: Celery, configured: dict[str, Any]) -> dict[str, Any]:
    """The entries Celery's beat adds by itself: ``celery.backend_cleanup`` when
    results expire on a backend that cannot expire them (Celery's own rule)."""
    if (app.conf.result_expires and not app.backend.supports_autoexpire
            and "celery.backend_cleanup" not in configured):
        return {"celery.backend_cleanup": {
            "task": "celery.backend_cleanup", "schedule": crontab("0", "4", "*"),
            "options": {"expires": 12 * 3600}}}
    return {}


def configured(app: Celery, config: RedBeatConfig) -> dict[str, Any]:
    """``beat_schedule`` with Celery's default entries, by name."""
    return {**celery_default_entries(app, config.schedule), **config.schedule}


def built(specs: dict[str, Any], make: Callable[[str, Any], RedBeatSchedulerEntry],
          what: str) -> dict[str, RedBeatSchedulerEntry]:
    """Each of ``specs`` (name -> beat_schedule item) made an entry by ``make``; a
    malformed one is logged (as a ``what``) and skipped, so it cannot stop beat."""
    entries = {}
    for name, spec in specs.items():
        try:
            entries[name] = make(name, spec)
        except Exception as exc:
            logger.error("beat: Skipping %s %r: %r (%r)", what, name, exc, spec)
    return entries


def static_score(entry: RedBeatSchedulerEntry, meta_text: str | None, score: float | None,
                 now: datetime) -> float:
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


def sync(store: ScheduleStore, statics: dict[str, RedBeatSchedulerEntry],
         key_of: Callable[[str], str], lease: Lease | None, now: datetime) -> None:
    """Write ``statics`` (the meta only on a static seen the first time) and delete the
    recorded statics not among them (``key_of``: the entry class's key for a name), in
    one fenced write under ``lease`` (None: unfenced)."""
    entries = list(statics.values())
    recorded, stored = store.read_statics([entry.key for entry in entries])
    writes = []
    for entry, (meta_text, score) in zip(entries, stored, strict=True):
        try:
            upcoming = static_score(entry, meta_text, score, now)
        except (ValueError, OverflowError) as exc:  # a schedule past its bounds
            logger.error("beat: Skipping static entry %r: %s", entry.name, exc)
            continue
        writes.append(StaticWrite(
            entry.key, entry.name, entry.definition_json(), meta_json(now, 0), upcoming,
            changed_json("static-sync", actor="beat"), entry.policy.to_json(),
            label_rules.save_field(entry.labels)))
    removed = [(key_of(name), name) for name in recorded - set(statics)]
    store.write_statics(writes, removed, lease)
    for _, name in removed:
        logger.info("beat: Removed static entry %r (no longer in beat_schedule)", name)
    logger.info("beat: Synced %d static entries", len(writes))


def sync_through(store: ScheduleStore, specs: dict[str, Any], key_of: Callable[[str], str],
                 update_from_dict: Callable[[dict[str, Any]], None]) -> None:
    """2.4.2's way, for a subclass that overrides ``update_from_dict`` to shape the
    statics: the configured ``specs`` go through it, one save each."""
    for name in store.static_names() - set(specs):
        store.delete(key_of(name))
        store.forget_static(name)
        logger.info("beat: Removed static entry %r (no longer in beat_schedule)", name)
    update_from_dict(specs)
    store.record_statics(specs)
    logger.info("beat: Synced %d static entries through update_from_dict", len(specs))

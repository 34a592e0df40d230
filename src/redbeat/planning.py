"""What a tick does with a batch of due rows: a pure function of the rows and "now".

No Redis and no clock here: :func:`plan_batch` turns what tick.lua read into the
writes for commit.lua and the messages to publish, so every scheduling decision is
testable with a fixed ``now``. Rows are decoded by the entry class the caller passes
(the scheduler's ``Entry``, which a 2.4.2 subclass may replace): that class also saves
through the store, so it is handed in, never imported here.

Slots. Every run belongs to a slot: the entry's name and the time it was due. Its
Celery task id is ``<name>:<due epoch milliseconds>`` (or random, by setting), so a
slot published twice (a leader died between the broker's acceptance and the
confirmation) arrives under one id, which consumers can deduplicate.

Missed slots. When an entry is found due more than once over (beat was down, or a
failover took a while), the missed slots are coalesced into one run: the latest slot
at or before now. ``last_run_at`` becomes that slot's due time, so the next run is
the schedule's real next time and intervals do not drift by the tick's lateness.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from celery import Celery

from .batch import Op, Row, definition_sha1
from .entry_fields import InvalidEntry, meta_json
from .keys import META, MISFIRES, PARKED_SCORE, QUARANTINE, KeyLayout
from .nextrun import NextRun, following_run, from_score, next_run, score_of
from .policy import EntryPolicy, misfire_record
from .settings import ensure_conf

if TYPE_CHECKING:  # the class is the caller's (the scheduler's Entry): this module does no I/O
    from .entry import RedBeatSchedulerEntry

logger = logging.getLogger("celery.beat")


def printable(text: str) -> str:
    """Text safe to log: bytes that were not UTF-8 (kept as surrogates) shown escaped,
    so a corrupt key cannot break a log handler that writes UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def due_ms(due: datetime) -> str:
    """A slot's due time in epoch milliseconds: in its task id and its dispatch record."""
    return str(round(due.timestamp() * 1000))


def slot_task_id(name: str, due: datetime) -> str:
    return f"{name}:{due_ms(due)}"


class Claim(NamedTuple):
    """A slot this tick claims and will publish. (Tuples: a tick builds a thousand.)"""

    task_id: str
    entry: RedBeatSchedulerEntry
    due: datetime


@dataclass
class Plan:
    ops: list[Op] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    #: slots skipped for being later than their misfire grace (a metric's outcome)
    skipped: int = 0

    def earliest_score(self) -> float | None:
        """The soonest due time this plan writes: an entry whose early score was just
        corrected is due at its new score, which the fetch's next score cannot know."""
        scores = [op.score for op in self.ops if op.score > 0]
        return min(scores) if scores else None


@dataclass(frozen=True)
class TickSettings:
    """The settings a tick's plan depends on, taken from the config once per tick."""

    node: str
    deterministic_task_ids: bool = True
    at_least_once: bool = True
    #: whether claimed slots get a dispatch record in the history stream
    record_history: bool = True
    misfire_grace_time: float | None = None


def pending_message(row: Row, claim: Claim, now: datetime, node: str,
                    reason: str = "scheduled") -> str:
    """What a later tick (or the next leader) needs to publish the slot again: the
    definition as it was claimed, named by its sha1 (the text is held once in the held
    definitions hash, however many slots name it: copying a large definition into every
    held slot filled Redis during a broker outage), and the slot's due time. ``reason``
    is "scheduled", or "run-now" for a run an operator asked for (the leader publishes
    pending messages on its next tick). commit.lua writes the messages of scheduled
    slots in this same shape, from the definition it fenced the claim with;
    :func:`read_pending` reads both, and the older shape with the definition inside."""
    return json.dumps({
        "key": row.key, "definition_sha1": definition_sha1(row.definition or ""),
        "due": claim.due.timestamp(), "claimed_at": now.timestamp(), "node": node,
        "reason": reason,
    })


def quarantine_reason(reason: str, now: datetime, node: str) -> str:
    return json.dumps({"reason": reason, "at": now.isoformat(), "node": node})


def plan_row(
    app: Celery, row: Row, now: datetime, policy: TickSettings, plan: Plan,
    entry_class: type[RedBeatSchedulerEntry], keys: KeyLayout | None = None,
) -> None:
    keys = keys or ensure_conf(app).keys
    if not keys.is_entry_key(row.key):
        logger.warning("beat: %s is in the schedule but is not a key of this schedule's "
                       "entries (outside the prefix, or an internal key); removing the member "
                       "and leaving the key alone", printable(row.key))
        plan.ops.append(Op("forget", row.key))
        return
    if row.definition is None and row.meta is None and row.policy is None:
        logger.warning("beat: %s is in the schedule but is not an entry hash; removing it",
                       printable(row.key))
        plan.ops.append(Op("drop", row.key))
        return
    try:
        entry = entry_class.decode(app, row.key, row.definition, row.meta, cached=True,
                                   policy=row.policy)
    except InvalidEntry as exc:
        logger.error("beat: Quarantined %s: %s", printable(row.key), printable(exc.reason))
        reason = quarantine_reason(exc.reason, now, policy.node)
        plan.ops.append(Op("quarantine", row.key, row.fingerprint, PARKED_SCORE,
                           ((QUARANTINE, reason),)))
        return
    if not entry.enabled:
        plan.ops.append(Op("update", row.key, row.fingerprint, PARKED_SCORE))
        return
    rules = entry.policy.with_default_grace(policy.misfire_grace_time)
    run = next_run(entry.schedule, rules, entry.name, entry.last_run_at, now, row.score)
    if run is None:
        logger.info("beat: %s has no more runs; parked", entry.name)
        plan.ops.append(Op("update", row.key, row.fingerprint, PARKED_SCORE,
                           expire=int(rules.ttl or 0)))
        return
    if run.send_at > now:
        # stored early (written by celery-redbeat or by hand): correct it, send nothing
        plan.ops.append(Op("update", row.key, row.fingerprint, run.score))
        return
    _claim(row, entry, rules, run, now, policy, plan)


def _claim(row: Row, entry: RedBeatSchedulerEntry, rules: EntryPolicy, run: NextRun,
           now: datetime, policy: TickSettings, plan: Plan) -> None:
    """Claim the slots of a due entry: coalesced or one by one, minus those too late."""
    due = run.due
    slots, dropped = rules.missed(entry.schedule, due, now)
    runs, skipped = slots, []  # type: list[datetime], list[datetime]
    if rules.misfire_grace_time is not None:
        runs = []
        for slot in slots:
            send_at = run.send_at if slot == due else rules.send_time(entry.name, slot)
            (skipped if rules.too_late(send_at, now) else runs).append(slot)
    if slots[0] != due and rules.coalesce:
        logger.info("beat: %s missed slots from %s; one catch-up run for %s",
                    entry.name, due, slots[-1])
    fields = [(META, meta_json(slots[-1], entry.total_run_count + len(runs)))]
    plan.skipped += len(skipped)
    if skipped or dropped:
        logger.warning("beat: %s: %d slot(s) skipped (past the misfire grace time or the "
                       "catch-up bound)", entry.name, len(skipped) + dropped)
        misfires = misfire_record(row.misfires, len(skipped) + dropped,
                                  skipped[-1] if skipped else None)
        if misfires:
            fields.append((MISFIRES, misfires))
    claims, pending, records = [], [], []
    for slot in runs:
        task_id = slot_task_id(entry.name, slot) if policy.deterministic_task_ids \
            else str(uuid.uuid4())
        claims.append(Claim(task_id, entry, slot))
        if policy.at_least_once:
            pending.append((task_id, repr(slot.timestamp())))
        if policy.record_history:
            records.append((task_id, due_ms(slot)))
    following = following_run(entry.schedule, rules, entry.name, slots[-1])
    score = score_of(following)
    expire = int(rules.ttl or 0) if following is None else 0
    plan.ops.append(Op("update", row.key, row.fingerprint, score, tuple(fields),
                       tuple(pending), expire, tuple(records)))
    plan.claims.extend(claims)


def plan_batch(
    app: Celery, rows: list[Row], now: datetime, policy: TickSettings,
    entry_class: type[RedBeatSchedulerEntry],
) -> Plan:
    plan = Plan()
    keys = ensure_conf(app).keys
    for row in rows:
        try:
            plan_row(app, row, now, policy, plan, entry_class, keys)
        except Exception as exc:
            # Whatever an entry holds, it must not stop the others: quarantine it.
            logger.exception("beat: Quarantined %s: planning it failed", printable(row.key))
            reason = quarantine_reason(f"planning failed: {exc!r}", now, policy.node)
            plan.ops.append(Op("quarantine", row.key, row.fingerprint, PARKED_SCORE,
                           ((QUARANTINE, reason),)))
    return plan


@dataclass(frozen=True)
class PendingMessage:
    entry: RedBeatSchedulerEntry
    due: datetime
    reason: str


def read_pending(
    app: Celery, message: str, entry_class: type[RedBeatSchedulerEntry],
    held: Mapping[str, str] | None = None,
) -> PendingMessage:
    """The entry to publish from a pending message, the slot's due time and why.

    The definition is the one the slot was claimed from: looked up in ``held`` (sha1 ->
    text, from the held definitions hash) by the name the message gives it, or, in a
    record written before definitions were held once, inside the message itself. A
    record whose held definition is gone (removed by hand) cannot be sent as claimed:
    KeyError, and the caller drops it like any unreadable record."""
    fields = json.loads(message)
    if "definition" in fields:
        definition = fields["definition"]
    else:
        sha = fields["definition_sha1"]
        if held is None or sha not in held:
            raise KeyError(f"held definition {sha} is gone")
        definition = held[sha]
    entry = entry_class.decode(app, fields["key"], definition, None)
    return PendingMessage(entry, from_score(fields["due"]), fields.get("reason", "scheduled"))


def held_grace(message: PendingMessage, policy_text: str | None, default: float | None,
               now: datetime) -> float | None:
    """The misfire grace (seconds) a held slot is past at ``now``, or None when it may
    still be sent.

    The slot is judged by the grace of its entry's policy as it is at the re-send (or
    ``redbeat_misfire_grace_time`` when it has none, or is gone): the slot is sent as
    claimed, but how late is too late is the operator's current rule. Its jitter delay
    counts as for a slot claimed now. A run asked for with run-now is never too late:
    its "due" is the moment it was asked for, not a slot of the schedule."""
    if message.reason == "run-now":
        return None
    try:
        rules = EntryPolicy.from_json(policy_text)
    except Exception:  # whatever the field holds: it quarantines the entry, not its slots
        rules = EntryPolicy()
    rules = rules.with_default_grace(default)
    send_at = rules.send_time(message.entry.name, message.due)
    return rules.misfire_grace_time if rules.too_late(send_at, now) else None

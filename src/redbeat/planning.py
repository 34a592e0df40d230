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
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from celery import Celery

from .batch import Op, Row, definition_sha1
from .entry_fields import InvalidEntry, meta_json
from .keys import META, MISFIRES, PARKED_SCORE, QUARANTINE, RUN, KeyLayout
from .nextrun import NextRun, following_run, from_score, next_run, score_of, to_score
from .nexttime import count_slots, latest_slot, next_after, remembering
from .policy import COUNT_LIMIT, EntryPolicy, misfire_record
from .runs import Flight, RunRecord, flight
from .settings import DEFAULT_LOST_AFTER, ensure_conf

if TYPE_CHECKING:  # the class is the caller's (the scheduler's Entry): this module does no I/O
    from .entry import RedBeatSchedulerEntry

logger = logging.getLogger("celery.beat")


def printable(text: str) -> str:
    """Text safe to log: bytes that were not UTF-8 (kept as surrogates) shown escaped,
    so a corrupt key cannot break a log handler that writes UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def due_ms(due: datetime) -> str:
    """A slot's due time in epoch milliseconds: in its task id and its dispatch record."""
    return slot_stamps(due)[0]


@lru_cache(maxsize=1024)
def slot_stamps(due: datetime) -> tuple[str, str]:
    """A slot's due time as its task id and dispatch record write it (:func:`due_ms`)
    and as its pending record does (epoch seconds, ``repr``). Kept by due time: a
    burst's entries share their slot, and an aware datetime's timestamp costs a zone
    lookup each time."""
    seconds = due.timestamp()
    return str(round(seconds * 1000)), repr(seconds)


def slot_task_id(name: str, slot_ms: str) -> str:
    """The task id of the entry ``name``'s slot due at ``slot_ms`` (its :func:`due_ms`):
    the same on every node that claims the slot."""
    return f"{name}:{slot_ms}"


class Claim(NamedTuple):
    """A slot this tick claims and will publish. (Tuples: a tick builds a thousand.)"""

    task_id: str
    entry: RedBeatSchedulerEntry
    due: datetime


@dataclass
class Plan:
    ops: list[Op] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    #: slots skipped for being later than their misfire grace, or for overlapping a run
    #: still going (a metric's outcome)
    skipped: int = 0
    #: runs given up on (silent past their bound): (entry key, the outcome to record)
    lost: list[tuple[str, dict[str, object]]] = field(default_factory=list)

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
    #: seconds a silent run holds an entry that waits for its runs (redbeat_lost_after)
    lost_after: float = DEFAULT_LOST_AFTER


def pending_message(
    row: Row, claim: Claim, now: datetime, node: str, reason: str = "scheduled"
) -> str:
    """What a later tick (or the next leader) needs to publish the slot again: the
    definition as it was claimed, named by its sha1 (the text is held once in the held
    definitions hash, however many slots name it: copying a large definition into every
    held slot filled Redis during a broker outage), and the slot's due time. ``reason``
    is "scheduled", or "run-now" for a run an operator asked for (the leader publishes
    pending messages on its next tick). commit.lua writes the messages of scheduled
    slots in this same shape, from the definition it fenced the claim with;
    :func:`read_pending` reads both, and the older shape with the definition inside."""
    return json.dumps(
        {
            "key": row.key,
            "definition_sha1": definition_sha1(row.definition or ""),
            "due": claim.due.timestamp(),
            "claimed_at": now.timestamp(),
            "node": node,
            "reason": reason,
        }
    )


def _look_again(row: Row, entry: RedBeatSchedulerEntry, now: datetime, plan: Plan) -> None:
    """A disabled entry read as due: nothing is sent, and it is scored at its schedule's
    next time after now (parked only when there is none). It keeps a real due score, as
    in 2.4.2, so an entry enabled by rewriting its ``definition`` in place (no ``ZADD``,
    as code written for 2.4.2 does) is read again by then and runs by its own rule
    (catching up by its policy); read once per slot, not on every tick."""
    following = next_after(entry.schedule, now)
    plan.ops.append(Op("update", row.key, row.fingerprint, to_score(following)))


def quarantine_reason(reason: str, now: datetime, node: str) -> str:
    return json.dumps({"reason": reason, "at": now.isoformat(), "node": node})


def plan_row(
    app: Celery,
    row: Row,
    now: datetime,
    policy: TickSettings,
    plan: Plan,
    entry_class: type[RedBeatSchedulerEntry],
    keys: KeyLayout | None = None,
    timings: Timings | None = None,
) -> None:
    keys = keys or ensure_conf(app).keys
    if not keys.is_entry_key(row.key):
        logger.warning(
            "beat: %s is in the schedule but is not a key of this schedule's "
            "entries (outside the prefix, or an internal key); removing the member "
            "and leaving the key alone",
            printable(row.key),
        )
        plan.ops.append(Op("forget", row.key))
        return
    if row.definition is None and row.meta is None and row.policy is None:
        logger.warning(
            "beat: %s is in the schedule but is not an entry hash; removing it", printable(row.key)
        )
        plan.ops.append(Op("drop", row.key))
        return
    try:
        entry = entry_class.decode(
            app, row.key, row.definition, row.meta, cached=True, policy=row.policy
        )
    except InvalidEntry as exc:
        logger.error("beat: Quarantined %s: %s", printable(row.key), printable(exc.reason))
        reason = quarantine_reason(exc.reason, now, policy.node)
        plan.ops.append(
            Op("quarantine", row.key, row.fingerprint, PARKED_SCORE, ((QUARANTINE, reason),))
        )
        return
    if not entry.enabled:
        _look_again(row, entry, now, plan)
        return
    rules = entry.policy.with_default_grace(policy.misfire_grace_time)
    timing = timings.get(entry, rules, row.score, now) if timings is not None else None
    run = (
        timing.run
        if timing is not None
        else next_run(entry.schedule, rules, entry.name, entry.last_run_at, now, row.score)
    )
    if run is None:
        logger.info("beat: %s has no more runs; parked", entry.name)
        plan.ops.append(
            Op("update", row.key, row.fingerprint, PARKED_SCORE, expire=int(rules.ttl or 0))
        )
        return
    if row.watched and rules.waits_for_runs:
        _gate(row, entry, rules, run, now, policy, plan)
        return
    if run.send_at > now:
        # stored early (written by celery-redbeat or by hand): correct it, send nothing
        plan.ops.append(Op("update", row.key, row.fingerprint, run.score))
        return
    _claim(
        row,
        entry,
        rules,
        run,
        now,
        policy,
        plan,
        catch_up=timing.catch_up if timing is not None else None,
    )


class CatchUp(NamedTuple):
    """What a due slot comes to at "now" (lists shared between entries: never mutated)."""

    slots: list[datetime]  # the slots to run now, oldest first (one when coalescing)
    dropped: int  # older ones past the catch-up bound
    runs: list[datetime]  # of ``slots``, those within the misfire grace
    skipped: list[datetime]  # of ``slots``, those past it
    following: NextRun | None  # the slot after the latest
    following_score: float  # its score (parked when there is none)


def due_slots(schedule: Any, rules: EntryPolicy, name: str, run: NextRun, now: datetime) -> CatchUp:
    due = run.due
    slots, dropped = rules.missed(schedule, due, now)
    runs, skipped = slots, []  # type: list[datetime], list[datetime]
    if rules.misfire_grace_time is not None:
        runs = []
        for slot in slots:
            send_at = run.send_at if slot == due else rules.send_time(name, slot)
            (skipped if rules.too_late(send_at, now) else runs).append(slot)
    following = following_run(schedule, rules, name, slots[-1])
    return CatchUp(slots, dropped, runs, skipped, following, score_of(following))


class Timing(NamedTuple):
    run: NextRun | None
    catch_up: CatchUp | None  # for a run due by "now"


class Timings:
    """The next run and catch-up of entries planned in one batch, worked out once for
    entries that share them: a burst is hundreds of entries with one schedule object
    (the definition cache shares equal ones), one policy object, one last run and so one
    next run, and each entry's own walk through the rule cost as much as the rest of
    its planning. What the rule answers depends on the entry's name only through its
    jitter, so an entry with a jitter is worked out on its own. The entries keyed are
    held, so the objects whose ids make a key outlive the batch's use of it."""

    def __init__(self) -> None:
        self.known: dict[tuple[Any, ...], tuple[Any, EntryPolicy, Timing]] = {}

    def get(
        self, entry: RedBeatSchedulerEntry, rules: EntryPolicy, score: float | None, now: datetime
    ) -> Timing:
        schedule, stored, last = entry.schedule, entry.policy, entry.last_run_at
        if rules.jitter:
            return self._work_out(entry, rules, score, now)
        # ``rules`` is the stored policy with the batch's default grace (one per batch);
        # the score is read only for an entry that never ran (nextrun.next_run)
        key = (id(schedule), id(stored), last, score if last is None else None)
        known = self.known.get(key)
        if known is not None and known[0] is schedule and known[1] is stored:
            return known[2]
        timing = self._work_out(entry, rules, score, now)
        self.known[key] = (schedule, stored, timing)
        return timing

    @staticmethod
    def _work_out(
        entry: RedBeatSchedulerEntry, rules: EntryPolicy, score: float | None, now: datetime
    ) -> Timing:
        run = next_run(entry.schedule, rules, entry.name, entry.last_run_at, now, score)
        due = run is not None and run.send_at <= now
        return Timing(
            run,
            due_slots(entry.schedule, rules, entry.name, run, now)
            if due and run is not None
            else None,
        )


def _claim(
    row: Row,
    entry: RedBeatSchedulerEntry,
    rules: EntryPolicy,
    run: NextRun,
    now: datetime,
    policy: TickSettings,
    plan: Plan,
    fields: list[tuple[str, str]] | None = None,
    catch_up: CatchUp | None = None,
) -> None:
    """Claim the slots of a due entry: coalesced or one by one, minus those too late.
    ``fields``: other fields to write with them (a watched entry's lost run);
    ``catch_up``: what its slots come to, when known already."""
    due = run.due
    if catch_up is None:
        catch_up = due_slots(entry.schedule, rules, entry.name, run, now)
    slots, dropped, runs, skipped, following, following_score = catch_up
    if slots[0] != due and rules.coalesce:
        logger.info(
            "beat: %s missed slots from %s; one catch-up run for %s", entry.name, due, slots[-1]
        )
    overlapping = 0
    if row.watched and rules.overlap != "allow" and len(runs) > 1:
        # one run at a time: the catch-up's older slots would overlap its latest
        overlapping, runs = len(runs) - 1, runs[-1:]
    fields = [*(fields or ()), (META, meta_json(slots[-1], entry.total_run_count + len(runs)))]
    plan.skipped += len(skipped)
    if skipped or dropped:
        logger.warning(
            "beat: %s: %d slot(s) skipped (past the misfire grace time or the catch-up bound)",
            entry.name,
            len(skipped) + dropped,
        )
        _count_misfires(row, fields, len(skipped) + dropped, skipped[-1] if skipped else None)
    if overlapping:
        _count_misfires(row, fields, overlapping, runs[0], "overlap")
    _send(
        row,
        entry,
        rules,
        runs,
        fields,
        following_score,
        int(rules.ttl or 0) if following is None else 0,
        now,
        policy,
        plan,
    )


def _count_misfires(
    row: Row,
    fields: list[tuple[str, str]],
    skipped: int,
    last: datetime | None,
    reason: str = "late",
) -> None:
    """Add ``skipped`` slots to the misfires record this op writes (or the stored one)."""
    previous = next((value for name, value in reversed(fields) if name == MISFIRES), row.misfires)
    record = misfire_record(previous, skipped, last, reason)
    if record:
        fields[:] = [item for item in fields if item[0] != MISFIRES]
        fields.append((MISFIRES, record))


def _send(
    row: Row,
    entry: RedBeatSchedulerEntry,
    rules: EntryPolicy,
    runs: list[datetime],
    fields: list[tuple[str, str]],
    score: float,
    expire: int,
    now: datetime,
    policy: TickSettings,
    plan: Plan,
) -> None:
    """The op that claims ``runs`` (pending, history) with ``fields``, and their claims.
    A watched entry's latest run becomes its claimed slot, queued."""
    claims, pending, records = [], [], []
    for slot in runs:
        slot_ms, slot_seconds = slot_stamps(slot)
        task_id = (
            slot_task_id(entry.name, slot_ms)
            if policy.deterministic_task_ids
            else str(uuid.uuid4())
        )
        claims.append(Claim(task_id, entry, slot))
        if policy.at_least_once:
            pending.append((task_id, slot_seconds))
        if policy.record_history:
            records.append((task_id, slot_ms))
    if row.watched and claims:
        last = claims[-1]
        queued = RunRecord(
            last.task_id,
            int(due_ms(last.due)),
            "queued",
            now.timestamp(),
            wake=rules.relative_to == "execution",
        )
        fields = [item for item in fields if item[0] != RUN] + [(RUN, queued.to_json())]
    plan.ops.append(
        Op(
            "update",
            row.key,
            row.fingerprint,
            score,
            tuple(fields),
            tuple(pending),
            expire,
            tuple(records),
        )
    )
    plan.claims.extend(claims)


# -- entries whose policy waits for their runs (docs/outcomes.md) ------------------------


def _gate(
    row: Row,
    entry: RedBeatSchedulerEntry,
    rules: EntryPolicy,
    run: NextRun,
    now: datetime,
    policy: TickSettings,
    plan: Plan,
) -> None:
    """A due (or woken) entry whose policy waits for its runs: decided from its latest
    run as the workers reported it (``row.run``) and the bound on a silent one."""
    state = flight(RunRecord.parse(row.run), now.timestamp(), rules.lost_after or policy.lost_after)
    fields: list[tuple[str, str]] = []
    if state.lost is not None:
        lost = state.lost
        logger.warning(
            "beat: %s: run %s %s for %.0f s: counted as lost, the entry goes on%s",
            entry.name,
            lost.task_id,
            "was never reported"
            if state.record and state.record.state == "queued"
            else "has not reported",
            rules.lost_after or policy.lost_after,
            " (do the workers run with redbeat_worker_outcomes?)"
            if state.record and state.record.state == "queued"
            else "",
        )
        plan.lost.append(
            (
                row.key,
                {
                    "task_id": lost.task_id,
                    "due_ms": lost.due_ms,
                    "state": "lost",
                    "started": lost.started,
                    "finished": lost.finished,
                    "worker": lost.worker,
                },
            )
        )
        fields.append((RUN, lost.to_json()))
    if rules.relative_to == "execution":
        _after_execution(row, entry, rules, run, state, now, policy, plan, fields)
    elif state.busy:
        _while_busy(row, entry, rules, run, state, now, plan)
    elif state.record is not None and state.record.buffered_ms is not None:
        _release_buffered(
            row, entry, rules, run, state.record.buffered_ms, now, policy, plan, fields
        )
    elif run.send_at > now:
        plan.ops.append(Op("update", row.key, row.fingerprint, run.score, tuple(fields)))
    else:
        _claim(row, entry, rules, run, now, policy, plan, fields)


def _after_execution(
    row: Row,
    entry: RedBeatSchedulerEntry,
    rules: EntryPolicy,
    run: NextRun,
    state: Flight,
    now: datetime,
    policy: TickSettings,
    plan: Plan,
    fields: list[tuple[str, str]],
) -> None:
    """``relative_to: "execution"``: the next run is the schedule's next time after the
    previous run ended (an interval after it, for an interval). While a run goes on, the
    entry waits until its bound (its worker wakes it when it ends)."""
    if state.busy:
        assert state.release_at is not None
        plan.ops.append(
            Op("update", row.key, row.fingerprint, to_score(from_score(state.release_at)))
        )
        return
    due: datetime | None = run.due
    ended = state.finished_at
    if ended is not None and entry.last_run_at is not None:
        # from the end rounded up to the second (an interval of whole seconds counts its
        # runs from a whole second): never less than an interval after it
        due = rules.window(entry.schedule, next_after(entry.schedule, from_score(math.ceil(ended))))
    if due is None:
        logger.info("beat: %s has no more runs; parked", entry.name)
        plan.ops.append(
            Op(
                "update",
                row.key,
                row.fingerprint,
                PARKED_SCORE,
                tuple(fields),
                expire=int(rules.ttl or 0),
            )
        )
        return
    if due > now:
        plan.ops.append(Op("update", row.key, row.fingerprint, to_score(due), tuple(fields)))
        return
    fields.append((META, meta_json(due, entry.total_run_count + 1)))
    release = now + timedelta(seconds=rules.lost_after or policy.lost_after)
    _send(row, entry, rules, [due], fields, to_score(release), 0, now, policy, plan)


def _while_busy(
    row: Row,
    entry: RedBeatSchedulerEntry,
    rules: EntryPolicy,
    run: NextRun,
    state: Flight,
    now: datetime,
    plan: Plan,
) -> None:
    """A slot due while the previous run goes on: skipped (``skip``), or the latest one
    waits for it (``buffer_one``) with the entry parked until the run's bound (its
    worker wakes it when it ends). Slots after a buffered one are counted when it goes."""
    assert state.record is not None and state.release_at is not None
    release = to_score(from_score(state.release_at))
    if run.send_at > now or state.record.buffered_ms is not None:
        score = release if state.record.buffered_ms is not None else run.score
        plan.ops.append(Op("update", row.key, row.fingerprint, score))
        return
    # every slot from the first due one to the latest: none of them runs now
    latest = latest_slot(entry.schedule, run.due, now)
    due_now = count_slots(entry.schedule, run.due, latest, COUNT_LIMIT)
    fields = [(META, meta_json(latest, entry.total_run_count))]
    if rules.overlap == "skip":
        logger.info(
            "beat: %s: %d slot(s) to %s skipped, the previous run (%s) is still %s",
            entry.name,
            due_now,
            latest,
            state.record.task_id,
            state.record.state,
        )
        _count_misfires(row, fields, due_now, latest, "overlap")
        plan.skipped += due_now
        following = following_run(entry.schedule, rules, entry.name, latest)
        plan.ops.append(
            Op(
                "update",
                row.key,
                row.fingerprint,
                score_of(following),
                tuple(fields),
                expire=int(rules.ttl or 0) if following is None else 0,
            )
        )
        return
    if due_now > 1:  # the latest one waits
        _count_misfires(row, fields, due_now - 1, None, "overlap")
        plan.skipped += due_now - 1
    waiting = replace(state.record, buffered_ms=int(due_ms(latest)), wake=True)
    fields.append((RUN, waiting.to_json()))
    plan.ops.append(Op("update", row.key, row.fingerprint, release, tuple(fields)))


def _release_buffered(
    row: Row,
    entry: RedBeatSchedulerEntry,
    rules: EntryPolicy,
    run: NextRun,
    buffered_ms: int,
    now: datetime,
    policy: TickSettings,
    plan: Plan,
    fields: list[tuple[str, str]],
) -> None:
    """The run a buffered slot waited for has ended: the slot goes now, and the slots
    that came due meanwhile are skipped (at most one waits)."""
    buffered = from_score(buffered_ms / 1000)
    last = buffered
    if run.send_at <= now:
        last = latest_slot(entry.schedule, run.due, now)
        skipped = count_slots(entry.schedule, run.due, last, COUNT_LIMIT)
        _count_misfires(row, fields, skipped, last, "overlap")
        plan.skipped += skipped
    fields.append((META, meta_json(last, entry.total_run_count + 1)))
    following = following_run(entry.schedule, rules, entry.name, last)
    _send(
        row,
        entry,
        rules,
        [buffered],
        fields,
        score_of(following),
        int(rules.ttl or 0) if following is None else 0,
        now,
        policy,
        plan,
    )


def plan_batch(
    app: Celery,
    rows: list[Row],
    now: datetime,
    policy: TickSettings,
    entry_class: type[RedBeatSchedulerEntry],
) -> Plan:
    plan = Plan()
    keys = ensure_conf(app).keys
    timings = Timings()
    with remembering():  # entries on one schedule, due at one slot: worked out once
        for row in rows:
            try:
                plan_row(app, row, now, policy, plan, entry_class, keys, timings)
            except Exception as exc:
                # Whatever an entry holds, it must not stop the others: quarantine it.
                logger.exception("beat: Quarantined %s: planning it failed", printable(row.key))
                reason = quarantine_reason(f"planning failed: {exc!r}", now, policy.node)
                plan.ops.append(
                    Op(
                        "quarantine",
                        row.key,
                        row.fingerprint,
                        PARKED_SCORE,
                        ((QUARANTINE, reason),),
                    )
                )
    return plan


@dataclass(frozen=True)
class PendingMessage:
    entry: RedBeatSchedulerEntry
    due: datetime
    reason: str


def read_pending(
    app: Celery,
    message: str,
    entry_class: type[RedBeatSchedulerEntry],
    held: Mapping[str, str] | None = None,
) -> PendingMessage:
    """The entry to publish from a pending message, the slot's due time and why.

    The definition is the one the slot was claimed from: looked up in ``held`` (sha1 ->
    text, from the held definitions) by the name the message gives it, or, in a
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


def held_grace(
    message: PendingMessage, policy_text: str | None, default: float | None, now: datetime
) -> float | None:
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


class Backlog(NamedTuple):
    """What the held slots a tick re-sent leave for the slots it claims itself: a claim
    that waits stays held (commit.lua recorded it pending, like any claim the broker did
    not take) and goes from a later tick, in due order behind its entry's older slots."""

    #: every claim waits
    every: bool
    #: the entries (keys) whose claims wait, when not every one does
    entries: frozenset[str]
    #: the next batch of held slots at once: this one was full and made room
    again: bool

    def waits(self, key: str) -> bool:
        """Whether the claims of the entry with key ``key`` wait."""
        return self.every or key in self.entries


#: Nothing held: every claim goes.
NO_BACKLOG = Backlog(False, frozenset(), False)


def held_backlog(
    read: Sequence[tuple[str, bool]], broker_failed: bool, batch_size: int, at_least_once: bool
) -> Backlog:
    """Which of a tick's claims may follow the held slots it read: ``read`` gives, for
    each (at most ``batch_size`` records, the oldest due), its entry's key ('' for a
    record that could not be read) and whether it went (sent, or dropped);
    ``broker_failed``: some did not go because the broker failed as a whole (unreachable,
    hung, refusing every slot), not because it refuses their entries' own slots for now
    (their queue: a RabbitMQ queue full under reject-publish, a key of another type
    where a Redis broker keeps the queue).

    What must hold is per entry: its slots reach the broker in the order they were due.
    Its claims are due after its held slots, so they wait while it has some left:

    - every held slot was read (the batch was not full): the claims of the entries with
      a slot that did not go wait; the others have none left, and go;
    - a full batch of which some went: more may be held, unread, of any entry: every
      claim waits, and the next batch comes at once (progress: some went; at a tick's
      pace a steady load would keep the backlog, and every slot's delay, from one tick
      to the next);
    - a full batch of which none went (the broker answering, refusing those entries'
      slots): their entries' claims wait, the others go;
    - the broker failed as a whole: every claim waits (they would not fare better).

    So a broker refusing one queue stops that queue's entries only. Before, any held
    slot that did not go made every claim wait: one refused queue, held until its
    misfire grace (by default forever), stopped the whole schedule. What is given up:
    while the slots of a full batch are all refused, an entry whose held slots lie
    beyond it (none read) is not known to have any, so its claims go, and may reach the
    broker before those older slots, which are read once the slots before them go or
    are dropped past their grace (they wait for them; claims after a broker outage,
    held in the same sorted set, are the usual such slots).

    The bug that made claims wait at all: after a Sentinel failover 2,458 slots were
    held, a tick re-sent the oldest 1,000 and then its own claims, and 1,458 older slots
    were still held when the test stopped beat (a gap in 750 entries' runs).
    At-most-once holds no claim, so its claims go (the slots it holds are asked-for
    run-nows)."""
    full = len(read) >= batch_size
    left = frozenset(key for key, went in read if not went)
    if not at_least_once:
        return Backlog(False, frozenset(), full and not left)
    if broker_failed:
        return Backlog(True, frozenset(), False)
    if full and any(went for _, went in read):
        return Backlog(True, frozenset(), True)
    return Backlog(False, left, False)

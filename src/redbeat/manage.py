"""Reading and changing entries from Python: what operators and the CLI use.

Nothing here runs in the tick. Listings page through the schedule in pipelines, so
listing a million entries never asks Redis for everything at once. Changes go through
``RedBeatSchedulerEntry.save()`` (which records who changed the entry) or through the
held slots (run-now), so the leader applies them with its usual fencing.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from celery import Celery

from . import audit, export_file, legacy
from . import labels as label_rules
from .entry import (
    EntryNotFound,
    InvalidEntry,
    RedBeatSchedulerEntry,
    changed_json,
    node_name,
)
from .failures import read_failures
from .heartbeat import heartbeats
from .keys import (
    CHANGED,
    CREATED,
    DEFINITION,
    LABELS,
    LEGACY_HISTORY_PREFIX,
    META,
    PARKED_SCORE,
    POLICY,
    QUARANTINE,
    RUN,
    KeyLayout,
)
from .memory_policy import evicting, refusing_writes
from .nextrun import score_time
from .planning import Claim, pending_message
from .runs import RunRecord, summary
from .runtime import store_for
from .settings import ensure_conf
from .store import HistoryUnreadable, Row, ScheduleStore

PAGE = 500
#: Records of the history stream ``get_entry`` looks through at most for one entry's
#: dispatches (newest first; the whole stream at its default length).
HISTORY_SCAN = 100_000


#: Where an entry stands, as stored.
EntryState = Literal["quarantined", "disabled", "unscheduled", "finished", "enabled"]
#: What list/show/status say: the stored state, or ``failing`` for an enabled entry whose
#: last dispatch was refused.
ShownState = Literal["quarantined", "disabled", "unscheduled", "finished", "enabled",
                     "failing"]


@dataclass
class EntryInfo:
    """One entry as an operator sees it, whether or not the scheduler can run it."""

    name: str
    key: str
    score: float | None
    fields: dict[str, str]
    entry: RedBeatSchedulerEntry | None = None
    error: str | None = None
    static: bool = False
    #: dispatch records, newest first: ``task_id``, ``due`` and ``claimed_at`` (ISO
    #: 8601), ``node``. Read by :func:`get_entry` only (from the fleet's history stream
    #: and an older release's ``history:<i>`` fields); listings leave it empty.
    history: list[dict[str, Any]] = field(default_factory=list)
    #: why the history stream could not be read (get_entry only; the entry is still shown)
    history_error: str | None = None
    #: run outcomes the workers reported (redbeat_worker_outcomes), newest first, as
    #: :func:`outcome_record` gives them; get_entry only (listings have :attr:`run`)
    outcomes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run(self) -> RunRecord | None:
        """The entry's latest run as the workers (or beat) recorded it; None when none."""
        return RunRecord.parse(self.fields.get(RUN))

    @property
    def quarantine(self) -> str | None:
        raw = self.fields.get(QUARANTINE)
        if not raw:
            return None
        try:
            return str(json.loads(raw).get("reason"))
        except (ValueError, AttributeError, RecursionError):
            return raw

    @property
    def labels(self) -> tuple[str, ...]:
        """The entry's labels (none where the field is not a JSON array of labels)."""
        return label_rules.from_field(self.fields.get(LABELS))

    @property
    def created(self) -> audit.Change | None:
        """Who first wrote the entry, when and through what (None: written by a release
        before these records, or by another program)."""
        return audit.read(self.fields.get(CREATED))

    @property
    def changed(self) -> audit.Change | None:
        """Who last wrote its definition, when and through what."""
        return audit.read(self.fields.get(CHANGED))

    @property
    def next_run(self) -> datetime | None:
        return score_time(self.score)  # None: parked (-1) or hand-written "due now" (0)

    @property
    def state(self) -> EntryState:
        if self.quarantine or self.error:
            return "quarantined"
        if self.entry is not None and not self.entry.enabled:
            return "disabled"
        if self.score is None:
            return "unscheduled"
        if self.score < 0:  # parked: the tick reads no member below 0
            return "finished"
        return "enabled"

    @property
    def shown_state(self) -> ShownState:
        """:attr:`state`, or ``failing`` for an enabled entry whose last dispatch Celery
        or the broker refused (no slot has gone out since): such a run was claimed and
        counted, and must not pass for a success."""
        failures = read_failures(self.fields)
        if (self.state == "enabled" and failures is not None and self.entry is not None
                and failures.failing_since(self.entry.last_run_at)):
            return "failing"
        return self.state


def entry_info(app: Celery, key: str, score: float | None, fields: dict[str, str],
               statics: set[str]) -> EntryInfo:
    """An entry as read (``fields``: its hash, whole or in part), decoded if it can be."""
    config = ensure_conf(app)
    name = config.keys.name_of(key)
    info = EntryInfo(name, key, score, fields, static=name in statics)
    try:
        info.entry = RedBeatSchedulerEntry.decode(app, key, fields.get(DEFINITION),
                                                  fields.get(META), policy=fields.get(POLICY))
    except InvalidEntry as exc:
        info.error = exc.reason
    else:
        info.entry.labels = info.labels
    return info


def _iso(epoch_ms: str) -> str:
    """Epoch milliseconds as ISO 8601 (text that is not a time is returned as it is)."""
    try:
        return datetime.fromtimestamp(int(epoch_ms) / 1000, tz=timezone.utc).isoformat()
    except (ValueError, OverflowError, OSError):
        return epoch_ms


def stream_record(record_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """A record of the history stream as operators see it: times in ISO 8601, the claim
    time being the record's id (when the commit that claimed the slot ran)."""
    return {"task_id": fields.get("task_id"), "due": _iso(fields.get("due_ms") or ""),
            "claimed_at": _iso(record_id.partition("-")[0]), "node": fields.get("node")}


def outcome_record(record_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """A record of the outcomes stream as operators see it: ``task_id``, ``due`` (ISO
    8601), ``outcome``, ``started``/``finished`` (ISO 8601 or None), ``runtime``
    (seconds or None), ``worker``, ``error``, ``at`` (when it was recorded)."""
    def moment(name: str) -> str | None:
        try:
            return datetime.fromtimestamp(float(fields[name]), tz=timezone.utc).isoformat()
        except (KeyError, ValueError, OverflowError, OSError):
            return None

    try:
        runtime: float | None = float(fields["runtime"])
    except (KeyError, ValueError):
        runtime = None
    return {"task_id": fields.get("task_id"), "due": _iso(fields.get("due_ms") or ""),
            "outcome": fields.get("outcome"), "started": moment("started"),
            "finished": moment("finished"), "runtime": runtime,
            "worker": fields.get("worker"), "error": fields.get("error"),
            "at": _iso(record_id.partition("-")[0])}


def run_outcomes(app: Celery, name: str, count: int = 10) -> dict[str, Any]:
    """What the workers reported about an entry's runs, for a page or a program (the web
    view's entry page calls it): ``latest`` (the latest run: its ``state``,
    ``summary`` in words, and the fields of :class:`redbeat.runs.RunRecord`, or None),
    ``recent`` (up to ``count`` outcome records, newest first, see
    :func:`outcome_record`), ``failed_in_a_row`` and ``error`` (why the outcomes could
    not be read, or None). EntryNotFound when there is no such entry."""
    info = _read_entry(app, name)
    store = store_for(app)
    config = ensure_conf(app)
    error = None
    try:
        recent = [outcome_record(record_id, record)
                  for record_id, record in store.outcomes(info.key, count, HISTORY_SCAN)]
    except HistoryUnreadable as exc:
        recent, error = [], f"outcomes stream unreadable: {exc}"
    run = info.run
    latest = None
    if run is not None:
        lost_after = (info.entry.policy.lost_after if info.entry is not None else None) \
            or config.lost_after
        latest = {**asdict(run), "summary": summary(run, time.time(), lost_after)}
    failed = dict(store.failing_runs(1)).get(info.key, 0)
    return {"latest": latest, "recent": recent, "failed_in_a_row": failed, "error": error}


def legacy_history(fields: dict[str, str]) -> list[dict[str, Any]]:
    """The dispatch records an older release kept in the entry's hash, one per
    ``history:<i>`` field (a record that is not JSON is skipped: history is advisory)."""
    records = []
    for name, text in fields.items():
        if not name.startswith(LEGACY_HISTORY_PREFIX):
            continue
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def newest_first(records: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """At most ``limit`` records, highest due time first (then latest claim)."""
    records = sorted(records, key=lambda record: (str(record.get("due")),
                                                  str(record.get("claimed_at"))), reverse=True)
    return records[:max(limit, 0)]


def iter_entries(app: Celery, page: int = PAGE) -> Iterator[EntryInfo]:
    """Every entry in the schedule, in due order, parked and quarantined ones included."""
    store = store_for(app)
    statics = store.static_names()
    start = 0
    while True:
        rows = store.page(start, page)
        if not rows:
            return
        for key, score, fields in rows:
            if not fields and score == PARKED_SCORE:
                continue  # a finished entry whose ttl ran out; the leader's sweep drops it
            yield entry_info(app, key, score, fields, statics)
        start += page


def list_entries(app: Celery) -> list[EntryInfo]:
    return list(iter_entries(app))


def _read_entry(app: Celery, name: str) -> EntryInfo:
    """One entry by name, without its history (one round trip)."""
    key = ensure_conf(app).keys.entry(name)
    fields, score, static = store_for(app).entry_record(key, name)
    if not fields:
        raise EntryNotFound(name)
    return entry_info(app, key, score, fields, {name} if static else set())


def get_entry(app: Celery, name: str) -> EntryInfo:
    """One entry by name; EntryNotFound (a KeyError) when there is no such entry."""
    config = ensure_conf(app)
    info = _read_entry(app, name)
    store = store_for(app)
    key = info.key
    want = config.history_length
    try:
        found = [stream_record(record_id, record) for record_id, record
                 in store.history(key, want, HISTORY_SCAN)] if want > 0 else []
    except HistoryUnreadable as exc:
        found, info.history_error = [], f"history stream unreadable: {exc}"
    info.history = newest_first(found + legacy_history(info.fields), want)
    try:
        info.outcomes = [outcome_record(record_id, record) for record_id, record
                         in store.outcomes(key, want, HISTORY_SCAN)] if want > 0 else []
    except HistoryUnreadable:
        info.outcomes = []  # advisory, like the history
    return info


def _loaded(app: Celery, name: str) -> RedBeatSchedulerEntry:
    """The entry to change (its history is not needed for that)."""
    info = _read_entry(app, name)
    if info.entry is None:
        raise InvalidEntry(info.key, info.error or "unreadable")
    return info.entry


def set_enabled(app: Celery, name: str, enabled: bool, changed_by: str = "python-api",
                actor: str | None = None) -> None:
    entry = _loaded(app, name)
    entry.enabled = enabled
    entry.save(changed_by=changed_by, actor=actor)


#: What :func:`edit_entry` may change; the rest (state, run count, last run) stays.
EDITABLE = frozenset({"task", "schedule", "args", "kwargs", "options", "policy", "labels"})


def edit_entry(app: Celery, name: str, changed_by: str = "python-api",
               actor: str | None = None, **changes: Any) -> RedBeatSchedulerEntry:
    """Change some fields of an entry in place (``EDITABLE``), validated as a new entry
    is (a bad schedule or policy raises ValueError and nothing is written); whether it
    is enabled, its run count and its last run stay, so its next run follows from its
    stored last run under the new schedule."""
    unknown = set(changes) - EDITABLE
    if unknown:
        raise ValueError(f"cannot edit {', '.join(sorted(unknown))}")
    old = _loaded(app, name)
    entry = RedBeatSchedulerEntry(
        name, changes.get("task", old.task), changes.get("schedule", old.schedule),
        args=changes.get("args", old.args), kwargs=changes.get("kwargs", old.kwargs),
        options=changes.get("options", old.options), enabled=old.enabled,
        last_run_at=old.last_run_at, total_run_count=old.total_run_count, app=app,
        policy=changes.get("policy", old.policy), labels=changes.get("labels", old.labels))
    entry.save(changed_by=changed_by, actor=actor)
    return entry


@dataclass
class Release:
    """What :func:`release_quarantined` did, by name."""

    #: quarantined entries saved again: the leader schedules them at its next tick
    released: list[str] = field(default_factory=list)
    #: quarantined entries left so, with why (their own definition still cannot be read,
    #: or saving it failed)
    kept: list[tuple[str, str]] = field(default_factory=list)


def quarantined_entries(app: Celery, page: int = PAGE) -> Iterator[EntryInfo]:
    """Every quarantined entry: only the parked band of the schedule is read (quarantine
    parks an entry), ``page`` members with their hashes per round trip."""
    store = store_for(app)
    statics = store.static_names()
    start = 0
    while members := store.members(start, page, parked=True):
        for key, score, fields in store.with_hashes(members):
            if fields:
                info = entry_info(app, key, score, fields, statics)
                if info.state == "quarantined":
                    yield info
        start += len(members)


def release_quarantined(app: Celery, names: Iterable[str] | None = None,
                        name_matches: Callable[[str], bool] | None = None,
                        dry_run: bool = False, changed_by: str = "python-api") -> Release:
    """Lift the quarantine of every quarantined entry (or of those ``names`` lists, or
    whose name ``name_matches`` accepts): each one whose definition reads is saved
    again as it is, which clears its quarantine and gives it its score from its stored
    last run, so the leader schedules it at its next tick (a slot missed meanwhile is
    caught up or skipped by its misfire policy, as for an entry enabled again). An
    entry that still cannot be read stays quarantined (its own fault), and is listed
    with the reason. ``dry_run`` writes nothing and says what would be released.

    A quarantine a fault of the app caused (a misspelled ``timezone`` in 2.4.2-era
    data, or a schedule class the app could not import then) is lifted in one call once
    the app is fixed. EntryNotFound for a name in ``names`` that is no entry."""
    if names is None:
        # names first, then each entry read again as it is released: saving moves an
        # entry out of the parked band the scan pages through
        names = [info.name for info in quarantined_entries(app)]
    else:
        names = list(dict.fromkeys(names))
        for name in names:
            _read_entry(app, name)  # EntryNotFound before anything is written
    outcome = Release()
    for name in names:
        if name_matches is not None and not name_matches(name):
            continue
        try:
            info = _read_entry(app, name)
        except EntryNotFound:
            continue  # deleted since the scan
        if info.state != "quarantined":
            continue
        if info.entry is None:
            outcome.kept.append((info.name, info.error or "unreadable"))
            continue
        if not dry_run:
            try:
                info.entry.save(changed_by=changed_by)
            except (ValueError, OverflowError, ArithmeticError) as exc:
                outcome.kept.append((info.name, f"saving it failed: {exc}"))
                continue
        outcome.released.append(info.name)
    return outcome


def delete_entry(app: Celery, name: str) -> None:
    """EntryNotFound (a KeyError) when there is no such entry."""
    if not store_for(app).delete_entry(ensure_conf(app).keys.entry(name), name):
        raise EntryNotFound(name)


def run_now(app: Celery, name: str) -> str:
    """Have the leader publish the entry at its next tick, without touching its schedule.

    The run is queued as a pending slot (id ``<name>:run-now:<ms>``), which the leader
    publishes and confirms like any claimed slot: held as commit.lua holds a claimed
    slot (the record names the definition, kept once among the held definitions), so
    confirming it releases the definition the same way. Returns the task id."""
    store = store_for(app)
    info = _read_entry(app, name)
    if info.entry is None:
        raise InvalidEntry(info.key, info.error or "unreadable")
    now = datetime.now(timezone.utc)
    task_id = f"{name}:run-now:{round(now.timestamp() * 1000)}"
    definition = info.fields[DEFINITION]
    row = Row(info.key, 0.0, definition, info.fields.get(META), None)
    message = pending_message(row, Claim(task_id, info.entry, now), now, node_name(),
                              reason="run-now")
    store.hold(task_id, message, definition)
    return task_id


# -- export and import -----------------------------------------------------------------


def export_records(app: Celery) -> Iterator[dict[str, Any]]:
    """Every entry with its definition, meta, policy and score, as plain JSON values, in
    due order, read a page at a time (what ``redbeat export`` streams)."""
    for info in iter_entries(app):
        if not info.fields:
            continue  # a member with no hash (another type at its key, or deleted): no entry
        record: dict[str, Any] = {"name": info.name, "score": info.score,
                                  "static": info.static}
        for name in (DEFINITION, META, POLICY, LABELS, CREATED):
            raw = info.fields.get(name)
            if raw is None and name in (LABELS, CREATED):
                continue  # added by this release: absent from records that have none
            if name == DEFINITION and raw is not None:
                raw = legacy.real_text(raw)  # not the stub celery-redbeat 2.4.2 is shown
            try:
                record[name] = None if raw is None else json.loads(raw)
            except (ValueError, RecursionError):
                record[name] = {"__raw__": raw}  # kept byte for byte, even if broken
        yield record


def export_entries(app: Celery) -> dict[str, Any]:
    """The whole export as one document (:func:`export_records` holds one entry at a
    time: prefer it for a large schedule)."""
    return {**export_file.header(ensure_conf(app).key_prefix, time.time()),
            "entries": list(export_records(app))}


@dataclass
class ImportPlan:
    """What an import changes, by name: the summary ``redbeat import`` prints."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)

    @property
    def written(self) -> list[str]:
        return self.created + self.updated

    @property
    def changed(self) -> list[str]:
        """Every name the import writes or deletes."""
        return self.written + self.pruned


def _field_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == {"__raw__"}:
        return str(value["__raw__"])
    return json.dumps(value)


def _import_key(record: Any, keys: KeyLayout) -> tuple[str, str]:
    """An exported record's name and the key it is written at (a reserved one refused)."""
    if not isinstance(record, dict) or "name" not in record:
        raise ValueError(f"an entry of the export is not an object with a name: "
                         f"{str(record)[:80]!r}")
    name = str(record["name"])
    key = keys.entry(name)
    if keys.is_internal(key):
        raise ValueError(f"entry name {name!r} is reserved: its key {key!r} is one of "
                         "redbeat's own keys")
    return name, key


def _import_score(name: str, value: Any) -> float:
    """An exported score: a finite number (0 when absent). Checked before anything is
    written: Redis refuses NaN in the middle of the import's batch, after the writes
    before it, and an infinite score is an entry never sent."""
    try:
        score = 0.0 if value is None else float(value)
    except (TypeError, ValueError):
        score = math.nan
    if isinstance(value, bool) or not math.isfinite(score):
        raise ValueError(f"entry {name!r}: score must be a finite number, not {value!r}")
    return score


@dataclass
class ImportCounts:
    """How many entries an import created, updated, left alone and pruned; whether it
    stopped early (``should_stop``), after the batches counted."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    pruned: int = 0
    stopped: bool = False

    def add(self, kind: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)


#: Entries an import reads and writes per round trip (one transaction per batch).
IMPORT_BATCH = 500
#: Schedule members read per round trip while looking for entries to prune.
PRUNE_PAGE = 10_000


@dataclass(frozen=True)
class _Incoming:
    name: str
    key: str
    definition: str
    meta: str | None
    policy: str | None
    labels: str | None
    created: str | None
    score: float
    static: bool


def _incoming(record: Any, keys: KeyLayout) -> _Incoming:
    name, key = _import_key(record, keys)
    definition = _field_text(record.get(DEFINITION))
    if definition is None:
        raise ValueError(f"entry {name!r} has no definition")
    # stored as save() stores it: in a stub if celery-redbeat 2.4.2 cannot read it
    return _Incoming(name, key, legacy.wrap(definition, name), _field_text(record.get(META)),
                     _field_text(record.get(POLICY)), _field_text(record.get(LABELS)),
                     _field_text(record.get(CREATED)),
                     _import_score(name, record.get("score")), bool(record.get("static")))


def _batches(records: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for record in records:
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _classified(store: ScheduleStore, keys: KeyLayout, batch: list[Any]
                ) -> list[tuple[str, _Incoming]]:
    """Each record of the batch with what the import does with it (created, updated,
    unchanged), from one read of the entries it names."""
    incoming = [_incoming(record, keys) for record in batch]
    current = store.view_rows([item.key for item in incoming])
    verdicts = []
    for item, (fields, score, _) in zip(incoming, current, strict=True):
        exists = bool(fields) and score is not None
        same = exists and fields.get(DEFINITION) == item.definition and \
            fields.get(META) == item.meta and score == item.score and \
            fields.get(POLICY) == item.policy and fields.get(LABELS) == item.labels
        verdicts.append(("unchanged" if same else "updated" if exists else "created", item))
    return verdicts


def _write(store: ScheduleStore, keys: KeyLayout, items: list[_Incoming]) -> None:
    """The writes of one batch, in one transaction."""
    changed = changed_json("import")

    def build(pipe: Any) -> None:
        for item in items:
            pipe.hset(item.key, mapping={DEFINITION: item.definition, CHANGED: changed})
            pipe.hsetnx(item.key, CREATED, item.created or changed)
            if item.labels is None:
                pipe.hdel(item.key, LABELS)
            else:
                pipe.hset(item.key, LABELS, item.labels)
            if item.meta is not None:
                pipe.hset(item.key, META, item.meta)
            if item.policy is None:
                pipe.hdel(item.key, POLICY)
            else:
                pipe.hset(item.key, POLICY, item.policy)
            pipe.zadd(keys.schedule, {item.key: item.score})
            if item.static:
                pipe.sadd(keys.statics, item.name)
    store.write_batch(build)


def _to_prune(store: ScheduleStore, keys: KeyLayout, kept: set[str]) -> list[str]:
    """The names of the schedule's entries ``kept`` does not have (names only are read,
    ``PRUNE_PAGE`` members per round trip)."""
    pruned, start = [], 0
    while members := store.window(keys.schedule, start, start + PRUNE_PAGE - 1):
        pruned += [name for name in (keys.name_of(key) for key, _ in members
                                     if keys.is_entry_key(key)) if name not in kept]
        start += len(members)
    return sorted(pruned)


def import_records(app: Celery, records: Callable[[], Iterable[Any]], dry_run: bool = False,
                   prune: bool = False,
                   planned: Callable[[str, str], None] | None = None,
                   before_write: Callable[[ImportCounts], None] | None = None,
                   written: Callable[[str, str], None] | None = None,
                   should_stop: Callable[[], bool] | None = None,
                   batch: int = IMPORT_BATCH) -> ImportCounts:
    """Write the entries of an export, streamed: ``records()`` gives the export's
    entries afresh each time it is called (it is called twice: the import is planned,
    then written), read ``batch`` at a time, so memory holds a batch whatever the
    export's size (and, with ``prune``, the set of its names). Idempotent: an entry
    equal to the record is left alone.

    ``planned(kind, name)`` hears what the plan does with each entry (``created``,
    ``updated``, ``unchanged``, ``pruned``), and ``before_write`` the counts before anything is
    written: either may refuse the import by raising (the CLI refuses to change static
    entries without ``--force``). ``written(kind, name)`` hears each change once its
    batch is written; ``should_stop()`` is asked between batches (Ctrl-C): the counts
    then say what was written, ``stopped`` set. A bad record (no name, a reserved name,
    no definition, a score that is not a finite number) raises ValueError while
    planning, before anything is written."""
    store = store_for(app)
    keys = ensure_conf(app).keys
    hear = planned or _ignore
    plan, pruned = _plan_import(store, keys, records(), prune, batch, hear)
    if before_write is not None:
        before_write(plan)
    if dry_run:
        return plan
    return _apply_import(store, keys, records(), pruned, batch, written or _ignore,
                         should_stop or (lambda: False))


def _ignore(kind: str, name: str) -> None:
    """A listener that does not listen."""


def _plan_import(store: ScheduleStore, keys: KeyLayout, records: Iterable[Any], prune: bool,
                 batch: int, hear: Callable[[str, str], None]
                 ) -> tuple[ImportCounts, list[str]]:
    """What an import would do, and the names it would prune: every record read and
    checked, nothing written."""
    plan = ImportCounts()
    names: set[str] = set()
    for chunk in _batches(records, batch):
        for kind, item in _classified(store, keys, chunk):
            plan.add(kind)
            hear(kind, item.name)
            if prune:
                names.add(item.name)
    pruned = _to_prune(store, keys, names) if prune else []
    for name in pruned:
        plan.add("pruned")
        hear("pruned", name)
    return plan, pruned


def _apply_import(store: ScheduleStore, keys: KeyLayout, records: Iterable[Any],
                  pruned: list[str], batch: int, hear: Callable[[str, str], None],
                  should_stop: Callable[[], bool]) -> ImportCounts:
    """Write the import a batch per transaction, asking ``should_stop`` between them."""
    done = ImportCounts()
    for chunk in _batches(records, batch):
        if should_stop():
            done.stopped = True
            return done
        verdicts = _classified(store, keys, chunk)
        _write(store, keys, [item for kind, item in verdicts if kind != "unchanged"])
        for kind, item in verdicts:
            done.add(kind)
            if kind != "unchanged":
                hear(kind, item.name)
    for names in _batches(pruned, batch):
        if should_stop():
            done.stopped = True
            return done
        _prune(store, keys, names)
        for name in names:
            done.add("pruned")
            hear("pruned", name)
    return done


def _prune(store: ScheduleStore, keys: KeyLayout, names: list[str]) -> None:
    def build(pipe: Any) -> None:
        for name in names:
            pipe.zrem(keys.schedule, keys.entry(name))
            pipe.delete(keys.entry(name))
            pipe.srem(keys.statics, name)
    store.write_batch(build)


def import_entries(app: Celery, document: dict[str, Any], dry_run: bool = False,
                   prune: bool = False,
                   before_write: Callable[[ImportPlan], None] | None = None) -> ImportPlan:
    """Write the entries of an export held in memory (:func:`import_records` streams);
    idempotent (an identical entry is left alone).

    The prefix is this app's, so an export can move a schedule to another prefix.
    ``prune`` deletes the entries the document does not have. ``before_write`` sees the
    plan before anything is written and may refuse it by raising (the CLI refuses to
    change static entries without ``--force``)."""
    if document.get("format") != export_file.FORMAT or not isinstance(
            document.get("entries"), list):
        raise ValueError(f"not a redbeat export (expected format {export_file.FORMAT})")
    plan = ImportPlan()
    import_records(
        app, lambda: document["entries"], dry_run=dry_run, prune=prune,
        planned=lambda kind, name: getattr(plan, kind).append(name),
        before_write=(lambda _: before_write(plan)) if before_write is not None else None)
    return plan


def due_entries(app: Celery, now: float, limit: int = PAGE) -> list[RedBeatSchedulerEntry]:
    """Entries whose score is due at ``now`` (read only)."""
    entries = []
    for key, definition, meta in store_for(app).due_rows(now, limit):
        try:
            entries.append(RedBeatSchedulerEntry.decode(app, key, definition, meta))
        except InvalidEntry:
            continue
    return entries


# -- status ----------------------------------------------------------------------------

#: Parked members whose quarantine reason ``status`` reads (the rest are only counted).
QUARANTINE_SAMPLE = 50


@dataclass(frozen=True)
class Pause:
    """Who paused the whole schedule, and when (None when the record cannot be read:
    it is paused all the same, since the tick checks only that the key exists)."""

    by: str
    at: datetime | None

    @classmethod
    def read(cls, raw: str) -> Pause:
        try:
            record = json.loads(raw)
            return cls(str(record.get("by", "?")),
                       datetime.fromtimestamp(float(record["at"]), tz=timezone.utc))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError,
                OverflowError, OSError):
            return cls("?", None)


def pause(app: Celery, by: str = "python-api") -> None:
    """Pause the whole schedule: the leader keeps the lock and its heartbeat and sends
    nothing (a due slot waits, then runs as its misfire policy says: by default one
    catch-up run once resumed; a held slot or a run now is sent once resumed). Honoured
    by redbeat's beat; celery-redbeat 2.4.2 nodes do not know the flag."""
    store_for(app).set_paused(json.dumps({"by": by, "at": time.time()}))


def resume(app: Celery) -> None:
    """Take back :func:`pause`: the leader's next tick sends what is due."""
    store_for(app).set_paused(None)


@dataclass
class Status:
    lock_holder: str | None
    lock_ttl_ms: int
    entries: int
    overdue: int
    most_late_s: float
    #: entries written with score 0 ("due now, work out when") the leader has not read yet
    waiting: int
    parked: int
    pending: int
    next_due: list[tuple[str, float]]
    quarantined: list[tuple[str, str]]
    nodes: dict[str, tuple[str, float]]
    redis_version: str
    eviction_policy: str | None
    #: Redis's clock when read (epoch seconds; the caller's ``now`` when it cannot be
    #: read): what heartbeat ages are measured against, so no host's clock skews them
    server_time: float
    #: Why Redis refuses writes now (out of memory under noeviction), or None
    refuses_writes: str | None = None
    #: Why the schedule can vanish now (an allkeys-* policy that has evicted keys), or None
    evicting: str | None = None
    #: while the schedule is paused: who paused it and when (``pause``), else None
    paused: Pause | None = None


def status(app: Celery, now: float | None = None, upcoming: int = 5,
           store: ScheduleStore | None = None) -> Status:
    """Everything ``redbeat status`` shows, read in one round trip whatever the schedule
    size (quarantine reasons for at most ``QUARANTINE_SAMPLE`` parked entries).
    ``store``: another store of the app's schedule (the metrics read through one that
    does not retry, so a scrape answers while Redis is away)."""
    keys = ensure_conf(app).keys
    now = time.time() if now is None else now
    read = (store or store_for(app)).snapshot(now, upcoming, QUARANTINE_SAMPLE)
    holder, ttl, total, overdue = read["holder"], read["ttl"], read["total"], read["overdue"]
    oldest, following, parked, pending = (read["oldest"], read["following"], read["parked"],
                                          read["pending"])
    nodes, server, policy = read["nodes"], read["server"], read["policy"]
    quarantined = []
    for key, raw in read["reasons"]:
        if raw:
            try:
                reason = str(json.loads(raw).get("reason"))
            except (ValueError, AttributeError, RecursionError):
                reason = raw
            quarantined.append((keys.name_of(key), reason))
    beats = {node: (beat.role, beat.at) for node, beat in heartbeats(nodes).items()}
    return Status(
        lock_holder=holder, lock_ttl_ms=int(ttl), entries=int(total), overdue=int(overdue),
        most_late_s=max(0.0, now - oldest[0][1]) if oldest else 0.0,
        waiting=int(read["waiting"]),
        parked=int(parked), pending=int(pending),
        next_due=[(keys.name_of(key), score) for key, score in following],
        quarantined=quarantined, nodes=beats,
        redis_version=server.get("redis_version", "?") if isinstance(server, dict) else "?",
        eviction_policy=policy.get("maxmemory-policy") if isinstance(policy, dict) else None,
        server_time=now if read["time"] is None else read["time"],
        refuses_writes=refusing_writes(read["memory"]),
        evicting=evicting(read["memory"], read["stats"]),
        paused=Pause.read(read["paused"]) if read["paused"] is not None else None,
    )



__all__ = [
    "EntryInfo", "EntryNotFound", "ImportCounts", "ImportPlan", "InvalidEntry", "Pause",
    "Release", "delete_entry", "due_entries", "edit_entry", "entry_info", "export_entries",
    "export_records", "get_entry", "import_entries", "import_records", "iter_entries",
    "list_entries", "outcome_record", "pause", "quarantined_entries", "release_quarantined",
    "resume", "run_now", "run_outcomes", "set_enabled", "status",
]

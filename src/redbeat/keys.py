"""Every Redis key and hash field redbeat reads or writes, in one place.

The layout is the celery-redbeat 2.4.2 contract (see docs/design.md): the prefix is
used literally, so prefix ``redbeat:`` gives ``redbeat::schedule`` and the entry key
``redbeat:<name>``, and prefix ``myapp`` gives ``myapp:schedule`` and ``myappjob1``.
Keys added by this package (pending slots) follow the same rule so that a hash-tagged
prefix such as ``{redbeat}:`` keeps every key in one Redis Cluster slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

# Hash fields of an entry. ``definition`` and ``meta`` are the 2.4.2 contract; the
# others are ours and invisible to 2.4.2, which only ever HGETs the first two.
DEFINITION = "definition"
META = "meta"
QUARANTINE = "quarantine"
#: Dispatch records of releases before the fleet-wide history stream: a ring of fields
#: ``history:0`` .. ``history:<n-1>`` in each entry hash. Still read (``redbeat show``),
#: never written; commit.lua deletes them when it next records a run of the entry.
LEGACY_HISTORY_PREFIX = "history:"
CHANGED = "changed"
#: Who first wrote the entry, when and through what (redbeat.audit); ``changed`` is the
#: latest write of the definition
CREATED = "created"
#: The entry's labels, a JSON array of strings (redbeat.labels)
LABELS = "labels"
POLICY = "policy"
MISFIRES = "misfires"
#: Dispatches Celery or the broker refused (see lua/failure.lua): a count, the last
#: one and a few recent ones, each with its reason and time.
FAILURES = "failures"
#: The entry's latest run as the workers (and, for entries whose policy watches runs,
#: beat) reported it: one JSON object, read by :mod:`redbeat.runs` (see docs/outcomes.md).
RUN = "run"


#: A schedule-set score that no tick ever selects (ticks read from score 0 up).
PARKED_SCORE = -1.0


@dataclass(frozen=True)
class KeyLayout:
    prefix: str = "redbeat:"
    lock_name: str | None = None

    @property
    def schedule(self) -> str:
        return f"{self.prefix}:schedule"

    @property
    def statics(self) -> str:
        return f"{self.prefix}:statics"

    @property
    def pending(self) -> str:
        """Sorted set of the task ids of claimed slots whose publish is not yet
        confirmed, scored by due time; each record (JSON) is the string
        ``<pending>:<task id>`` (lua/prelude.lua). No hash: code that lists the
        prefix's hashes as entries, as code written for 2.4.2 does, meets only entries."""
        return f"{self.prefix}:pending"

    @property
    def held_definitions(self) -> str:
        """Sorted set of the definitions pending slots were claimed from, one per distinct
        text: member = sha1 of the text, score = how many pending records name it; the
        text is the string ``<held_definitions>:<sha1>``. A slot held through a broker
        outage names its definition instead of copying it, so a large entry held for
        many slots costs Redis one copy."""
        return f"{self.prefix}:held-definitions"

    @property
    def failing(self) -> str:
        """Sorted set of the entries with a recorded failed dispatch (entry key -> epoch
        of its last failure): what ``status`` counts without reading every entry."""
        return f"{self.prefix}:failing"

    @property
    def history(self) -> str:
        """Stream of dispatch records of the whole schedule (entry key, task id, due
        time, node), capped at ``redbeat_history_stream_length`` records: a dispatch is
        one record appended by the commit that claims it, so history costs a bounded
        amount in all and nothing per entry (a ring of fields in every entry hash cost
        about 1.5 KB an entry)."""
        return f"{self.prefix}:history"

    @property
    def outcomes(self) -> str:
        """Stream of run outcomes reported by workers with ``redbeat_worker_outcomes``
        (entry key, task id, due time, outcome, runtime, worker, error line), capped like
        the history stream: what ``show``, ``check`` and the metrics read."""
        return f"{self.prefix}:outcomes"

    @property
    def failing_runs(self) -> str:
        """Sorted set of the entries whose latest runs failed: entry key -> how many in a
        row (a success removes it), so ``check`` finds them in one command."""
        return f"{self.prefix}:failing-runs"

    @property
    def nodes(self) -> str:
        """Sorted set of scheduler heartbeats: node id, scored with the epoch seconds of
        its last tick, negated for a standby (redbeat.heartbeat). Not a hash: code that
        lists the prefix's hashes as entries, as code written for 2.4.2 does, meets
        only entries."""
        return f"{self.prefix}:nodes"

    @property
    def view_by_name(self) -> str:
        """A short-lived copy of the schedule's members, every score 0, so Redis keeps
        them in name order: what the web view pages through when sorting by name."""
        return f"{self.prefix}:view:by-name"

    @property
    def view_by_last_run(self) -> str:
        """A short-lived sorted set of entry keys scored by their last run (0: never
        ran): what the web view pages through when sorting by last run."""
        return f"{self.prefix}:view:by-last-run"

    @property
    def view_by_last_run_building(self) -> str:
        """The scratch sorted set ``view_by_last_run`` is built in, a chunk at a time,
        then renamed over the view (readers never see half a view)."""
        return f"{self.view_by_last_run}:building"

    @property
    def view_timeline(self) -> str:
        """A short-lived string: the web view's last computed timeline (runs per minute
        over the next 24 hours, as JSON), so a page load does not recompute it."""
        return f"{self.prefix}:view:timeline"

    @property
    def paused(self) -> str:
        """A string present while the whole schedule is paused (JSON: who paused it,
        when): the leader's tick reads it in its own round trip and sends nothing while
        it exists (``redbeat.manage.pause``)."""
        return f"{self.prefix}:paused"

    @property
    def lock(self) -> str:
        if self.lock_name is None:
            return f"{self.prefix}:lock"
        if self.lock_name.startswith(self.prefix):
            return self.lock_name
        return self.prefix + self.lock_name

    @cached_property  # asked once per due row on the tick: built once per layout
    def internal(self) -> frozenset[str]:
        """The package's own keys: no entry may be named so that its key is one of them
        (an entry ``:lock`` would turn the lock into a hash no node can ever take)."""
        return frozenset({self.schedule, self.statics, self.pending, self.held_definitions,
                          self.nodes, self.lock, self.failing, self.view_by_name,
                          self.view_by_last_run, self.view_by_last_run_building,
                          self.view_timeline, self.history, self.outcomes,
                          self.failing_runs, self.paused})

    @cached_property
    def types(self) -> dict[str, str]:
        """The Redis type each internal key holds (what TYPE answers). Another type at
        one of them (another client's SET) makes every script that touches it fail."""
        return {self.schedule: "zset", self.statics: "set", self.pending: "zset",
                self.held_definitions: "zset", self.nodes: "zset", self.lock: "string",
                self.failing: "zset", self.view_by_name: "zset",
                self.view_by_last_run: "zset", self.view_by_last_run_building: "zset",
                self.view_timeline: "string", self.history: "stream",
                self.outcomes: "stream", self.failing_runs: "zset",
                self.paused: "string"}

    def is_internal(self, key: str) -> bool:
        """Whether ``key`` is one of the package's own keys: an internal key, or a held
        slot's record or definition text (``<pending>:<task id>``,
        ``<held_definitions>:<sha1>``)."""
        return key in self.internal or key.startswith(self._held_namespaces)

    @cached_property
    def _held_namespaces(self) -> tuple[str, str]:
        return f"{self.pending}:", f"{self.held_definitions}:"

    def is_entry_key(self, key: str) -> bool:
        """Whether ``key`` can hold an entry of this schedule: under the prefix and not
        one of the package's own keys. A schedule member that fails this is never
        written to (it may be another application's data, or out of an ACL user's
        reach)."""
        return key.startswith(self.prefix) and not self.is_internal(key)

    def entry(self, name: str) -> str:
        return self.prefix + name

    def name_of(self, key: str) -> str:
        """The entry name a key stands for; keys outside the prefix are returned whole."""
        return key[len(self.prefix):] if key.startswith(self.prefix) else key

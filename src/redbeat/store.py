"""Every Redis round trip of redbeat, and the Lua scripts they run.

A reader looking for "where does this command go to Redis" finds it here. Each public
method is one round trip (a script call or one pipeline) wrapped in the retry policy,
so the cost of a tick is countable by reading this file: ``fetch`` (1), ``commit`` (1)
and ``confirm`` (1), whatever the number of due entries.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from redis.exceptions import NoScriptError, RedisError, ResponseError

from .batch import Op, Row, definition_sha1
from .failures import RECENT as RECENT_FAILURES
from .failures import failure_json
from .heartbeat import heartbeats, node_fields
from .keys import (
    CHANGED,
    CREATED,
    DEFINITION,
    FAILURES,
    LABELS,
    META,
    MISFIRES,
    PARKED_SCORE,
    POLICY,
    QUARANTINE,
    RUN,
    KeyLayout,
)
from .lock import Holder
from .replication import WAIT_MS, ReplicaWatch
from .retry import RetryPolicy
from .settings import DEFAULT_HISTORY_STREAM_LENGTH

if TYPE_CHECKING:
    from .lock import Lease

logger = logging.getLogger("celery.beat")


def _lua(name: str) -> str:
    return (resources.files("redbeat") / "lua" / f"{name}.lua").read_text()


@cache
def load_script(name: str) -> str:
    """A script's text, after the prelude every script shares (lua/prelude.lua); read
    from the package once per process (every store registers them all, and ``status``
    sends parked_sample.lua as text on each call)."""
    return _lua("prelude") + _lua(name)


class Reply(NamedTuple):
    """A script's reply: every script returns ``{status, payload...}`` (lua/prelude.lua)."""

    status: str
    payload: list[Any]

    def fenced(self) -> list[Any]:
        """The payload of a script that checks the lease; LockLost when it was refused."""
        if self.status == "lost":
            raise LockLost(self.payload[0] if self.payload else None)
        return self.payload


def with_flag_reply(name: str) -> str:
    """Script ``name`` replying 1 for 'ok' and 0 otherwise, as celery-redbeat 2.4.2's
    scripts did: for the names it exposed (``schedulers.LUA_EXTEND_TO_SCRIPT``)."""
    return (f"local function run()\n{load_script(name)}\nend\n"
            "return run()[1] == 'ok' and 1 or 0\n")


#: How a script's call of a ``redis.*`` function the server's Lua lacks fails.
_MISSING_LUA_FUNCTION = re.compile(r"attempt to call field '(\w+)' \(a nil value\)")


def unsupported_lua(exc: Exception) -> str:
    """What a script error means when the server's Lua lacks a ``redis.*`` function
    redbeat's scripts call (fakeredis, which many test suites use, has no
    ``redis.sha1hex`` in EVAL), in words; '' for any other error. Such a server never
    runs the tick, so it is named as what it is, not as an outage to wait out."""
    match = _MISSING_LUA_FUNCTION.search(str(exc))
    if match is None:
        return ""
    return (f"this server's Lua has no redis.{match.group(1)} (fakeredis has none): "
            "redbeat's tick needs a real Redis (6.2 or later) or Valkey")


def _or_absent(reply: Any, absent: Any) -> Any:
    """A reply of a pipeline run without raising, for a key read as an entry: another
    type there (another client's data, not an entry) reads as ``absent``, what a missing
    key gives; any other error is raised. One such member failed every listing."""
    if isinstance(reply, ResponseError) and "WRONGTYPE" in str(reply):
        return absent
    if isinstance(reply, Exception):
        raise reply
    return reply


def _raise_error(*replies: Any) -> None:
    """Raise the first error among replies of a pipeline run without raising."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply


def _dict_or_empty(reply: Any) -> dict[str, Any]:
    """A dict reply of a pipeline run without raising, or {} for its error."""
    return reply if isinstance(reply, dict) else {}


def _hash_or_empty(reply: Any) -> dict[str, str]:
    return dict(_or_absent(reply, {}))


def pairs(flat: list[Any]) -> dict[Any, Any]:
    """A flat ``[k1, v1, k2, v2, ...]`` reply as a dict."""
    return dict(zip(flat[0::2], flat[1::2], strict=True))


def script_reply(name: str, raw: Any) -> Reply:
    """Decode a reply of script ``name``: the one place that knows the shape."""
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
        raise ResponseError(f"{name}.lua replied {raw!r}, not {{status, payload...}}")
    return Reply(raw[0], raw[1:])


#: What tick.lua found: this node leads, just took the lock, or another node leads.
FetchStatus = Literal["leader", "acquired", "standby"]


@dataclass
class Fetch:
    status: FetchStatus
    #: Redis's clock when tick.lua ran (epoch seconds): what the node's clock is set by
    #: (None when not asked for, or when an ACL refuses TIME)
    server_time: float | None
    #: Why Redis refused this node's writes (its heartbeat, or taking a free lock): an
    #: OOM error under noeviction; None when it wrote them
    refused: str | None = None
    #: Keys Redis has evicted since it started (INFO's evicted_keys; read when leading
    #: and asked for)
    evicted_keys: int | None = None
    holder: str | None = None
    holder_ttl_ms: int | None = None
    next_score: float | None = None
    pending: dict[str, str] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    #: The definitions the pending records name (sha1 -> text), and the policy field of
    #: each entry they are slots of (key -> policy, None when it has none or is gone).
    held: dict[str, str] = field(default_factory=dict)
    policies: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class StaticWrite:
    """One static as sync_statics.lua takes it: what ``beat_schedule`` says of it, and
    optionally its score with the stored meta it was worked out from."""

    key: str
    name: str
    definition: str
    policy: str | None = None  # the ``policy`` field; None: none (an old one is removed)
    #: the ``labels`` field as :meth:`ScheduleStore.save` takes it (None: kept)
    labels: str | None = None
    #: the score to write; None: the stored one where it holds, else ask (StaticsSync)
    score: float | None = None
    #: what ``score`` was worked out from: FRESH (a static seen the first time: no meta
    #: and no score stored), or the stored meta (None: no meta stored)
    basis: str | None = None


#: The basis of a static's score when it is seen the first time (StaticWrite.basis).
FRESH = "\0fresh"


class StaticsSync(NamedTuple):
    """What sync_statics.lua left to the client: the statics whose score the stored data
    decides (index in the call, stored meta, stored score), and the recorded statics no
    longer configured (names)."""

    asked: list[tuple[int, str | None, float | None]]
    unrecorded: list[str]


class Save(NamedTuple):
    """One entry's write, as :meth:`ScheduleStore.save` takes it."""

    key: str
    definition: str
    meta: str
    score: float
    changed: str
    policy: str | None = None
    rescore: Callable[[str | None], float] | None = None
    labels: str | None = None


class HistoryUnreadable(Exception):
    """The history stream cannot be read (another client wrote another type at its key,
    or the ACL user lacks XREVRANGE)."""


class RunReport(NamedTuple):
    """What lua/outcome.lua did with a worker's report."""

    written: str
    #: seconds the run may stay silent before it counts as lost (when recorded)
    lost_after: float | None = None


class LockLost(Exception):
    """The lock is held by another node (or expired) when this node tried to write."""

    def __init__(self, holder: str | None) -> None:
        super().__init__(f"lock lost (now held by {holder or 'nobody'})")
        self.holder = holder


class NotReplicated(RedisError):
    """The replicas did not acknowledge a tick's or a commit's writes in time: the
    master may be being replaced, and what it wrote thrown away, so nothing of that
    round trip is sent (replication.py). Raised after the writes were made."""

    def __init__(self) -> None:
        super().__init__(f"the replicas did not acknowledge the write within "
                         f"{WAIT_MS / 1000:.1f}s (a failover may be under way); nothing "
                         "is sent until they do")


def has_hash_tag(prefix: str) -> bool:
    """Whether keys built on ``prefix`` share one Redis Cluster slot ('{redbeat}:')."""
    start = prefix.find("{")
    end = prefix.find("}", start + 1)
    return start != -1 and end > start + 1


class ScheduleStore:
    def __init__(self, client: Any, keys: KeyLayout, retry: RetryPolicy | None = None,
                 history_length: int = DEFAULT_HISTORY_STREAM_LENGTH) -> None:
        from redis.cluster import RedisCluster

        self.cluster = isinstance(client, RedisCluster)
        if self.cluster and not has_hash_tag(keys.prefix):
            # Scripts and transactions need every key in one slot; without a tag the
            # first tick would fail with CROSSSLOT on every call.
            raise ValueError(
                f"redbeat_key_prefix {keys.prefix!r} has no hash tag: on Redis Cluster use "
                "one such as '{redbeat}:' (see docs/deployments.md for moving a schedule)"
            )
        self.client = client
        self.keys = keys
        self.retry = retry or RetryPolicy()
        #: records the history stream keeps (commit.lua trims it to about this many)
        self.history_length = history_length
        #: why the last dispatch records could not be written (logged once), or None
        self.history_problem: str | None = None
        #: whether the master has replicas, so that a leader's writes wait for one, and
        #: whether an ACL refused that WAIT (said once)
        self.replicas = ReplicaWatch()
        self.wait_refused = False
        self._scripts = {
            name: client.register_script(load_script(name))
            for name in ("tick", "commit", "confirm", "hold", "sync_statics",
                         "release", "extend", "sweep", "failure", "view_metas",
                         "count_quarantined", "view_match", "band_entries", "outcome",
                         "save", "remove", "held_sample")
        }

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Reply:
        """One script call under the retry policy."""
        return self.retry.call(lambda: self._call(name, keys, args))

    def _run_acknowledged(self, name: str, keys: Sequence[str],
                          args: Sequence[Any]) -> tuple[Reply, bool]:
        """One script call followed, in the same round trip and on the same connection,
        by ``WAIT`` for its replicas when it has some (not on Cluster, where a
        pipeline cannot route a keyless WAIT), and whether what it wrote may be sent
        on: every replica waited for acknowledged it, or none is waited for."""
        if self.cluster or not self.replicas.expected:
            return self._run(name, keys, args), True
        script, replicas = self._scripts[name], self.replicas.expected

        def run() -> list[Any]:
            for _ in range(2):  # once more after loading a script the server lost
                with self.client.pipeline(transaction=False) as pipe:
                    pipe.evalsha(script.sha, len(keys), *keys, *args)
                    pipe.wait(replicas, WAIT_MS)
                    raw, acknowledged = pipe.execute(raise_on_error=False)
                if not isinstance(raw, NoScriptError):
                    break
                script.sha = self.client.script_load(script.script)
            if isinstance(raw, Exception):
                raise raw
            return [raw, acknowledged]

        raw, acknowledged = self.retry.call(run)
        reply = script_reply(name, raw)
        if isinstance(acknowledged, ResponseError):  # an ACL without +wait
            if not self.wait_refused:
                logger.warning("beat: Redis refused WAIT (%s): commits are sent without "
                               "waiting for a replica; a failover can make a slot go out "
                               "twice (grant +wait)", acknowledged)
            self.wait_refused = True
            return reply, True
        return reply, isinstance(acknowledged, int) and acknowledged >= replicas

    def _note_replicas(self, connected: Any) -> None:
        waited = self.replicas.expected
        said = self.replicas.seen(None if connected is None else int(connected),
                                  time.monotonic())
        if said:  # waiting for fewer replicas weakens the guarantee: a warning
            logger.log(logging.INFO if self.replicas.expected > waited else logging.WARNING,
                       "beat: %s", said)

    def _call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Reply:
        """One script call, one attempt."""
        return script_reply(name, self._scripts[name](keys=list(keys), args=list(args)))

    def preload(self) -> dict[str, str]:
        """Load every script and read the eviction policy and the replicas, in one
        round trip.

        Loading now spares the first tick a NOSCRIPT retry. The policy is returned
        ({} when the server or an ACL refuses CONFIG GET) for the start-up check; the
        replica count tells whether the first commit waits for one (replication.py).
        """
        def load() -> Any:
            if self.cluster:  # keyless commands go to every node, not through a pipeline
                shas = [self.client.script_load(script.script)
                        for script in self._scripts.values()]
                return [*shas, None, self.client.config_get("maxmemory-policy",
                                                            target_nodes="primaries")]
            with self.client.pipeline(transaction=False) as pipe:
                for script in self._scripts.values():
                    pipe.script_load(script.script)
                pipe.info("replication")
                pipe.config_get("maxmemory-policy")
                return pipe.execute(raise_on_error=False)
        reply = self.retry.call(load)
        for script, sha in zip(self._scripts.values(), reply, strict=False):
            if isinstance(sha, str):
                script.sha = sha
        replication, config = reply[-2:]
        if isinstance(replication, dict) and replication.get("role") == "master":
            self._note_replicas(sum(  # online replicas, as tick.lua counts them
                1 for name, value in replication.items()
                if name.startswith("slave") and isinstance(value, dict)
                and value.get("state") == "online"))
        return config if isinstance(config, dict) else {}

    def misplaced_types(self, exc: Exception) -> str:
        """What Redis's WRONGTYPE ``exc`` means, in words: which internal keys hold
        another type than redbeat keeps there (one round trip); '' for another error,
        or when that cannot be told."""
        if "WRONGTYPE" not in str(exc):
            return ""
        expected = self.keys.types
        try:
            found = self._pipelined(lambda pipe: [pipe.type(key) for key in expected])
        except RedisError:
            return ""
        return "; ".join(f"{key} holds a {kind}, where redbeat keeps a {want}"
                         for (key, want), kind in zip(expected.items(), found, strict=True)
                         if kind not in ("none", want))

    def nodes(self) -> dict[str, str]:
        """Each node's heartbeat as ``"<role> <epoch seconds>"`` (redbeat.heartbeat)."""
        return node_fields(self.retry.call(
            lambda: self.client.zrange(self.keys.nodes, 0, -1, withscores=True)))

    # -- the tick: fetch, commit, confirm ---------------------------------------------

    def _lease_args(self, lease: Lease | None) -> tuple[str, str, int]:
        """Lock key, token and timeout for a script; token '' means no locking."""
        if lease is None:
            return self.keys.lock, "", 0
        return lease.name, lease.token, lease.timeout_ms

    def fetch(self, now: float, lease: Lease | None, batch: int, node_id: str,
              read_clock: bool = True, read_evictions: bool = True) -> Fetch:
        """The tick's round trip, waited for a replica as a commit is: a leader sends
        the held slots it reads (NotReplicated when no replica acknowledged it).
        ``read_clock``: whether it reads Redis's clock (``Fetch.server_time``);
        ``read_evictions``: whether a leader's reads the evicted-keys count."""
        lock_key, token, timeout_ms = self._lease_args(lease)
        reply, acknowledged = self._run_acknowledged(
            "tick",
            [self.keys.schedule, lock_key, self.keys.pending, self.keys.nodes,
             self.keys.held_definitions, self.keys.paused],
            [repr(now), batch, token, timeout_ms, node_id, "1" if read_clock else "",
             "1" if read_evictions else ""],
        )
        status, (clock, refused, *payload) = reply
        server_time = None if clock is None else float(clock)
        if status == "standby":
            holder, ttl = payload
            return Fetch("standby", server_time, refused, holder=holder or None,
                         holder_ttl_ms=int(ttl))
        if status == "acquired":
            return Fetch("acquired", server_time, refused)
        if status != "leader":
            raise ResponseError(f"tick.lua replied with the unknown status {status!r}")
        if not acknowledged:
            raise NotReplicated()
        evicted, replicas, next_score, flat_pending, rows_json, flat_held, flat_policies = (
            payload)
        self._note_replicas(replicas)
        rows = [Row(key, float(score), *fields)
                for key, score, *fields in json.loads(rows_json) or ()]
        return Fetch("leader", server_time, refused,
                     evicted_keys=None if evicted is None else int(evicted),
                     next_score=None if next_score is None else float(next_score),
                     pending=pairs(flat_pending), rows=rows, held=pairs(flat_held),
                     policies=pairs(flat_policies))

    def commit(self, ops: Sequence[Op], lease: Lease | None, node: str,
               claimed_at: float) -> set[str]:
        """Apply ``ops`` atomically if this node holds the lock; raises LockLost otherwise.
        Returns the keys whose update was skipped (edited since the read).
        ``node`` and ``claimed_at`` go into the pending messages commit.lua writes; the
        dispatch records name the node by its ``<host>:<pid>`` only."""
        # ensure_ascii=False: text that was not UTF-8 (kept as surrogates) goes back as
        # the bytes it was read as, which cjson passes through unchanged
        operations = json.dumps([op.as_json() for op in ops], ensure_ascii=False)
        lock_key, token, timeout_ms = self._lease_args(lease)
        reply, acknowledged = self._run_acknowledged(
            "commit", [self.keys.schedule, lock_key, self.keys.pending,
                       self.keys.held_definitions, self.keys.history],
            [token, timeout_ms, repr(claimed_at), node, operations, self.history_length,
             Holder.parse(node).process])
        _applied, skipped, history = reply.fenced()
        if not acknowledged:
            raise NotReplicated()
        self._note_history(history)
        return set(skipped)

    def _note_history(self, outcome: str) -> None:
        """Log once when dispatch records stop being written (another type at the
        stream's key, an ACL user without XADD), and once when they are written again:
        the runs go on either way, the history is advisory."""
        if outcome == "ok" and self.history_problem:
            logger.info("Dispatch history written again to %s", self.keys.history)
            self.history_problem = None
        elif outcome not in ("", "ok") and outcome != self.history_problem:
            logger.warning("Dispatch history not written to %s: %s (entries still run; "
                           "fix or delete that key)", self.keys.history, outcome)
            self.history_problem = outcome

    def confirm(self, task_ids: Iterable[str],
                misfires: Sequence[tuple[str, int, str]] = ()) -> None:
        """Forget pending slots whose publish the broker accepted (or that were dropped),
        releasing the held definitions they named; ``misfires`` (entry key, how many,
        last skipped as ISO 8601) counts held slots dropped past their misfire grace."""
        ids = list(task_ids)
        if ids or misfires:
            self._run("confirm", [self.keys.pending, self.keys.held_definitions],
                      [json.dumps(ids, ensure_ascii=False),
                       json.dumps([list(miss) for miss in misfires], ensure_ascii=False)])

    def failure_rows(self, limit: int) -> list[tuple[str, str | None, str | None]]:
        """The newest ``limit`` entries with a recorded failure: key, ``failures`` field and
        ``meta``, in two round trips whatever the size of the failing set."""
        # ZRANGE on negative indexes, not ZREVRANGE, which the documented ACL user lacks
        members = list(reversed(self.retry.call(
            lambda: self.client.zrange(self.keys.failing, -limit, -1))))
        return self._field_pairs(members, FAILURES, META)

    def _field_pairs(self, keys: list[str], first: str,
                     second: str) -> list[tuple[str, str | None, str | None]]:
        """Each key with two of its hash fields (None where absent or unreadable), in
        one pipelined round trip; none at all for no keys."""
        if not keys:
            return []
        fields = self._pipelined(
            lambda pipe: [pipe.hmget(key, first, second) for key in keys],
            raise_on_error=False)
        return [(key, *_or_absent(reply, (None, None)))
                for key, reply in zip(keys, fields, strict=True)]

    def record_failure(self, key: str, task_id: str, reason: str, node: str,
                       at: float | None = None) -> bool:
        """Record on the entry a dispatch Celery or the broker refused (see
        redbeat.failures). One attempt, logged and never raised: it runs after the slot
        was dropped, possibly on the publishing thread, and an error here must not turn
        into a broker outage or stop that thread."""
        at = time.time() if at is None else at
        try:
            reply = self._call(
                "failure", [key, self.keys.failing],
                [failure_json(task_id, reason, node, at), repr(at), RECENT_FAILURES])
            return reply.status == "ok"
        except RedisError as exc:
            logger.warning("beat: Could not record the failed dispatch %s: %s", task_id, exc)
            return False

    def hold(self, task_id: str, message: str, definition: str) -> bool:
        """Hold one slot outside a tick (run-now) as commit.lua holds claimed ones;
        False when that task id was already pending."""
        reply = self._run("hold", [self.keys.pending, self.keys.held_definitions],
                          [task_id, message, definition_sha1(definition), definition])
        return reply.status == "ok"

    def sweep_parked(self, offset: int, count: int, forget_before: float) -> tuple[int, int]:
        """Drop up to ``count`` parked members whose hash expired, from ``offset`` on, and
        the heartbeats (read by the same script) older than ``forget_before`` or that
        cannot be read (one more round trip, only when there are some); returns where to
        continue (0: start over) and how many members were dropped."""
        next_offset, dropped, flat = self._run(
            "sweep", [self.keys.schedule, self.keys.nodes], [offset, count]).payload
        fields = node_fields([(node, float(score)) for node, score in pairs(flat).items()])
        readable = heartbeats(fields)
        stale = [node for node in fields
                 if node not in readable or readable[node].at < forget_before]
        if stale:
            self.retry.call(lambda: self.client.zrem(self.keys.nodes, *stale))
        return int(next_offset), int(dropped)

    # -- the lock ------------------------------------------------------------------------

    def take_lock(self, lease: Lease) -> bool:
        """Set the lock to the lease's token if nobody holds it."""
        return bool(self.retry.call(lambda: self.client.set(
            lease.name, lease.token, nx=True, px=lease.timeout_ms)))

    def extend_lock(self, lease: Lease, timeout_ms: int | None = None) -> bool:
        """Set the lock's remaining time (default: the lease's timeout) if the lease
        holds it."""
        ms = lease.timeout_ms if timeout_ms is None else timeout_ms
        return self._run("extend", [lease.name], [lease.token, ms]).status == "ok"

    def release_lock(self, lease: Lease) -> bool:
        return self._run("release", [lease.name], [lease.token]).status == "ok"

    def farewell(self, lease: Lease | None, node_id: str) -> bool:
        """Release the lock (when a lease is given and holds it) and drop this node's
        heartbeat; returns whether the lock was released.

        One attempt, outside the retry policy, unlike every other call here: it runs at
        shutdown, where ten seconds of retries would outlast a supervisor's grace period,
        and a lock nobody releases expires by itself anyway."""
        released = False
        if lease is not None:
            released = self._call("release", [lease.name], [lease.token]).status == "ok"
        self.client.zrem(self.keys.nodes, node_id)
        return released

    def lock_holder(self, lock_key: str | None = None) -> tuple[str | None, int]:
        """The lock's value and remaining milliseconds (-2 when there is no lock)."""
        key = lock_key or self.keys.lock

        def read() -> Any:
            with self.client.pipeline(transaction=False) as pipe:
                pipe.get(key)
                pipe.pttl(key)
                return pipe.execute()
        holder, ttl = self.retry.call(read)
        return holder, int(ttl)

    # -- statics -------------------------------------------------------------------------

    def sync_statics(self, statics: Sequence[StaticWrite], changed: str, meta: str,
                     removed: Sequence[tuple[str, str]], lease: Lease | None,
                     whole: bool) -> StaticsSync:
        """Write ``statics`` where the stored data allows (see sync_statics.lua), delete
        ``removed`` (key, name), in one round trip fenced by ``lease`` (None: unfenced);
        ``whole``: ``statics`` is the whole beat_schedule, so the recorded names not in
        it are returned."""
        entries = json.dumps([
            [w.key, w.name, w.definition, w.policy or "", w.labels or "",
             None if w.score is None else repr(w.score),
             None if w.basis == FRESH else (w.basis if w.basis is not None else False)]
            for w in statics], ensure_ascii=False)
        gone = json.dumps([list(pair) for pair in removed], ensure_ascii=False)
        lock_key, token, _ = self._lease_args(lease)
        reply = self._run("sync_statics", [self.keys.schedule, lock_key, self.keys.statics],
                          [token, entries, changed, meta, gone, "1" if whole else ""])
        asked, unrecorded = json.loads(reply.fenced()[0])
        return StaticsSync([(index - 1, stored or None, None if score is False else float(score))
                            for index, stored, score in asked or ()], list(unrecorded or ()))

    # -- single entries (the Python API and the CLI) -------------------------------------

    def load(self, key: str) -> tuple[str | None, str | None, str | None]:
        """An entry's definition, meta and policy."""
        return self.load_fields(key)[:3]  # type: ignore[return-value]

    def load_fields(self, key: str) -> tuple[str | None, ...]:
        """An entry's definition, meta, policy and labels, in one round trip."""
        return tuple(self.retry.call(
            lambda: self.client.hmget(key, DEFINITION, META, POLICY, LABELS)))

    def save(self, key: str, definition: str, meta: str, score: float, changed: str,
             policy: str | None = None,
             rescore: Callable[[str | None], float] | None = None,
             labels: str | None = None) -> None:
        """Definition always, meta only when absent (a re-save keeps the run history);
        the policy field only for entries that have one; atomically, in one round trip
        (save.lua) when nothing stored contradicts ``score``.

        ``rescore`` is given when ``score`` is the next run after ``meta``'s last run:
        then it holds only where ``meta`` is the stored history (none stored yet), or the
        stored definition and policy are these and the stored score is kept. Otherwise
        the script writes nothing and names the stored meta, and ``rescore(stored meta)``
        gives the score to write while that meta is still the stored one (one more round
        trip, again if a tick wrote in between).

        ``labels``: the labels field's text, ``[]`` to remove it, None to keep it."""
        self.save_many([Save(key, definition, meta, score, changed, policy, rescore, labels)])

    def save_many(self, saves: Sequence[Save], chunk: int = 500) -> None:
        """:meth:`save` for many entries, ``chunk`` scripts per round trip (a change by
        label to thousands of entries); each save stays atomic on its own. One save is
        one script call: a pipeline of scripts first asks whether they are loaded."""
        for first in range(0, len(saves), chunk):
            part = saves[first:first + chunk]
            if len(part) == 1:
                replies = [self._run("save", [part[0].key, self.keys.schedule],
                                     self._save_args(part[0], part[0].score, ""))]
            else:
                replies = [script_reply("save", raw) for raw in self._pipelined(
                    lambda pipe, part=part: [  # type: ignore[misc]
                        self._scripts["save"](keys=[s.key, self.keys.schedule],
                                              args=self._save_args(s, s.score, ""),
                                              client=pipe)
                        for s in part])]
            for request, reply in zip(part, replies, strict=True):
                while reply.status == "meta" and request.rescore is not None:
                    stored = reply.payload[0]
                    reply = self._run("save", [request.key, self.keys.schedule],
                                      self._save_args(request, request.rescore(stored),
                                                      "" if stored is None else f"={stored}"))
                if reply.status != "ok":
                    raise ResponseError(f"save.lua replied {reply!r}")

    @staticmethod
    def _save_args(request: Save, score: float, expected: str) -> list[str]:
        return [request.definition, request.meta, repr(score), request.changed,
                request.policy or "", "1" if request.rescore is not None else "", expected,
                request.labels or ""]

    def field_window(self, start: int, stop: int, field: str) -> list[tuple[str, str]]:
        """``field`` of the schedule's members ranked ``start`` to ``stop`` ("" where the
        hash has none), in one round trip (view_metas.lua)."""
        return [tuple(row) for row in json.loads(  # type: ignore[misc]
            self._run("view_metas", [self.keys.schedule], [start, stop, field]).payload[0])]

    def delete_many(self, entries: Sequence[tuple[str, str]], chunk: int = 500) -> int:
        """:meth:`delete_entry` for many ``(key, name)`` pairs, ``chunk`` per round trip;
        how many held an entry."""
        deleted = 0
        for first in range(0, len(entries), chunk):
            part = entries[first:first + chunk]
            replies = self._pipelined(lambda pipe, part=part: [  # type: ignore[misc]
                self._scripts["remove"](keys=[key, self.keys.schedule, self.keys.statics],
                                        args=[name], client=pipe) for key, name in part])
            deleted += sum(script_reply("remove", raw).status == "ok" for raw in replies)
        return deleted

    def write_meta(self, key: str, meta: str, score: float) -> None:
        def write() -> None:
            with self.client.pipeline(transaction=True) as pipe:
                pipe.hset(key, META, meta)
                pipe.zadd(self.keys.schedule, {key: score})
                pipe.execute()
        self.retry.call(write)

    def delete(self, key: str) -> None:
        def write() -> None:
            with self.client.pipeline(transaction=True) as pipe:
                pipe.zrem(self.keys.schedule, key)
                pipe.delete(key)
                pipe.execute()
        self.retry.call(write)

    def delete_entry(self, key: str, name: str) -> bool:
        """Delete the entry (its hash, member and static name) in one atomic round trip;
        False, touching nothing, when ``key`` holds no entry."""
        return self._run("remove", [key, self.keys.schedule, self.keys.statics],
                         [name]).status == "ok"

    def due_keys(self, now: float, limit: int) -> list[str]:
        """Keys due at ``now`` (at most ``limit``), then the one due next."""
        due, upcoming = self._pipelined(lambda pipe: (
            pipe.zrangebyscore(self.keys.schedule, 0, now, start=0, num=limit),
            pipe.zrangebyscore(self.keys.schedule, f"({now!r}", "+inf", start=0, num=1)))
        return [*due, *upcoming]

    def rank(self, key: str) -> int | None:
        return self.retry.call(lambda: self.client.zrank(self.keys.schedule, key))

    # -- the operator API (redbeat.manage, the CLI) ---------------------------------------
    # Each pipeline is built inside the function the retry policy calls: redis-py's
    # Pipeline.execute empties the pipeline, so retrying a built one would run nothing.

    def _pipelined(self, build: Callable[[Any], Any], transaction: bool = False,
                   raise_on_error: bool = True) -> list[Any]:
        def run() -> list[Any]:
            with self.client.pipeline(transaction=transaction) as pipe:
                build(pipe)
                return pipe.execute(raise_on_error=raise_on_error)
        return self.retry.call(run)

    def static_names(self) -> set[str]:
        return set(self.retry.call(lambda: self.client.smembers(self.keys.statics)))

    def record_statics(self, names: Iterable[str]) -> None:
        names = list(names)
        if names:
            self.retry.call(lambda: self.client.sadd(self.keys.statics, *names))

    def forget_static(self, name: str) -> None:
        self.retry.call(lambda: self.client.srem(self.keys.statics, name))

    def page(self, start: int, count: int) -> list[tuple[str, float, dict[str, str]]]:
        """Members ``start`` .. ``start + count - 1`` in due order, each with its hash."""
        members = self.retry.call(lambda: self.client.zrange(
            self.keys.schedule, start, start + count - 1, withscores=True))
        return self.with_hashes(members)

    def with_hashes(self, members: Sequence[tuple[str, float]]
                    ) -> list[tuple[str, float, dict[str, str]]]:
        """Each member with its hash, in one round trip; a member whose key holds another
        type reads as an empty hash (listings skip it, as an expired one: the leader's
        tick drops the member). It failed every listing of the schedule."""
        if not members:
            return []
        hashes = self._pipelined(lambda pipe: [pipe.hgetall(key) for key, _ in members],
                                 raise_on_error=False)
        return [(key, score, _hash_or_empty(fields))
                for (key, score), fields in zip(members, hashes, strict=True)]

    def members(self, start: int, count: int, parked: bool) -> list[tuple[str, float]]:
        """Members in due order without their hashes: the scheduled ones (score 0 and
        up), or the parked ones (disabled, finished, quarantined: score below 0)."""
        low, high = ("-inf", "(0") if parked else (0, "+inf")
        return self.retry.call(lambda: self.client.zrangebyscore(
            self.keys.schedule, low, high, start=start, num=count, withscores=True))

    def count_members(self) -> int:
        """Members of the schedule, parked ones included (ZCARD)."""
        return int(self.retry.call(lambda: self.client.zcard(self.keys.schedule)))

    def count_scheduled(self) -> int:
        return int(self.retry.call(lambda: self.client.zcount(self.keys.schedule, 0, "+inf")))

    def all_members(self) -> list[tuple[str, float]]:
        """Every member and score, no hash: what sorting by name needs."""
        return self.retry.call(lambda: self.client.zrange(self.keys.schedule, 0, -1,
                                                           withscores=True))

    def entry_record(self, key: str, name: str) -> tuple[dict[str, str], float | None, bool]:
        """An entry's hash, its score and whether it is a static, in one round trip."""
        fields, score, static = self._pipelined(lambda pipe: (
            pipe.hgetall(key), pipe.zscore(self.keys.schedule, key),
            pipe.sismember(self.keys.statics, name)), raise_on_error=False)
        _raise_error(score, static)
        return _hash_or_empty(fields), score, bool(static)

    def history(self, key: str, want: int, scan: int,
                page: int = 1000) -> list[tuple[str, dict[str, str]]]:
        """The newest ``want`` records of the entry at ``key`` in the history stream, newest
        first, as (record id, fields): the stream read backwards a page at a time (one
        round trip each), through at most ``scan`` records. HistoryUnreadable when Redis
        refuses the read: the history is advisory, the entry itself still readable."""
        return self._entry_records(self.keys.history, key, want, scan, page)

    def outcomes(self, key: str, want: int, scan: int,
                 page: int = 1000) -> list[tuple[str, dict[str, str]]]:
        """The newest ``want`` run outcomes of the entry at ``key`` (the outcomes stream
        the workers append to), read as :meth:`history` reads dispatches."""
        return self._entry_records(self.keys.outcomes, key, want, scan, page)

    def _entry_records(self, stream: str, key: str, want: int, scan: int,
                       page: int) -> list[tuple[str, dict[str, str]]]:
        try:
            return self._newest_of(stream, key, want, scan, page)
        except ResponseError as exc:  # another type at the key, or no XREVRANGE in the ACL
            raise HistoryUnreadable(f"{stream}: {exc}") from exc

    def _newest_of(self, stream: str, key: str, want: int, scan: int,
                   page: int) -> list[tuple[str, dict[str, str]]]:
        def read_page(first: str, count: int) -> list[tuple[str, dict[str, str]]]:
            return self.retry.call(
                lambda: self.client.xrevrange(stream, first, "-", count=count))

        found: list[tuple[str, dict[str, str]]] = []
        start, read = "+", 0
        while len(found) < want and read < scan:
            count = min(page, scan - read)
            # from the last id read, inclusive ('(' needs Redis 6.2): it is skipped below
            batch = read_page(start, count + (start != "+"))
            if start != "+" and batch and batch[0][0] == start:
                batch = batch[1:]
            read += len(batch)
            found += [(record_id, fields) for record_id, fields in batch
                      if fields.get("key") == key]
            if len(batch) < count:
                break  # the oldest record
            start = batch[-1][0]
        return found[:want]

    # -- run outcomes: what the workers report (redbeat.worker) ---------------------------

    def report_run(self, key: str, kind: str, report: dict[str, Any], keep: int,
                   lost_after: float) -> RunReport:
        """One report of a worker about a run beat dispatched (lua/outcome.lua): ``kind``
        'start', 'alive' or 'finish'; ``report`` task_id, due_ms, state, and worker,
        runtime, error when known. Returns what was written ('run', 'stale', 'gone')
        and, when recorded, the run's bound (the entry's, else ``lost_after``). One
        round trip."""
        reply = self._run("outcome", [key, self.keys.outcomes, self.keys.failing_runs,
                                      self.keys.schedule],
                          [kind, json.dumps(report, ensure_ascii=False), keep,
                           repr(float(lost_after))])
        bound = reply.payload[1] if len(reply.payload) > 1 else None
        return RunReport(str(reply.payload[0]), None if bound is None else float(bound))

    def append_outcomes(self, reports: Sequence[tuple[str, dict[str, Any]]], keep: int,
                        left_alone: Iterable[str] = ()) -> None:
        """Runs beat gave up on (their ``run`` field already written by the commit): one
        outcome record each and their failed-run counts, in one script call; none for
        the entries in ``left_alone`` (the commit skipped them: edited since the read)."""
        skipped = set(left_alone)
        given = [{**report, "key": key} for key, report in reports if key not in skipped]
        if given:
            self._run("outcome", [self.keys.schedule, self.keys.outcomes,
                                  self.keys.failing_runs, self.keys.schedule],
                      ["append", json.dumps(given, ensure_ascii=False), keep, "0"])

    def failing_runs(self, at_least: int) -> list[tuple[str, int]]:
        """Entries whose last ``at_least`` runs (or more) failed, with how many in a row."""
        rows = self.retry.call(lambda: self.client.zrangebyscore(
            self.keys.failing_runs, at_least, "+inf", withscores=True))
        return [(key, int(count)) for key, count in rows]

    def outcomes_after(self, last_id: str, count: int) -> list[tuple[str, dict[str, str]]]:
        """Outcome records appended after ``last_id`` ('0' for all kept), oldest first,
        at most ``count``: what the metrics fold into their counters at a scrape."""
        batch = self.retry.call(lambda: self.client.xrange(self.keys.outcomes, last_id, "+",
                                                           count=count + 1))
        return [record for record in batch if record[0] != last_id][:count]

    def due_rows(self, now: float, limit: int) -> list[tuple[str, str | None, str | None]]:
        """Key, definition and meta of up to ``limit`` entries due at ``now``."""
        keys = self.retry.call(lambda: self.client.zrangebyscore(
            self.keys.schedule, 0, now, start=0, num=limit))
        return self._field_pairs(keys, DEFINITION, META)

    def write_batch(self, build: Callable[[Any], Any]) -> None:
        """Writes queued by ``build`` on a transaction, applied all or nothing."""
        self._pipelined(build, transaction=True)

    def snapshot(self, now: float, upcoming: int, sample: int) -> dict[str, Any]:
        """What ``redbeat status`` shows, in one round trip of a fixed number of commands
        whatever the schedule size: counts, the next ``upcoming`` members, and the
        quarantine reasons of at most ``sample`` parked members (parked_sample.lua: a
        status probe must not read every parked entry). The script goes as EVAL text, not
        EVALSHA: a pipeline cannot reload a script the server lost, and this is no hot path."""
        keys = self.keys
        (holder, ttl, total, overdue, oldest, following, parked, waiting, parked_sample,
         pending, nodes, server, policy, clock, memory, stats,
         paused) = self._pipelined(lambda pipe: (
            pipe.get(keys.lock), pipe.pttl(keys.lock), pipe.zcard(keys.schedule),
            pipe.zcount(keys.schedule, "(0", now),  # score 0: waiting, not overdue
            pipe.zrangebyscore(keys.schedule, "(0", now, start=0, num=1, withscores=True),
            pipe.zrangebyscore(keys.schedule, f"({now}", "+inf", start=0, num=upcoming,
                               withscores=True),
            pipe.zcount(keys.schedule, PARKED_SCORE, PARKED_SCORE),
            pipe.zcount(keys.schedule, 0, 0),
            pipe.eval(load_script("parked_sample"), 1, keys.schedule, sample),
            pipe.eval(load_script("held_sample"), 1, keys.pending, 0),
            pipe.zrange(keys.nodes, 0, -1, withscores=True),
            pipe.info("server"),
            pipe.config_get("maxmemory-policy"),  # an ACL may refuse these five: not fatal
            pipe.time(), pipe.info("memory"), pipe.info("stats"),
            pipe.get(keys.paused),
        ), raise_on_error=False)
        _raise_error(holder, ttl, total, overdue, oldest, following, parked, waiting,
                     parked_sample, pending, nodes, paused)
        sampled = script_reply("parked_sample", parked_sample).payload
        pending = int(script_reply("held_sample", pending).payload[0])
        reasons = list(zip(sampled[0::2], sampled[1::2], strict=True))
        return {"holder": holder, "ttl": ttl, "total": total, "overdue": overdue,
                "oldest": oldest, "following": following, "parked": parked, "waiting": waiting,
                "reasons": [(key, reason or None) for key, reason in reasons],
                "pending": pending, "nodes": node_fields(nodes), "server": server,
                "policy": policy,
                "time": clock[0] + clock[1] / 1e6 if isinstance(clock, tuple) else None,
                "memory": _dict_or_empty(memory), "stats": _dict_or_empty(stats),
                "paused": paused}

    def set_paused(self, record: str | None) -> None:
        """Pause the schedule (``record``: who and when, JSON) or resume it (None)."""
        if record is None:
            self.retry.call(lambda: self.client.delete(self.keys.paused))
        else:
            self.retry.call(lambda: self.client.set(self.keys.paused, record))

    # -- ordered views (redbeat.browse, the web view) -------------------------------------
    # Every read here is bounded: a rank window or a score count is O(log N + window) in
    # Redis, so a page costs the same at a hundred entries and at a million.

    def view_counts(self, index: str, below: float) -> tuple[int, int]:
        """The size of the sorted set ``index`` and how many of its members score below
        ``below`` (the parked band of the schedule is everything below 0)."""
        total, under = self._pipelined(lambda pipe: (
            pipe.zcard(index), pipe.zcount(index, "-inf", f"({below!r}")))
        return int(total), int(under)

    def band_ranks(self, low: float, high: float) -> tuple[int, int]:
        """The first rank of the schedule's members scoring from ``low`` (inclusive) and
        the first past those below ``high`` (exclusive): a score band as a rank range."""
        start, stop = self._pipelined(lambda pipe: (
            pipe.zcount(self.keys.schedule, "-inf", f"({low!r}"),
            pipe.zcount(self.keys.schedule, "-inf", f"({high!r}")))
        return int(start), int(stop)

    def window(self, index: str, start: int, stop: int) -> list[tuple[str, float]]:
        """Members of ``index`` from rank ``start`` to ``stop`` (inclusive), with scores."""
        if stop < start:
            return []
        return self.retry.call(
            lambda: self.client.zrange(index, start, stop, withscores=True))

    def match_names(self, index: str, start: int, stop: int,
                    text: str) -> list[tuple[int, str]]:
        """The members of ``index`` from rank ``start`` to ``stop`` whose entry name
        contains ``text`` (ASCII case-insensitive), with their ranks: matched inside
        Redis (view_match.lua), so only the matches cross the wire."""
        flat = self._run("view_match", [index],
                         [start, stop, text.lower(), self.keys.prefix]).payload
        return [(int(rank), member) for rank, member in zip(flat[0::2], flat[1::2],
                                                              strict=True)]

    def view_rows(self, keys: Sequence[str]) -> list[tuple[dict[str, str], float | None, bool]]:
        """For each key: the entry's fields a table shows (its history left out), its
        schedule score and whether it is a static; one round trip."""
        wanted = (DEFINITION, META, POLICY, QUARANTINE, FAILURES, MISFIRES, CHANGED, RUN,
                  CREATED, LABELS)
        replies = self._pipelined(lambda pipe: [
            (pipe.hmget(key, *wanted), pipe.zscore(self.keys.schedule, key),
             pipe.sismember(self.keys.statics, self.keys.name_of(key))) for key in keys],
            raise_on_error=False)
        rows = []
        for at in range(0, len(replies), 3):
            values, score, static = replies[at:at + 3]
            values = _or_absent(values, [None] * len(wanted))
            _raise_error(score, static)
            fields = {name: value for name, value in zip(wanted, values, strict=True)
                      if value is not None}
            rows.append((fields, score, bool(static)))
        return rows

    def view_age(self, index: str, lifetime: int) -> float | None:
        """Seconds since the view ``index`` was built (it is built to expire after
        ``lifetime`` seconds); None when there is none."""
        ttl = self.retry.call(lambda: self.client.pttl(index))
        return None if ttl < 0 else lifetime - ttl / 1000

    def build_name_view(self, lifetime: int) -> None:
        """Copy the schedule's members with every score 0 into ``view_by_name``: Redis
        orders equal scores by member, and every key shares the prefix, so the copy is in
        name order. One command, run inside Redis (tens of ms at 100,000 entries)."""
        target = self.keys.view_by_name
        self._pipelined(lambda pipe: (
            pipe.zunionstore(target, {self.keys.schedule: 0}),
            pipe.expire(target, lifetime)), transaction=True)

    def build_last_run_view(self, score_of: Callable[[str, str | None], float],
                            lifetime: int, chunk: int = 2000) -> None:
        """Write ``view_by_last_run``: every schedule member scored by
        ``score_of(key, meta)``. Walks the schedule ``chunk`` members per round trip
        (view_metas.lua) into a scratch key, then renames it over the view, so readers
        never see half a view. The one read here that grows with the schedule: the
        caller rebuilds it at most every few seconds, never per page."""
        scratch = self.keys.view_by_last_run_building
        self.retry.call(lambda: self.client.delete(scratch))
        start = 0
        while rows := self.field_window(start, start + chunk - 1, "meta"):
            self._add(scratch, {key: score_of(key, meta or None) for key, meta in rows})
            start += chunk
        target = self.keys.view_by_last_run
        if start == 0:
            self.retry.call(lambda: self.client.delete(target))
            return
        self._pipelined(lambda pipe: (pipe.rename(scratch, target),
                                      pipe.expire(target, lifetime)), transaction=True)

    def _add(self, index: str, scores: dict[str, float]) -> None:
        self.retry.call(lambda: self.client.zadd(index, scores))

    def due_counts(self, edges: Sequence[float]) -> list[int]:
        """How many schedule members score in each ``[edges[i], edges[i+1])``; one round
        trip of one ZCOUNT per bucket (1,440 for a day by minute)."""
        counts = self._pipelined(lambda pipe: [
            pipe.zcount(self.keys.schedule, f"{low!r}", f"({high!r}")
            for low, high in zip(edges[:-1], edges[1:], strict=True)])
        return [int(count) for count in counts]

    def band_entries(self, low: float, high: float, skip: int, count: int
                     ) -> list[tuple[str, float, str | None, str | None, str | None]]:
        """Up to ``count`` schedule members scoring in ``[low, high)``, after the first
        ``skip`` of them, in score order, each with its definition, meta and policy: one
        round trip (band_entries.lua) whatever the schedule's size (a score range with a
        limit is O(log N + skip + count) in Redis)."""
        rows = json.loads(self._run("band_entries", [self.keys.schedule],
                                    [repr(low), f"({high!r}", skip, count]).payload[0])
        return [(key, float(score), definition or None, meta or None, policy or None)
                for key, score, definition, meta, policy in rows]

    def read_cached(self, key: str) -> tuple[str | None, int]:
        """A cached text and its remaining time to live in ms (negative: none)."""
        text, ttl = self._pipelined(lambda pipe: (pipe.get(key), pipe.pttl(key)))
        return text, int(ttl)

    def write_cached(self, key: str, text: str, lifetime: int) -> None:
        """Cache ``text`` under ``key`` for ``lifetime`` seconds."""
        self.retry.call(lambda: self.client.set(key, text, ex=lifetime))

    def count_quarantined(self, window: int = 5000) -> int:
        """How many parked entries are quarantined: ``window`` parked members per round
        trip (count_quarantined.lua), so the metrics never read the entries themselves."""
        offset, total = 0, 0
        while True:
            offset, found = self._run("count_quarantined", [self.keys.schedule],
                                      [offset, window]).payload
            total += int(found)
            if not offset:
                return total

    def held_sample(self, limit: int) -> tuple[int, dict[str, str]]:
        """How many slots are held, and up to ``limit`` of them, the oldest due first
        (task id -> message; '' for a missing record), in one round trip
        (held_sample.lua), never every record."""
        size, *flat = self._run("held_sample", [self.keys.pending], [limit]).payload
        return int(size), pairs(flat)

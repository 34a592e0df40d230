"""Prometheus metrics: what this beat did, and how the schedule stands.

Beat exposes them when ``redbeat_metrics_port`` is set (on ``redbeat_metrics_address``,
127.0.0.1 by default); ``redbeat web`` serves the schedule-level ones at ``/metrics``.
Names follow Prometheus conventions; docs/web.md lists each with a sample alert.

The scheduler calls this module from a few places only (see :class:`Recorder`); with no
port set, the recorder holds no metric and every call returns at once.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from celery import Celery

    from .settings import RedBeatConfig
    from .store import ScheduleStore

logger = logging.getLogger("celery.beat")

#: Outcomes of a dispatch: handed to the broker; left held because the broker did not
#: answer (re-sent later with the same id); refused by Celery or the broker for what it
#: is (recorded on the entry); not sent because it was later than its misfire grace, or
#: due while the entry's previous run was still going (``overlap``: docs/outcomes.md).
OUTCOMES = ("sent", "held", "failed", "skipped")
#: Dispatch lag buckets (seconds from a slot's due time to its handing to the broker).
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
               300.0)
TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Seconds the quarantined count is reused: counting walks every parked member (a few
#: milliseconds per 5,000 in Redis), which a scrape every few seconds need not repeat.
QUARANTINE_CACHE = 30.0

#: Run outcomes reported by workers (redbeat_worker_outcomes): the first ENTRY_LABELS
#: entries seen get their own ``entry`` label, the rest share OTHER_ENTRIES, so a schedule
#: of a million entries exports a bounded number of series.
RUN_OUTCOMES = ("success", "failure", "retry", "revoked", "lost")
ENTRY_LABELS = 100
OTHER_ENTRIES = "_other"
RUNTIME_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: Outcome records read from the stream at most per scrape (the rest at the next one).
OUTCOMES_PER_SCRAPE = 10_000

F = TypeVar("F", bound=Callable[..., float])


class Recorder:
    """This beat's own metrics: dispatches by outcome, dispatch lag, tick duration,
    leadership. Inert (every method returns at once) when built without a registry."""

    def __init__(self, registry: Any = None) -> None:
        self.registry = registry
        self.leading = False
        if registry is None:
            return
        from prometheus_client import Counter, Gauge, Histogram

        self.dispatches = Counter("redbeat_dispatches", "Slots dispatched, by outcome: sent, "
                                  "held (broker down; re-sent later), failed (refused), "
                                  "skipped (past the misfire grace, or overlapping a run "
                                  "still going)", ["outcome"],
                                  registry=registry)
        for outcome in OUTCOMES:
            self.dispatches.labels(outcome)  # every outcome exported from the start, at 0
        self.lag = Histogram("redbeat_dispatch_lag_seconds", "From a slot's due time to its "
                             "handing to the broker", buckets=LAG_BUCKETS, registry=registry)
        self.ticks = Histogram("redbeat_tick_duration_seconds", "Duration of one tick",
                               buckets=TICK_BUCKETS, registry=registry)
        self.leader = Gauge("redbeat_leader", "1 while this beat holds the lock",
                            registry=registry)
        self.changes = Counter("redbeat_leadership_changes", "Times this beat took or lost "
                               "the lock", registry=registry)

    def dispatched(self, outcome: str, count: int = 1) -> None:
        if self.registry is not None and count:
            self.dispatches.labels(outcome).inc(count)

    def late_by(self, due: datetime) -> None:
        """A slot was handed to the broker: its lag from its due time."""
        if self.registry is not None:
            self.lag.observe(max(time.time() - due.timestamp(), 0.0))

    def ticked(self, seconds: float, leading: bool) -> None:
        if self.registry is None:
            return
        self.ticks.observe(seconds)
        if leading != self.leading:
            self.changes.inc()
        self.leading = leading
        self.leader.set(1 if leading else 0)


def measured_tick(tick: F) -> F:
    """Times a scheduler's ``tick`` and reads its leadership after it, into the
    scheduler's ``metrics`` recorder."""
    @functools.wraps(tick)
    def measured(self: Any, *args: Any, **kwargs: Any) -> float:
        started = time.monotonic()
        try:
            return tick(self, *args, **kwargs)
        finally:
            recorder = getattr(self, "metrics", None)
            if recorder is not None:
                recorder.ticked(time.monotonic() - started, bool(self.leading))
    return measured  # type: ignore[return-value]


class OutcomeCounts:
    """Run outcomes folded into counters by entry, and runtimes into a histogram, as a
    scrape reads them from the outcomes stream (only the records after the last one it
    read: the stream is the fleet's, the counters this process's)."""

    def __init__(self) -> None:
        self.last_id = "0"
        self.outcomes: dict[tuple[str, str], int] = {}
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.named: set[str] = set()

    def label(self, key: str) -> str:
        if key in self.named or len(self.named) < ENTRY_LABELS:
            self.named.add(key)
            return key
        return OTHER_ENTRIES

    def fold(self, records: list[tuple[str, dict[str, str]]], keys: Any) -> None:
        for record_id, fields in records:
            self.last_id = record_id
            outcome = fields.get("outcome")
            if outcome not in RUN_OUTCOMES:
                continue
            entry = self.label(keys.name_of(fields.get("key", "")))
            self.outcomes[(entry, outcome)] = self.outcomes.get((entry, outcome), 0) + 1
            try:
                runtime = float(fields["runtime"])
            except (KeyError, ValueError):
                continue
            if outcome == "retry" or not runtime >= 0:
                continue
            counts = self.buckets.setdefault(entry, [0] * (len(RUNTIME_BUCKETS) + 1))
            counts[next((i for i, edge in enumerate(RUNTIME_BUCKETS) if runtime <= edge),
                        len(RUNTIME_BUCKETS))] += 1
            self.sums[entry] = self.sums.get(entry, 0.0) + runtime

    def families(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        outcomes = CounterMetricFamily("redbeat_run_outcomes", "Runs of beat's slots by how "
                                       "they ended, as workers with redbeat_worker_outcomes "
                                       "report them (entry: the first 100 entries seen, the "
                                       "others as _other)", labels=["entry", "outcome"])
        for (entry, outcome), count in sorted(self.outcomes.items()):
            outcomes.add_metric([entry, outcome], count)
        yield outcomes
        runtimes = HistogramMetricFamily("redbeat_run_runtime_seconds", "Runtime of the runs "
                                         "of beat's slots that ended (retries left out)",
                                         labels=["entry"])
        for entry, counts in sorted(self.buckets.items()):
            cumulative, total = [], 0
            for edge, count in zip((*map(str, RUNTIME_BUCKETS), "+Inf"), counts, strict=True):
                total += count
                cumulative.append((edge, total))
            runtimes.add_metric([entry], cumulative, self.sums[entry])
        yield runtimes


class ScheduleCollector:
    """Schedule-level gauges, read from Redis at each scrape through the management API
    (one round trip for the counts, and the quarantined count at most every
    QUARANTINE_CACHE seconds). A scrape that cannot read Redis exports only
    ``redbeat_schedule_up 0``."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self._quarantined: tuple[float, int] | None = None
        self._lock = threading.Lock()
        self._runs = OutcomeCounts()

    @cached_property
    def store(self) -> ScheduleStore:
        """The app's schedule on the app's client, without the retry policy: a scrape
        while Redis is away must answer ``redbeat_schedule_up 0`` within the scrape's
        timeout, not retry for the scheduler's retry period."""
        from .retry import RetryPolicy
        from .runtime import store_for
        from .store import ScheduleStore

        shared = store_for(self.app)
        return ScheduleStore(shared.client, shared.keys, RetryPolicy(retry_period=0))

    def _count_quarantined(self) -> int:
        with self._lock:
            cached = self._quarantined
            if cached is None or time.monotonic() - cached[0] > QUARANTINE_CACHE:
                cached = (time.monotonic(), self.store.count_quarantined())
                self._quarantined = cached
            return cached[1]

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from . import manage

        up = GaugeMetricFamily("redbeat_schedule_up", "1 when the schedule could be read")
        try:
            now = time.time()
            state = manage.status(self.app, now=now, upcoming=0, store=self.store)
            quarantined = self._count_quarantined()
        except Exception as exc:  # a scrape must answer, whatever Redis does
            logger.warning("metrics: cannot read the schedule: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        entries = GaugeMetricFamily("redbeat_entries", "Entries by state: scheduled (a next "
                                    "run), waiting (score 0), parked (disabled, finished or "
                                    "quarantined)", labels=["state"])
        scheduled = state.entries - state.parked - state.waiting
        for name, value in (("scheduled", scheduled), ("waiting", state.waiting),
                            ("parked", state.parked)):
            entries.add_metric([name], value)
        yield entries
        yield _gauge("redbeat_quarantined_entries", "Entries quarantined (parked with a "
                     "reason: an unreadable definition or schedule)", quarantined)
        yield _gauge("redbeat_overdue_entries", "Entries whose next run has passed",
                     state.overdue)
        yield _gauge("redbeat_overdue_seconds", "How late the most overdue entry is",
                     state.most_late_s)
        yield _gauge("redbeat_held_slots", "Slots claimed and not yet confirmed sent",
                     state.pending)
        yield _gauge("redbeat_leader_present", "1 while some beat holds the lock",
                     1 if state.lock_holder else 0)
        yield _gauge("redbeat_schedule_paused", "1 while an operator has paused the whole "
                     "schedule (nothing is sent)", 1 if state.paused else 0)
        yield _gauge("redbeat_lock_ttl_seconds", "Seconds until the lock expires unless "
                     "renewed", max(state.lock_ttl_ms, 0) / 1000)
        ages = GaugeMetricFamily("redbeat_node_heartbeat_age_seconds", "Seconds since each "
                                 "beat's last tick (on Redis's clock)", labels=["node", "role"])
        for node, (role, at) in sorted(state.nodes.items()):
            ages.add_metric([node, role], max(state.server_time - at, 0.0))
        yield ages
        yield from self._run_outcomes()

    def _run_outcomes(self) -> Iterator[Any]:
        """The outcome counters, after folding in the records since the last scrape (one
        round trip)."""
        with self._lock:
            try:
                self._runs.fold(self.store.outcomes_after(self._runs.last_id,
                                                          OUTCOMES_PER_SCRAPE), self.store.keys)
            except Exception as exc:  # the counters so far are still true
                logger.warning("metrics: cannot read the run outcomes: %s", exc)
            families = list(self._runs.families())
        yield from families


def _gauge(name: str, documentation: str, value: float) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, documentation, value=value)


def schedule_registry(app: Celery) -> Any:
    """A registry holding only the schedule-level gauges (what ``redbeat web`` serves)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ScheduleCollector(app))
    return registry


#: Endpoints started in this process: (address, port) -> the recorder they serve. A
#: second scheduler in the same process (tests, embedded beat) shares it.
_SERVED: dict[tuple[str, int], Recorder] = {}
_SERVED_LOCK = threading.Lock()


def recorder_for(app: Celery, config: RedBeatConfig) -> Recorder:
    """The recorder a scheduler reports to: inert without ``redbeat_metrics_port``;
    otherwise one serving its metrics and the schedule's on that port (started once per
    process). A port that cannot be bound is logged and the scheduler runs without
    metrics: monitoring must not stop the schedule."""
    if config.metrics_port is None:
        return Recorder()
    where = (config.metrics_address, int(config.metrics_port))
    with _SERVED_LOCK:
        if where in _SERVED:
            return _SERVED[where]
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            logger.error("beat: redbeat_metrics_port is set but prometheus_client is not "
                         "installed (pip install 'celery-beatkeeper[metrics]'); no metrics")
            return Recorder()
        registry = CollectorRegistry(auto_describe=False)
        recorder = Recorder(registry)
        registry.register(ScheduleCollector(app))
        try:
            start_http_server(where[1], addr=where[0], registry=registry)
        except OSError as exc:
            logger.error("beat: Cannot serve metrics on %s:%s (%s); no metrics", *where, exc)
            return Recorder()
        logger.info("beat: Metrics at http://%s:%s/metrics", *where)
        _SERVED[where] = recorder
        return recorder


__all__ = ["OUTCOMES", "Recorder", "ScheduleCollector", "measured_tick", "recorder_for",
           "schedule_registry"]

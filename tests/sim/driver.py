"""Drive the real scheduler over simulated time and compare what it sent with the oracle.

One :class:`Scenario` is an app (zone, ``enable_utc``), a set of entries saved at its
start, a span of simulated time and a few downtimes (or windows of up-time). The real
``RedBeatScheduler.tick()`` runs against a real redis-server under a fake clock that
jumps: to the next score in the schedule plus a random lateness, with random extra
ticks in between, and over each downtime (after which a new scheduler, as a restarted
beat, takes over). The next score is the one the tick itself worked out (what beat
sleeps until; read from Redis when a tick did not get that far): one round trip less
per tick, and the next tick checks it (outcome ``NEXT_DUE``: nothing it reads as due is
earlier). Every message the scheduler would publish is recorded with the moment it was
sent. The oracle (tests/sim/oracle.py) is then given the moments beat ticked and says
what each entry must have sent.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from typing import Any

import redis
from celery import Celery

from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.settings import ensure_conf

from .oracle import Rules, Zone, expected_dispatches, jitter_problems

UTC = timezone.utc
TASK = "sim.task"
#: The outcome that checks the tick's own next due time (where the driver jumps to).
NEXT_DUE = "(next due time)"
SHORTEST_DOWNTIME, LONGEST_DOWNTIME = 45.0, 4.5 * 86400


@dataclass(frozen=True)
class Span:
    """What a case's oracle is asked: the runs after ``created`` up to ``end``."""

    created: datetime
    end: datetime
    app_zone: str
    zones: Callable[[str], Zone]


@dataclass
class Case:
    name: str
    #: The schedule object saved through the real API (gets the app).
    schedule: Callable[[Celery], Any]
    #: The oracle's runs of that schedule (window applied).
    runs: Callable[[Span], list[datetime]]
    policy: dict[str, Any] = field(default_factory=dict)
    #: Saved without ``last_run_at``: a one-off's first due time is its own; any other
    #: schedule counts as run when created, by its own clock (``nowfun``).
    never_ran: bool = False
    #: Solar events: a sent slot matches an oracle run this close (seconds).
    tolerance: float = 0.0
    #: Configured in ``beat_schedule`` (synced by the leader) instead of saved.
    static: bool = False

    @property
    def rules(self) -> Rules:
        return Rules(coalesce=self.policy.get("coalesce", True),
                     max_catch_up=self.policy.get("max_catch_up", 10),
                     grace=self.policy.get("misfire_grace_time"))

    @property
    def jitter(self) -> float:
        return float(self.policy.get("jitter", 0.0))


@dataclass
class Scenario:
    name: str
    zone: str
    enable_utc: bool
    start: datetime
    span: timedelta
    cases: list[Case]
    seed: int = 1
    downtimes: int = 3
    longest_downtime: float = LONGEST_DOWNTIME
    #: How late after a score beat ticks, at most (seconds).
    lateness: float = 2.0
    #: Chance of an extra tick at a random moment before the next score.
    extra_ticks: float = 0.2
    #: Downtimes placed by hand (start, end), in place of ``downtimes`` random ones: a
    #: catch-up across a transition.
    fixed_downtimes: tuple[tuple[datetime, datetime], ...] = ()
    #: When given, beat is up only in these (start, end) windows around the moments that
    #: matter (the first from the start, the last to the end): down in between, each
    #: window begun by a restarted beat's catch-up; the ``downtimes`` random ones fall
    #: inside the windows. Weeks of span cost the ticks of a few days.
    windows: tuple[tuple[datetime, datetime], ...] = ()
    #: Celery settings beyond the driver's own.
    conf: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> datetime:
        return self.start + self.span


@dataclass
class Outcome:
    case: str
    compared: int = 0
    sent: int = 0
    mismatches: list[str] = field(default_factory=list)


class RecordingScheduler(RedBeatScheduler):
    """The real scheduler; its broker publish records (sent at, entry, slot) instead, and
    it keeps what its last tick read as due and worked out as the next due time."""

    def __init__(self, *args: Any, log: list[tuple[float, str, float]], **kwargs: Any) -> None:
        self.log = log
        #: The scores of the rows the last tick read as due.
        self.due_scores: list[float] = []
        #: The earliest score the last tick left in the schedule, as the tick worked it
        #: out (what beat sleeps until, inf for none): None when the tick did not get
        #: that far (set to None before each tick).
        self.next_due: float | None = None
        super().__init__(*args, **kwargs)

    def _fetch(self, lease: Any) -> tuple[Any, float]:
        fetch, now_ts = super()._fetch(lease)
        self.due_scores = [] if fetch is None else [row.score for row in fetch.rows]
        return fetch, now_ts

    def _sleep_after(self, fetch: Any, plan: Any, now_ts: float) -> float:
        scores = [score for score in (fetch.next_score, plan.earliest_score())
                  if score is not None]
        self.next_due = min(scores, default=math.inf)
        return super()._sleep_after(fetch, plan, now_ts)

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True,
                    **kwargs: Any) -> None:
        slot_ms = int(entry.options["task_id"].rsplit(":", 1)[1])
        self.log.append((self.clock(), entry.name, slot_ms / 1000))


#: Seconds of *real* time: the lease (five of these) and the wait for a publish (half
#: of one, at most the publish timeout) are measured on the real clock. With the
#: default (1 s) a loaded machine that stalls the recording publisher for half a second
#: leaves a slot held for the next tick, which the oracle would count as late: long
#: real waits keep simulated time the only time that matters.
REAL_POLL_INTERVAL = 30.0


def make_app(url: str, zone: str, enable_utc: bool, **conf: Any) -> Celery:
    app = Celery("simulator", broker="memory://", set_as_current=False)
    app.conf.update(redbeat_redis_url=url, timezone=zone, enable_utc=enable_utc,
                    redbeat_poll_interval=REAL_POLL_INTERVAL,
                    redbeat_publish_timeout=REAL_POLL_INTERVAL, **conf)
    return app


def plan_downtimes(rng: random.Random, scenario: Scenario) -> list[tuple[float, float]]:
    """Non-overlapping downtimes: the gaps between the scenario's windows, and random
    ones, lengths log-uniform from 45 s to the scenario's longest (at most a fifth of
    the window), none in the first or last tenth of the span (of a window, chosen by
    its length)."""
    if scenario.fixed_downtimes:
        return sorted((down.timestamp(), back.timestamp())
                      for down, back in scenario.fixed_downtimes)
    up = [(a.timestamp(), b.timestamp()) for a, b in scenario.windows]
    assert all(a < b <= c for (a, b), (c, _) in pairwise(up)), scenario.windows
    assert not up or (up[0][0], up[-1][1]) == (scenario.start.timestamp(),
                                              scenario.end.timestamp()), scenario.name
    gaps = [(b, c) for (_, b), (c, _) in pairwise(up) if b < c]
    up = up or [(scenario.start.timestamp(), scenario.end.timestamp())]
    chosen: list[tuple[float, float]] = list(gaps)
    for _ in range(scenario.downtimes * 4):
        if len(chosen) == len(gaps) + scenario.downtimes:
            break
        start, end = up[0] if len(up) == 1 else rng.choices(
            up, weights=[b - a for a, b in up])[0]
        length = end - start
        longest = min(scenario.longest_downtime, length / 5)
        size = math.exp(rng.uniform(math.log(SHORTEST_DOWNTIME), math.log(longest)))
        at = rng.uniform(start + length / 10, end - length / 10 - size)
        if all(at + size < a or at > b for a, b in chosen):
            chosen.append((at, at + size))
    return sorted(chosen)


class Simulation:
    def __init__(self, scenario: Scenario, url: str) -> None:
        self.scenario = scenario
        self.app = make_app(url, scenario.zone, scenario.enable_utc, **scenario.conf)
        self.client = redis.Redis.from_url(url)
        self.rng = random.Random(scenario.seed)
        self.now = scenario.start.timestamp()
        self.log: list[tuple[float, str, float]] = []
        self.ticks: list[float] = []
        self.up: list[tuple[float, float]] = []
        self.schedule_key = ensure_conf(self.app).keys.schedule
        #: The next due time the last tick worked out (None: not known, read Redis), and
        #: the ticks that found an entry due before the time the tick before promised.
        self.promised: float | None = None
        self.promises_checked = 0
        self.broken_promises: list[str] = []

    def scheduler(self) -> RecordingScheduler:
        return RecordingScheduler(self.app, clock=lambda: self.now, log=self.log,
                                  max_interval=REAL_POLL_INTERVAL)

    def save_entries(self) -> None:
        """Dynamic entries saved as run at the start; statics configured, which the
        first leader writes at the start (first due one interval after it)."""
        created = self.scenario.start
        statics = {}
        for case in self.scenario.cases:
            if case.static:
                statics[case.name] = {"task": TASK, "schedule": case.schedule(self.app),
                                      **case.policy}
                continue
            RedBeatSchedulerEntry(
                case.name, TASK, case.schedule(self.app), app=self.app,
                last_run_at=None if case.never_ran else created, **case.policy,
            ).save()
        self.app.conf.beat_schedule = statics

    def next_score(self) -> float | None:
        """The earliest score in the schedule: as the last tick worked it out (what beat
        would sleep until; :meth:`tick` checks it at the next tick), else read."""
        if self.promised is not None:
            return None if math.isinf(self.promised) else self.promised
        found = self.client.zrangebyscore(self.schedule_key, 0, "+inf", start=0, num=1,
                                          withscores=True)
        return float(found[0][1]) if found else None

    def next_tick(self) -> float:
        score = self.next_score()
        target = self.scenario.end.timestamp() + 1 if score is None else score
        late = max(target, self.now) + self.rng.uniform(0.001, self.scenario.lateness)
        if self.rng.random() < self.scenario.extra_ticks:
            return self.now + self.rng.uniform(0.001, max(0.002, late - self.now))
        return late

    def tick(self, scheduler: RecordingScheduler) -> None:
        self.ticks.append(self.now)
        for attempt in range(5):  # 0.0: the lease was just taken, or an edit raced: again now
            scheduler.next_due = None
            interval = scheduler.tick()
            if attempt == 0 and self.promised is not None:
                self.check_promise(self.promised, scheduler.due_scores)
            if interval != 0.0 and scheduler.leading:
                break
        self.promised = scheduler.next_due

    def check_promise(self, promised: float, due_scores: list[float]) -> None:
        """Nothing the tick read as due may be earlier than the next due time the tick
        before worked out, ``promised`` (a millisecond's leeway)."""
        self.promises_checked += 1
        early = [score for score in due_scores if score < promised - 0.001]
        if early:
            self.broken_promises.append(
                f"tick {stamp(self.now)} read {len(early)} entr(ies) due from "
                f"{stamp(min(early))}, before the next due time the last tick worked out "
                f"({stamp(promised)})")

    def run(self) -> None:
        self.save_entries()
        downtimes = plan_downtimes(self.rng, self.scenario)
        end = self.scenario.end.timestamp()
        scheduler = self.scheduler()
        up_since = self.now
        self.tick(scheduler)
        while True:
            moment = self.next_tick()
            if downtimes and moment >= downtimes[0][0]:
                down, back = downtimes.pop(0)
                self.up.append((up_since, down))
                scheduler.close()
                moment = back
                scheduler = self.scheduler()
                self.promised = None
                up_since = back
            if moment > end:
                break
            self.now = moment
            self.tick(scheduler)
        scheduler.close()
        self.up.append((up_since, end))

    def outcomes(self) -> list[Outcome]:
        zones: dict[str, Zone] = {}
        start, end = self.scenario.start, self.scenario.end

        def zone(name: str) -> Zone:
            if name not in zones:
                zones[name] = Zone(name, start, end)
            return zones[name]

        span = Span(start, end, self.scenario.zone, zone)
        by_case: dict[str, list[tuple[float, float]]] = {}
        for sent_at, name, slot in self.log:
            by_case.setdefault(name, []).append((sent_at, slot))
        outcomes = [compare(case, case.runs(span), by_case.get(case.name, []), self)
                    for case in self.scenario.cases]
        return [*outcomes, Outcome(NEXT_DUE, self.promises_checked, 0, self.broken_promises)]


def compare(case: Case, runs: list[datetime], sent: list[tuple[float, float]],
            simulation: Simulation) -> Outcome:
    outcome = Outcome(case.name, sent=len(sent))
    end = simulation.scenario.end.timestamp()
    if case.jitter:
        sent_slots = [(tick, datetime.fromtimestamp(slot, tz=UTC)) for tick, slot in sent]
        outcome.mismatches = jitter_problems(runs, sent_slots, case.jitter,
                                             simulation.scenario.lateness, simulation.up, end)
        outcome.compared = len(sent)
        return outcome
    expected = expected_dispatches(runs, simulation.ticks, case.rules)
    outcome.compared = len(expected)
    if case.tolerance:
        sent = [(tick, snap(slot, runs, case.tolerance)) for tick, slot in sent]
    want = Counter((tick, round(slot.timestamp(), 3)) for tick, slot in expected)
    got = Counter((tick, round(slot, 3)) for tick, slot in sent)
    for (tick, slot), count in sorted((want - got).items()):
        outcome.mismatches.append(
            f"missing: slot {stamp(slot)} not sent at tick {stamp(tick)}{times(count)}")
    for (tick, slot), count in sorted((got - want).items()):
        outcome.mismatches.append(
            f"extra: slot {stamp(slot)} sent at tick {stamp(tick)}{times(count)}")
    return outcome


def times(count: int) -> str:
    return f" x{count}" if count > 1 else ""


def snap(slot: float, runs: list[datetime], tolerance: float) -> float:
    """A solar slot as the oracle's run it is within ``tolerance`` of (or as sent)."""
    nearest = min(runs, key=lambda run: abs(run.timestamp() - slot), default=None)
    if nearest is not None and abs(nearest.timestamp() - slot) <= tolerance:
        return round(nearest.timestamp(), 3)
    return slot


def stamp(moment: float) -> str:
    local = datetime.fromtimestamp(moment, tz=UTC)
    return local.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def simulate(scenario: Scenario, url: str) -> tuple[list[Outcome], Simulation]:
    simulation = Simulation(scenario, url)
    simulation.run()
    return simulation.outcomes(), simulation


def at(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)


def days(count: float) -> timedelta:
    return timedelta(days=count)

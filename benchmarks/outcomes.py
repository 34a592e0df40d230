"""What issue 27's features cost: the worker per task, beat per tick.

    python benchmarks/outcomes.py            # writes its section of RESULTS.md
    python benchmarks/outcomes.py --quick    # fewer tasks and repeats, prints only

Worker: a task run through Celery's own tracer (``celery.app.trace.build_tracer``, what
a pool runs for every message: task_prerun, the task, task_postrun), with and without
``redbeat_worker_outcomes``'s receivers connected, for a task id that names a beat slot
and for one that does not (Celery's uuid). Times are per task (median and p99 over
``--tasks`` tasks, in alternating blocks), round trips counted on the client.

Beat: one tick with K entries due at once, published for real to a Redis broker (a
database of the same private server), for entries without a policy, with ``overlap:
skip`` (their ``run`` field read in tick.lua, the gate planned), and with ``overlap:
skip`` whose runs are all silent past their bound (given up on: one more round trip).
Median over ``--repeats`` alternating runs; round trips counted on the client.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import redis
import redis.connection
from celery import Celery
from celery.app.trace import build_tracer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry  # noqa: E402
from redbeat.entry_fields import meta_json  # noqa: E402
from redbeat.keys import RUN  # noqa: E402
from redbeat.runs import RunRecord  # noqa: E402
from redbeat.worker import Outcomes  # noqa: E402
from support.redis_server import RedisServer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SECTION = "## Run outcomes and overlap control (benchmarks/outcomes.py)"


class RoundTrips:
    """Requests redis-py writes (a pipeline or a script call is one)."""

    def __init__(self) -> None:
        self.count = 0
        original = redis.connection.AbstractConnection.send_packed_command
        meter = self

        def send(conn, command, check_health=True):  # type: ignore[no-untyped-def]
            meter.count += 1
            return original(conn, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = send  # type: ignore


TRIPS = RoundTrips()


@contextmanager
def counted() -> Iterator[dict[str, float]]:
    figures: dict[str, float] = {}
    before, began = TRIPS.count, time.perf_counter()
    yield figures
    figures["seconds"] = time.perf_counter() - began
    figures["round_trips"] = TRIPS.count - before


def make_app(url: str, broker: str = "memory://", **conf: Any) -> Celery:
    app = Celery("bench-outcomes", broker=broker, set_as_current=False)
    app.conf.update(redbeat_redis_url=url, timezone="UTC", redbeat_lock_timeout=300,
                    **conf)
    return app


# -- the worker ---------------------------------------------------------------------------

def worker_costs(url: str, tasks: int, blocks: int) -> dict[str, Any]:
    """Per-task seconds and round trips of a traced no-op task, four ways."""
    app = make_app(url, redbeat_worker_outcomes=True)

    @app.task(name="bench.noop")
    def noop() -> None:
        return None

    RedBeatSchedulerEntry("job", "bench.noop", 60, app=app).save()
    tracer = build_tracer("bench.noop", noop, app=app)
    outcomes = Outcomes(app, "bench@host")
    samples: dict[str, list[float]] = {name: [] for name in
                                       ("plain", "outcomes", "outcomes, not beat's")}
    trips: dict[str, int] = dict.fromkeys(samples, 0)
    due = 1_000_000_000_000

    def run(kind: str, count: int) -> None:
        nonlocal due
        for _ in range(count):
            due += 1
            task_id = f"job:{due}" if kind == "outcomes" else str(uuid.uuid4())
            before = TRIPS.count
            began = time.perf_counter()
            tracer(task_id, (), {}, {"id": task_id})
            samples[kind].append(time.perf_counter() - began)
            trips[kind] += TRIPS.count - before

    run("plain", 50)  # warm up: Celery's first calls
    samples["plain"].clear()
    trips["plain"] = 0
    for block in range(blocks):
        order = ["plain", "outcomes", "outcomes, not beat's"]
        for kind in order[block % 3:] + order[:block % 3]:
            connected = kind != "plain"
            if connected:
                outcomes.connect()
            run(kind, tasks // blocks)
            if connected:
                disconnect(outcomes)
    return {kind: {"median_us": statistics.median(values) * 1e6,
                   "p99_us": sorted(values)[int(len(values) * 0.99) - 1] * 1e6,
                   "round_trips_per_task": trips[kind] / len(values)}
            for kind, values in samples.items()}


def disconnect(outcomes: Outcomes) -> None:
    from celery import signals

    uid = f"redbeat-outcomes-{id(outcomes)}"
    for signal in (signals.task_prerun, signals.task_postrun, signals.task_failure,
                   signals.task_retry, signals.task_revoked):
        signal.disconnect(dispatch_uid=uid)


# -- beat ---------------------------------------------------------------------------------

def one_tick(url: str, broker: str, due: int, variant: str) -> dict[str, float]:
    client = redis.Redis.from_url(url)
    client.flushall()
    app = make_app(url, broker=broker)
    now = datetime.now(timezone.utc)
    policy = {} if variant == "no policy" else {"overlap": "skip", "lost_after": 60}
    silent = variant.endswith("lost")
    with client.pipeline(transaction=False) as pipe:
        for i in range(due):
            entry = RedBeatSchedulerEntry(f"e{i}", "bench.noop", 3600, app=app,
                                          last_run_at=now - timedelta(hours=1), **policy)
            pipe.hset(entry.key, mapping={"definition": entry.definition_json(),
                                          "meta": meta_json(now - timedelta(hours=1), 1)})
            if entry.policy.to_json():
                pipe.hset(entry.key, "policy", entry.policy.to_json())
            if policy:
                state = "running" if silent else "success"
                at = time.time() - (120 if silent else 30)
                pipe.hset(entry.key, RUN, RunRecord(f"e{i}:1", 1, state, at,
                                                    finished=None if silent else at).to_json())
            pipe.zadd("redbeat::schedule", {entry.key: now.timestamp() - 1})
        pipe.execute()
    scheduler = RedBeatScheduler(app=app)
    scheduler.tick()  # takes the lock
    with counted() as figures:
        scheduler.tick()
    sent = client.zcard("redbeat::pending")  # confirmed ones are gone: 0 when all went out
    figures["left_pending"] = sent
    scheduler.close()
    client.close()
    return figures


def beat_costs(server: RedisServer, due: int, repeats: int) -> dict[str, Any]:
    url = server.url
    broker = url[:-1] + "1"
    variants = ["no policy", "overlap: skip", "overlap: skip, all lost"]
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in variants}
    for repeat in range(repeats + 1):
        order = variants[repeat % 3:] + variants[:repeat % 3]
        for variant in order:
            figures = one_tick(url, broker, due, variant)
            redis.Redis.from_url(broker).flushdb()
            if repeat:  # the first round warms up
                runs[variant].append(figures)
    return {variant: {"median_ms": statistics.median(r["seconds"] for r in values) * 1000,
                      "round_trips": statistics.median(r["round_trips"] for r in values)}
            for variant, values in runs.items()}


def idle_trips(server: RedisServer) -> float:
    app = make_app(server.url)
    scheduler = RedBeatScheduler(app=app)
    scheduler.tick()
    with counted() as figures:
        scheduler.tick()
    scheduler.close()
    return figures["round_trips"]


def section(worker: dict[str, Any], beat: dict[str, Any], idle: float, args: Any) -> str:
    plain = worker["plain"]["median_us"]
    lines = [SECTION, "",
             f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on this machine "
             f"(2 cores, shared), Redis on a private loopback `redis-server`; "
             f"`python benchmarks/outcomes.py --tasks {args.tasks} --due {args.due} "
             f"--repeats {args.repeats}`.", "",
             "Worker, per task (a no-op task through Celery's tracer, as a pool runs it):", "",
             "| receivers | median | p99 | round trips per task |",
             "| --- | --- | --- | --- |"]
    for kind, figures in worker.items():
        lines.append(f"| {kind} | {figures['median_us']:.0f} µs "
                     f"({figures['median_us'] / plain:.2f}x) | {figures['p99_us']:.0f} µs | "
                     f"{figures['round_trips_per_task']:.2f} |")
    lines += ["", f"Beat, one tick with {args.due:,} entries due at once, published to a "
              "Redis broker (an idle tick: "
              f"{idle:g} round trip, with or without the features):", "",
              "| entries | tick | round trips |", "| --- | --- | --- |"]
    base = beat["no policy"]["median_ms"]
    for variant, figures in beat.items():
        lines.append(f"| {variant} | {figures['median_ms']:.0f} ms "
                     f"({figures['median_ms'] / base:.2f}x) | {figures['round_trips']:g} |")
    lines += ["", "`plain` is the task without the integration; `outcomes, not beat's` a task "
              "whose id is Celery's uuid on a worker with it (no round trip). A beat task "
              "costs two script calls (started, ended): the time is those round trips to "
              "Redis. On beat, an entry whose policy waits for its runs adds no round trip "
              "(its `run` field rides tick.lua's read); a tick that gives up on silent runs "
              "adds one script call for their outcome records (and logs a warning for "
              "each: 1,000 lines to stderr here).", ""]
    return "\n".join(lines)


def write(text: str) -> None:
    current = RESULTS.read_text() if RESULTS.exists() else ""
    head, found, tail = current.partition(SECTION)
    if found:
        rest = tail.split("\n## ", 1)
        tail = "\n## " + rest[1] if len(rest) > 1 else ""
        RESULTS.write_text(head + text + tail)
    else:
        RESULTS.write_text(current.rstrip() + "\n\n" + text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--due", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.repeats = 600, 2
    server = RedisServer().start()
    try:
        worker = worker_costs(server.url, args.tasks, 6)
        redis.Redis.from_url(server.url).flushall()
        idle = idle_trips(server)
        beat = beat_costs(server, args.due, args.repeats)
    finally:
        server.cleanup()
    text = section(worker, beat, idle, args)
    print(text)
    if not args.quick:
        write(text)


if __name__ == "__main__":
    main()

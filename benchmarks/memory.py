"""Redis memory per entry: one entry after 1 and after 20 runs (``MEMORY USAGE``), and
``INFO used_memory`` per entry once every entry of a large schedule has run; ours and
(with --compare) celery-redbeat 2.4.2, each in a fresh subprocess of its interpreter.

    python benchmarks/memory.py --compare /opt/ref/bin/python            # N = 1,000,000
    python benchmarks/memory.py --compare /opt/ref/bin/python --n 100000
    python benchmarks/memory.py --quick                                  # N = 10,000

Each measurement gets its own private redis-server (bench.RedisServer, the tests'
launcher). The schedule is
written raw in the format both packages read (dataset.py), then the package's real
scheduler runs it (worker.py's counting stand-in in place of the broker) until every
entry has been sent once. Results go to the end of benchmarks/RESULTS.md, below
bench.MEMORY_MARKER, and to memory.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (benchmarks/bench.py: the server launcher, the worker runner)
import dataset  # noqa: E402

HERE = Path(__file__).resolve().parent
SCRIPT = Path(__file__).resolve()
#: The entry measured run by run: a realistic definition (arguments, a queue), due every
#: INTERVAL seconds so twenty runs take seconds, not minutes.
ENTRY_NAME = "tenant-4711-report"
INTERVAL = 0.25
#: celery-redbeat 2.4.2 loads every due entry in one tick (two round trips each), so it
#: is measured at this N unless --ref-n says otherwise; ours at both.
REF_N = 100_000


# -- the worker side: runs in the interpreter being measured ------------------------------


def scenario_entry(url: str, runs: int) -> dict[str, Any]:
    """Save one entry through the package's own API and run it ``runs`` times with its
    real scheduler: ``MEMORY USAGE`` of its hash when saved, after the first run and
    after the last, and its fields."""
    from datetime import timedelta

    import worker  # benchmarks/worker.py: the counting stand-in and how beat starts
    from celery.schedules import schedule

    from redbeat import RedBeatSchedulerEntry

    scheduler = worker.start(worker.make_app(url))
    app = scheduler.app
    entry = RedBeatSchedulerEntry(
        name=ENTRY_NAME, task="tasks.report", app=app,
        schedule=schedule(timedelta(seconds=INTERVAL), app=app),
        args=[4711], kwargs={"format": "pdf"}, options={"queue": "reports"},
    )
    entry.save()
    client = redis.Redis.from_url(url, decode_responses=True)
    sizes = {"saved": client.memory_usage(entry.key, samples=0)}
    scheduler.sent.clear()
    deadline = time.monotonic() + 60 + runs * INTERVAL * 4
    while len(scheduler.sent) < runs and time.monotonic() < deadline:
        wait = scheduler.tick()
        if len(scheduler.sent) >= 1 and "after_1" not in sizes:
            sizes["after_1"] = client.memory_usage(entry.key, samples=0)
        time.sleep(max(0.0, min(wait or 0.0, INTERVAL / 5)))
    scheduler.close()
    if len(scheduler.sent) < runs:
        raise RuntimeError(f"the entry ran {len(scheduler.sent)} times, not {runs}")
    sizes[f"after_{runs}"] = client.memory_usage(entry.key, samples=0)
    fields = {name: len(value) for name, value in client.hgetall(entry.key).items()}
    return {**sizes, "runs": len(scheduler.sent), "fields": fields}


def scenario_drain(url: str, size: int) -> dict[str, Any]:
    """Tick until each of the ``size`` due entries has been sent once."""
    import worker

    app = worker.make_app(url)
    # celery-redbeat sends its whole backlog in one tick: a lease outlasting it, so the
    # next tick's extension finds the lock still its own
    app.conf.redbeat_lock_timeout = 3600
    began = time.perf_counter()
    scheduler = worker.start(app)
    ticks = 0
    while len({name for name, _ in scheduler.sent}) < size and ticks < 100_000:
        scheduler.tick()
        ticks += 1
    sent = len({name for name, _ in scheduler.sent})
    scheduler.close()
    return {"sent": sent, "ticks": ticks, "seconds": time.perf_counter() - began}


SCENARIOS = {"entry": scenario_entry, "drain": scenario_drain}


# -- the driver ---------------------------------------------------------------------------


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def measure_entry(impl: str, python: str, args: argparse.Namespace) -> dict[str, Any]:
    with bench.RedisServer(binary=args.redis_server) as server:
        return bench.run_worker(python, "entry", server.url, args.runs, script=SCRIPT,
                                env=bench.environment(impl))


def measure_schedule(impl: str, python: str, size: int,
                     args: argparse.Namespace) -> dict[str, Any]:
    """``size`` entries due now (hourly) written raw, then run once each by the package's
    scheduler: ``used_memory`` per entry before and after, and what it is made of."""
    with bench.RedisServer(binary=args.redis_server) as server:
        client = server.client(decode_responses=False, socket_timeout=120)
        empty = used_memory(client)
        due = time.time() - 1
        dataset.write_entries(client, ((f"e{i}", due) for i in range(size)), 3600.0,
                              "tasks.due")
        stored = used_memory(client)
        drained = bench.run_worker(python, "drain", server.url, size, script=SCRIPT,
                                   timeout=args.timeout, env=bench.environment(impl))
        ran = used_memory(client)
        sample = [f"redbeat:e{i}" for i in range(0, size, max(1, size // 200))]
        with client.pipeline(transaction=False) as pipe:
            for key in sample:
                pipe.memory_usage(key, samples=0)
            hashes = pipe.execute()
        history = client.memory_usage("redbeat::history", samples=0) or 0
        return {
            "n": size,
            "redis_version": client.info("server")["redis_version"],
            "stored_per_entry": (stored - empty) / size,
            "ran_per_entry": (ran - empty) / size,
            "entry_hash_bytes": statistics.mean(hashes),
            "history_records": client.xlen("redbeat::history")
            if client.exists("redbeat::history") else 0,
            "history_bytes": history,
            "other_keys": sorted(key.decode() for key in client.scan_iter(count=10_000)
                                 if not key.startswith(b"redbeat:e")),
            **drained,
        }


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


RAW = HERE / "memory.json"


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement, saved to memory.json as it is taken; with ``--resume``, those
    already there (same runs) are kept, not taken again: the whole run takes tens of
    minutes on a loaded machine."""
    impls = {"ours": args.ours, **({"celery-redbeat": args.compare} if args.compare else {})}
    results: dict[str, Any] = {"entry": {}, "schedule": {}, "runs": args.runs}
    if args.resume and RAW.exists():
        saved = json.loads(RAW.read_text())
        if saved.get("runs") == args.runs:
            results = saved
    for impl, python in impls.items():
        if impl in results["entry"]:
            continue
        results["entry"][impl] = measure_entry(impl, python, args)
        RAW.write_text(json.dumps(results, indent=1))
        log(f"entry {impl}: {json.dumps(results['entry'][impl])}")
    sizes = {"ours": sorted({args.n, args.ref_n})} if args.compare else {"ours": [args.n]}
    if args.compare:
        sizes["celery-redbeat"] = [args.ref_n]
    for impl, ns in sizes.items():
        for n in ns:
            if any(row["n"] == n for row in results["schedule"].get(impl, [])):
                continue
            figures = measure_schedule(impl, impls[impl], n, args)
            results["schedule"].setdefault(impl, []).append(figures)
            RAW.write_text(json.dumps(results, indent=1))
            log(f"N={n:,} {impl}: {json.dumps(figures)}")
    results["redis_version"] = results["schedule"]["ours"][0]["redis_version"]
    results["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return results


def ratio(ours: float, ref: float) -> str:
    return f"{ours / ref:.2f}x" if ref else "n/a"


def section(results: dict[str, Any], command: str) -> str:
    runs = results["runs"]
    entry = results["entry"]
    compare = "celery-redbeat" in entry
    lines = [
        bench.MEMORY_MARKER,
        "## Memory per entry",
        "",
        f"Command: `{command}`, run {results['date']}, Redis {results['redis_version']}; "
        "each figure from its own private redis-server.",
        "",
        f"One entry (`{ENTRY_NAME}`: arguments, kwargs, a queue), saved through each "
        f"package's `RedBeatSchedulerEntry.save()` and run by its real scheduler; "
        "`MEMORY USAGE` of its hash:",
        "",
        "| | saved | after 1 run | after " + f"{runs} runs | fields after {runs} runs |",
        "|---|---|---|---|---|",
    ]
    for impl, e in entry.items():
        fields = ", ".join(f"{name} {size} B" for name, size in sorted(e["fields"].items()))
        lines.append(f"| {impl} | {e['saved']} B | {e['after_1']} B | {e[f'after_{runs}']} B "
                     f"| {fields} |")
    if compare:
        ours, ref = entry["ours"][f"after_{runs}"], entry["celery-redbeat"][f"after_{runs}"]
        met = ours <= 1.3 * ref
        lines += ["", f"Target, after {runs} runs within 1.3x of celery-redbeat 2.4.2: "
                      f"{ours} B vs {ref} B = {ratio(ours, ref)}: "
                      f"**{'met' if met else 'NOT met'}**."]
    lines += [
        "",
        "A whole schedule: N entries due at once, written raw in the shared format, then "
        "run once each by the package's scheduler; `INFO used_memory` over the empty "
        "server, per entry (the sorted set, the dispatch history stream and every other "
        "key included):",
        "",
        "| | N | before any run (B/entry) | after every entry ran (B/entry) "
        "| entry hash (B) | history stream | time to run all (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for impl, rows in results["schedule"].items():
        for s in rows:
            stream = (f"{s['history_records']:,} records, {s['history_bytes'] / 1e6:.1f} MB"
                      if s["history_records"] else "-")
            lines.append(
                f"| {impl} | {s['n']:,} | {s['stored_per_entry']:.0f} | "
                f"{s['ran_per_entry']:.0f} | {s['entry_hash_bytes']:.0f} | {stream} | "
                f"{s['seconds']:.0f} |")
    lines += [
        "",
        "Dispatch records are one capped stream for the whole schedule (`<prefix>:history`, "
        "`redbeat_history_stream_length`, default 10,000 records), not fields of each "
        "entry: a bounded amount in all, nothing per entry.",
        "",
    ]
    return "\n".join(lines)


def write_results(results: dict[str, Any], command: str) -> str:
    RAW.write_text(json.dumps(results, indent=1))
    text = section(results, command)
    path = HERE / "RESULTS.md"
    old = path.read_text() if path.exists() else ""
    at = old.find(bench.MEMORY_MARKER)
    kept = (old if at < 0 else old[:at]).rstrip("\n")
    path.write_text((kept + "\n\n" if kept else "") + text)
    return text


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in SCENARIOS:  # a worker: SCENARIO URL ARGUMENT
        scenario, url, argument = sys.argv[1], sys.argv[2], int(sys.argv[3])
        print(json.dumps(SCENARIOS[scenario](url, argument)))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--compare", metavar="PYTHON",
                        help="an interpreter with celery-redbeat installed, measured alongside")
    parser.add_argument("--ours", metavar="PYTHON", default=str(
        bench.REPO_VENV_PYTHON if bench.REPO_VENV_PYTHON.exists() else sys.executable),
        help="the interpreter with our redbeat (default: the repo's .venv)")
    parser.add_argument("--n", type=int, default=1_000_000,
                        help="entries in the whole-schedule measurement (default 1,000,000)")
    parser.add_argument("--ref-n", type=int, default=REF_N,
                        help=f"the same for celery-redbeat, and ours again (default {REF_N:,})")
    parser.add_argument("--runs", type=int, default=20, help="runs of the single entry")
    parser.add_argument("--quick", action="store_true", help="N = 10,000 for both")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds a whole-schedule run may take")
    parser.add_argument("--redis-server", default="redis-server", help="the redis-server binary")
    parser.add_argument("--resume", action="store_true",
                        help="keep the measurements memory.json already has")
    args = parser.parse_args()
    if args.quick:
        args.n = args.ref_n = 10_000
    # as run, less --resume (figures taken earlier by the same command are the same kind)
    command = " ".join(["python benchmarks/memory.py",
                        *(arg for arg in sys.argv[1:] if arg != "--resume")])
    print(write_results(run(args), command))


if __name__ == "__main__":
    main()

"""The minute burst: K crontabs ``* * * * *`` among N entries all fall due at a minute
boundary; from the boundary until a Redis broker holds all K messages. Ours, celery-redbeat
2.4.2 and django-celery-beat's ``DatabaseScheduler`` (on SQLite) in the same run.

    python benchmarks/minute.py --compare .venv-ref/bin/python --django .venv-dcb/bin/python

One redis-server of the benchmark's own (started on a free loopback port, stopped at the
end) holds each redbeat package's schedule in a database of its own and the broker in a
third; django-celery-beat's tables are a SQLite file its own migrations make (in a
temporary directory, removed at the end). Each run is a fresh process of the package's
interpreter (benchmarks/minute_worker.py) running the package's own, unchanged scheduler
in the real beat loop for one unmeasured burst and ``--bursts`` measured ones; the
packages alternate (who goes first flipped each round). A burst takes a minute of wall
time, so a run takes ``--bursts`` + 1 minutes or so. Writes its section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (benchmarks/bench.py: the server, the workers' environment)
import dataset  # noqa: E402
import sections  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER = HERE / "minute_worker.py"
DJANGO = "django-celery-beat"


def environment(impl: str) -> dict[str, str]:
    """bench.environment's, and none of our source for django-celery-beat's interpreter."""
    return bench.environment("celery-redbeat" if impl == DJANGO else impl)


def run(args: argparse.Namespace) -> dict[str, Any]:
    impls = {"ours": args.ours}
    if args.compare:
        impls["celery-redbeat"] = args.compare
    if args.django:
        impls[DJANGO] = args.django
    if args.before:  # an earlier tree of ours, in the same alternation (for a change's note)
        impls[bench.BEFORE] = args.ours
        bench.SOURCES[bench.BEFORE] = str(Path(args.before).resolve())
    server = bench.RedisServer(binary=args.redis_server).start()
    scratch = Path(tempfile.mkdtemp(prefix="redbeat-minute-"))
    database = str(scratch / "beat.sqlite3")
    began = time.perf_counter()
    results: dict[str, Any] = {"runs": {impl: [] for impl in impls}, "n": args.n, "k": args.k}

    def log(text: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f}s] {text}", flush=True)

    try:
        urls = {}
        for db, impl in enumerate(i for i in impls if i != DJANGO):
            urls[impl] = f"redis://127.0.0.1:{server.port}/{db}"
            client = redis.Redis(port=server.port, db=db, socket_timeout=120)
            dataset.add_background(client, 0, args.n - args.k)
            client.close()
        broker_url = f"redis://127.0.0.1:{server.port}/9"
        if args.django:
            setup = bench.run_worker(args.django, "django-setup", database, args.n, args.k,
                                     script=WORKER, env=environment(DJANGO))
            results["django_setup"] = setup
            log(f"{DJANGO}: {setup['tasks']:,} tasks in its tables ({setup['seconds']:.1f} s)")
        log(f"N={args.n:,}: populated")
        flip = False
        for round_ in range(args.repeats):
            flip = not flip
            order = list(impls) if flip else list(impls)[::-1]
            for impl in order:
                if impl == DJANGO and round_ >= args.django_repeats:
                    continue
                queue = f"rbminute{uuid.uuid4().hex[:8]}"
                where = database if impl == DJANGO else urls[impl]
                kind = "django" if impl == DJANGO else "redbeat"
                result = bench.run_worker(impls[impl], kind, where, broker_url, queue, args.k,
                                          args.bursts, script=WORKER, timeout=3600,
                                          env=environment(impl))
                results["runs"][impl].append(result)
                log(f"{impl:<20} bursts (ms): "
                    + ", ".join(f"{lag:,.0f}" for lag in result["lags_ms"]))
    finally:
        server.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)
    results["elapsed_s"] = time.perf_counter() - began
    results["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return results


def seconds(r: dict[str, Any], impl: str, field: str = "lags_ms") -> float:
    """The median of every measured burst of ``impl`` (pooled over its runs)."""
    values = [value for run in r["runs"].get(impl, []) for value in run.get(field, [])]
    return statistics.median(values) / 1000 if values else float("nan")


def report(r: dict[str, Any], args: argparse.Namespace) -> str:
    fmt, times = bench.fmt, bench.times
    ours = seconds(r, "ours")
    ours_cpu = seconds(r, "ours", "cpu_ms") + seconds(r, "ours", "redis_cpu_ms")
    rows = ["| scheduler | bursts measured | boundary -> all K in the broker (median) | "
            "min / max | ours faster by | CPU per burst: scheduler + Redis (median) | "
            "ours cheaper by |", "|---|---|---|---|---|---|---|"]
    for impl, name in (("ours", "ours (redbeat)"), (bench.BEFORE, "ours before (`--before`)"),
                       ("celery-redbeat", "celery-redbeat 2.4.2"),
                       (DJANGO, "django-celery-beat 2.9, DatabaseScheduler on SQLite")):
        lags = [lag for run in r["runs"].get(impl, []) for lag in run["lags_ms"]]
        if not lags:
            continue
        median = statistics.median(lags) / 1000
        cpu, server = seconds(r, impl, "cpu_ms"), seconds(r, impl, "redis_cpu_ms")
        rows.append(f"| {name} | {len(lags)} | {fmt(median * 1000)} ms "
                    f"({fmt(r['k'] / median)}/s) | {fmt(min(lags))} / {fmt(max(lags))} ms | "
                    f"{times(median, ours) if impl != 'ours' else ''} | "
                    f"{fmt(cpu * 1000)} + {fmt(server * 1000)} ms | "
                    f"{times(cpu + server, ours_cpu) if impl != 'ours' else ''} |")
    targets = []
    ref = seconds(r, "celery-redbeat")
    if ref == ref:
        targets.append(f"| minute burst at least 10x celery-redbeat's | {fmt(ours * 1000)} ms "
                       f"vs {fmt(ref * 1000)} ms = {times(ref, ours)} | "
                       f"{'**met**' if ref / ours >= 10 else '**NOT met**'} |")
    command = "python benchmarks/minute.py" + (f" --compare {args.compare}" if args.compare
                                                else "")
    command += (f" --django {args.django}" if args.django else "") + \
        f" --n {args.n} --k {args.k} --bursts {args.bursts} --repeats {args.repeats}"
    setup = r.get("django_setup")
    return f"""## Minute burst: K crontabs `* * * * *` among N, boundary -> all K in the broker

Command: `{command}`, run {r['date']}, {fmt(r['elapsed_s'])} s in all.
K={r['k']:,} entries on the crontab `* * * * *` among N={r['n']:,} (the others monthly);
at each minute boundary all K fall due, and each package's own, unchanged scheduler runs
the real beat loop (tick, sleep what it returns), publishing for real to a Redis broker
(a database of the benchmark's own redis-server). The time is from the minute boundary
until the broker holds all K messages; the CPU is what the burst cost the scheduler's
process (every thread; django-celery-beat's SQLite runs in it) and the redis-server
(schedule and broker), from half a second before the boundary to the end. On a loaded
machine the wall time mostly waits for a CPU; the CPU time is the cost itself.
Each run is a fresh process: one unmeasured burst,
then {args.bursts} measured; {args.repeats} runs per redbeat package in alternation
(django-celery-beat: {min(args.django_repeats, args.repeats)}); the figure is the median
of all measured bursts. The redbeat packages' crontabs are saved through their own
`RedBeatSchedulerEntry.save()`, the other entries written raw in the format both read.
django-celery-beat's tables are made by its own migrations on SQLite and filled through
its models{f" ({setup['tasks']:,} tasks)" if setup else ""}; see README.md for its venv.
The machine is shared: compare the ratios.

""" + sections.tables(targets, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--compare", metavar="PYTHON",
                        help="an interpreter with celery-redbeat 2.4.2 installed")
    parser.add_argument("--django", metavar="PYTHON",
                        help="an interpreter with django-celery-beat installed")
    sections.add_ours_option(parser)
    sections.add_no_write_option(parser)
    parser.add_argument("--n", type=int, default=10_000, help="entries in all")
    parser.add_argument("--k", type=int, default=1_000, help="crontabs * * * * * among them")
    parser.add_argument("--bursts", type=int, default=2, help="measured bursts per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per redbeat package")
    parser.add_argument("--django-repeats", type=int, default=1,
                        help="runs of django-celery-beat (its bursts take seconds)")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    parser.add_argument("--before", metavar="SRC",
                        help="an earlier tree of ours (its src), measured in the same alternation")
    args = parser.parse_args()
    results = run(args)
    sections.publish("minute", results, report(results, args), write=not args.no_write)


if __name__ == "__main__":
    main()

"""Single-entry calls against celery-redbeat 2.4.2 in the same run: ``save()`` of a new
entry, a re-save of it built afresh, ``from_key`` and ``delete``, for an interval and a
crontab.

    python benchmarks/saves.py --compare .venv-ref/bin/python

Each package gets its own redis-server (started here on a free loopback port, stopped at
the end); every measurement is a fresh subprocess of the package's interpreter
(benchmarks/entry_ops.py), the packages in alternation and who goes first flipped each
round, so both see the same machine. Figures are medians over the rounds of each run's
mean per call; ratios are taken within this run. Writes its section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (benchmarks/bench.py: the server, the workers' environment)
import sections  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER = HERE / "entry_ops.py"
KINDS = ("interval", "crontab")
CALLS = ("save", "resave", "from_key", "delete")
WHAT = {"save": "`save()`, a new entry", "resave": "`save()` again, built afresh",
        "from_key": "`from_key()`", "delete": "`delete()`"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    impls = {"ours": args.ours, "celery-redbeat": args.compare}
    envs = {impl: bench.environment(impl) for impl in impls}
    if args.before:  # an earlier tree of ours, in the same alternation (for a change's note)
        impls["before"] = args.ours
        envs["before"] = {**envs["ours"], "PYTHONPATH": args.before}
    servers = {impl: bench.RedisServer(binary=args.redis_server).start() for impl in impls}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        kind: {impl: [] for impl in impls} for kind in KINDS}
    began = time.perf_counter()
    try:
        flip = False
        for _ in range(args.repeats):
            for kind in KINDS:
                flip = not flip
                order = list(impls) if flip else list(impls)[::-1]
                for impl in order:
                    result = bench.run_worker(impls[impl], kind, servers[impl].url,
                                              args.count, script=WORKER,
                                              env=envs[impl])
                    runs[kind][impl].append(result)
                    print(f"[{time.perf_counter() - began:6.1f}s] {kind:<8} {impl:<15} "
                          + " ".join(f"{call} {result[call]['us']:.0f} us"
                                     for call in CALLS), flush=True)
    finally:
        for server in servers.values():
            server.cleanup()
    return {"runs": runs, "elapsed_s": time.perf_counter() - began,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def figure(samples: list[dict[str, Any]], call: str, field: str = "us") -> float:
    return statistics.median(sample[call][field] for sample in samples)


def report(r: dict[str, Any], args: argparse.Namespace) -> str:
    fmt, times = bench.fmt, bench.times
    before = "before" in r["runs"][KINDS[0]]
    rows = ["| schedule | call | celery-redbeat 2.4.2 (µs) | ours (µs) | ours faster by | "
            "round trips, ours (celery-redbeat) |" + (" ours before (µs) |" if before else ""),
            "|---|---|---|---|---|---|" + ("---|" if before else "")]
    targets = []
    for kind in KINDS:
        ours, ref = r["runs"][kind]["ours"], r["runs"][kind]["celery-redbeat"]
        for call in CALLS:
            o, c = figure(ours, call), figure(ref, call)
            trips = (f"{fmt(figure(ours, call, 'round_trips'), 1)} "
                     f"({fmt(figure(ref, call, 'round_trips'), 1)})")
            rows.append(f"| {kind} | {WHAT[call]} | {fmt(c)} | {fmt(o)} | {times(c, o)} | "
                        f"{trips} |" + (f" {fmt(figure(r['runs'][kind]['before'], call))} |"
                                        if before else ""))
            if call == "save":
                targets.append(f"| `save()` of a new {kind} entry at least as fast as "
                               f"celery-redbeat's | {fmt(o)} µs vs {fmt(c)} µs = "
                               f"{times(c, o)} | {'**met**' if o <= c else '**NOT met**'} |")
    return f"""## Single-entry calls: save, from_key, delete

Command: `python benchmarks/saves.py --compare {args.compare} --count {args.count} \
--repeats {args.repeats}`,
run {r['date']}, {fmt(r['elapsed_s'])} s in all. Each package on its own redis-server;
each run a fresh process of the package's interpreter that makes {args.count:,} entries of
its own (every 60 s, or the crontab `*/5`) through the package's public API, after an
unmeasured warm-up of 200 (the connection, the scripts): `save()` of each new entry,
`save()` of each again built afresh (an application saving its entries at each start),
`from_key()` of each, `delete()` of each; the mean per call, median of {args.repeats} runs
per package, the packages in alternation. Round trips are counted client side (each
request redis-py writes). The machine is shared: compare the ratios.

""" + sections.tables(targets, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--compare", metavar="PYTHON", required=True,
                        help="an interpreter with celery-redbeat 2.4.2 installed")
    sections.add_ours_option(parser)
    sections.add_no_write_option(parser)
    parser.add_argument("--count", type=int, default=2000, help="entries per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per package and schedule")
    parser.add_argument("--before", metavar="SRC",
                        help="the src directory of an earlier tree of ours, measured alongside")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    args = parser.parse_args()
    results = run(args)
    sections.publish("saves", results, report(results, args), write=not args.no_write)


if __name__ == "__main__":
    main()

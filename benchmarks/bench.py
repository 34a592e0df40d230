"""redbeat's scheduler benchmark: tick cost against schedule size, backlog and lag,
compared with the raw redis-py floor and (with --compare) with celery-redbeat.

    python benchmarks/bench.py                     # ours and the floor
    python benchmarks/bench.py --compare /path/to/python-with-celery-redbeat
    python benchmarks/bench.py --quick             # small N only, for development

It starts its own redis-server on a free loopback port, fills it with N entries in the
format both packages share, and runs each measurement in a fresh subprocess of the
interpreter being measured (benchmarks/worker.py), alternating implementations so both
see the same machine state. Figures are medians of several runs; ratios come from the
same run. Results go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).parent
WORKER = HERE / "worker.py"
FAR_FUTURE = 10**10


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="redbeat-bench-")
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def populate(client: redis.Redis, start: int, stop: int) -> None:
    """Entries n{start}..n{stop-1}, far in the future (never due): the schedule's size N."""
    definition = {
        "task": "tasks.idle",
        "args": None,
        "kwargs": {},
        "options": {},
        "schedule": {"__type__": "interval", "every": 3600.0, "relative": False},
        "enabled": True,
    }
    for first in range(start, stop, 10_000):
        with client.pipeline(transaction=False) as pipe:
            for i in range(first, min(first + 10_000, stop)):
                name = f"n{i}"
                pipe.hset(
                    f"redbeat:{name}",
                    mapping={
                        "definition": json.dumps({"name": name, **definition}),
                        "meta": '{"last_run_at": null}',
                    },
                )
                pipe.zadd("redbeat::schedule", {f"redbeat:{name}": FAR_FUTURE})
            pipe.execute()


def clean(client: redis.Redis, keep: int) -> None:
    """Back to exactly the N background entries: drop what a run added or changed."""
    for pattern in ("redbeat:due*", "redbeat:lag*", "redbeat:static*"):
        cursor = 0
        while True:
            cursor, keys = client.scan(cursor, match=pattern, count=10_000)
            if keys:
                client.delete(*keys)
                client.zrem("redbeat::schedule", *keys)
            if cursor == 0:
                break
    client.delete(
        "redbeat::lock",
        "redbeat::statics",
        "redbeat::pending",
        "redbeat::nodes",
        "redbeat:celery.backend_cleanup",
    )
    client.zrem("redbeat::schedule", "redbeat:celery.backend_cleanup")


def run_worker(python: str, scenario: str, url: str, argument: int) -> dict[str, Any]:
    result = subprocess.run(
        [python, str(WORKER), scenario, url, str(argument)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{python} {scenario} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def floor_busy(client: redis.Redis, due: int) -> float:
    """Raw redis-py doing the same Redis work as a busy tick, no scheduling: one
    pipelined range read, one pipelined read of the hashes, one pipelined write-back."""
    now = time.time()
    keys = client.zrangebyscore("redbeat::schedule", 0, now)
    began = time.perf_counter()
    keys = client.zrangebyscore("redbeat::schedule", 0, now)
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hmget(key, "definition", "meta")
        rows = pipe.execute()
    with client.pipeline(transaction=False) as pipe:
        for key, (_, meta) in zip(keys, rows, strict=True):
            pipe.hset(key, "meta", meta or "")
            pipe.zadd("redbeat::schedule", {key: now + 3600})
        pipe.execute()
    return time.perf_counter() - began


def floor_startup(client: redis.Redis, statics: int) -> float:
    """Raw redis-py writing ``statics`` entries: one pipelined read, one write."""
    began = time.perf_counter()
    with client.pipeline(transaction=False) as pipe:
        pipe.smembers("redbeat::statics")
        for i in range(statics):
            pipe.hget(f"redbeat:static{i}", "meta")
        pipe.execute()
    with client.pipeline(transaction=True) as pipe:
        for i in range(statics):
            key = f"redbeat:static{i}"
            pipe.hset(key, "definition", json.dumps({"name": f"static{i}", "task": "tasks.s"}))
            pipe.hsetnx(key, "meta", '{"last_run_at": null}')
            pipe.zadd("redbeat::schedule", {key: time.time() + 3600})
        pipe.sadd("redbeat::statics", *[f"static{i}" for i in range(statics)])
        pipe.execute()
    return time.perf_counter() - began


def write_due(url: str, count: int) -> None:
    subprocess.run(
        [
            sys.executable,
            "-c",
            (
                f"import sys; sys.path.insert(0, {str(HERE)!r}); import worker; "
                f"worker.add_due({url!r}, {count}, 'due')"
            ),
        ],
        check=True,
    )


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.impls = {"ours": sys.executable}
        if args.compare:
            self.impls["celery-redbeat"] = args.compare
        self.results: dict[str, Any] = {}

    def measure(
        self,
        key: str,
        scenario: str,
        url: str,
        argument: int,
        client: redis.Redis,
        keep: int,
        repeats: int,
        impls: list[str] | None = None,
    ) -> None:
        runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls or self.impls}
        for _ in range(repeats):
            for impl in runs:  # alternate, so both see the same machine
                clean(client, keep)
                runs[impl].append(run_worker(self.impls[impl], scenario, url, argument))
        for impl, samples in runs.items():
            merged = {name: median([s[name] for s in samples]) for name in samples[0]}
            self.results.setdefault(key, {})[impl] = merged
            print(f"  {key:<28} {impl:<15} {json.dumps(merged)}", flush=True)

    def run(self) -> None:
        sizes = [1_000, 10_000] if self.args.quick else [1_000, 10_000, 100_000, 1_000_000]
        server = Server()
        client = server.client
        try:
            populated = 0
            for size in sizes:
                populate_start = time.perf_counter()
                before = client.info("memory")["used_memory"]
                populate(client, populated, size)
                after = client.info("memory")["used_memory"]
                self.results.setdefault("memory_per_entry", {})[size] = (after - before) / (
                    size - populated
                )
                populated = size
                print(
                    f"N={size}: populated in {time.perf_counter() - populate_start:.1f}s",
                    flush=True,
                )
                repeats = 1 if size >= 1_000_000 else 3
                self.measure(
                    f"startup N={size}", "startup", server.url, 1000, client, size, repeats
                )
                clean(client, size)
                self.results.setdefault("floor_startup", {})[size] = median(
                    [floor_startup(client, 1000) for _ in range(3)]
                )
                self.measure(f"idle N={size}", "idle", server.url, 0, client, size, repeats)
                self.measure(
                    f"busy K=1000 N={size}", "busy", server.url, 1000, client, size, repeats
                )
                floors = []
                for _ in range(3):
                    clean(client, size)
                    write_due(server.url, 1000)
                    floors.append(floor_busy(client, 1000))
                self.results.setdefault("floor_busy", {})[size] = median(floors)
                if size == 100_000 or (self.args.quick and size == sizes[-1]):
                    backlog = 10_000 if self.args.quick else 100_000
                    self.measure(
                        f"backlog K={backlog} N={size}",
                        "busy",
                        server.url,
                        backlog,
                        client,
                        size,
                        1,
                        ["ours"],
                    )
                    if "celery-redbeat" in self.impls:
                        self.measure(
                            f"backlog K=10000 N={size}",
                            "busy",
                            server.url,
                            10_000,
                            client,
                            size,
                            1,
                            ["celery-redbeat"],
                        )
                    clean(client, size)
                    write_due(server.url, backlog)
                    self.results["floor_backlog"] = {
                        "due": backlog,
                        "seconds": floor_busy(client, backlog),
                    }
            clean(client, populated)
            self.measure("lag 200 over 10s", "lag", server.url, 200, client, populated, 1)
            self.results["redis_version"] = client.info("server")["redis_version"]
        finally:
            server.stop()
        self.results["sizes"] = sizes
        (HERE / "results.json").write_text(json.dumps(self.results, indent=2, default=str))
        write_report(self.results, self.args)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def _shape(r: dict[str, Any]) -> tuple[list[int], int, int, int, bool]:
    sizes = r["sizes"]
    mid = 100_000 if 100_000 in sizes else sizes[-1]
    return sizes, sizes[0], mid, sizes[-1], "celery-redbeat" in r.get(f"idle N={sizes[0]}", {})


def _get(r: dict[str, Any], key: str, impl: str, field: str) -> float:
    return float(r.get(key, {}).get(impl, {}).get(field, float("nan")))


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and b == b and a == a else "n/a"


def target_rows(r: dict[str, Any]) -> list[str]:
    """One table row per target of the issue, met or not."""
    sizes, small, mid, big, compare = _shape(r)

    def get(key: str, impl: str, field: str) -> float:
        return _get(r, key, impl, field)

    rows = []

    def target(name: str, figure: str, met: bool | None) -> None:
        rows.append(
            f"| {name} | {figure} | {'met' if met else 'NOT met' if met is False else '-'} |"
        )

    busy_trips = max(get(f"busy K=1000 N={n}", "ours", "round_trips_per_tick") for n in sizes)
    backlog_key = next((k for k in r if k.startswith("backlog") and "ours" in r[k]), None)
    backlog_trips = get(backlog_key, "ours", "round_trips_per_tick") if backlog_key else 0
    idle_trips = max(get(f"idle N={n}", "ours", "round_trips") for n in sizes)
    target(
        "round trips per busy tick (any K, lock included) <= 3",
        f"{busy_trips:.0f} (K=1000), {backlog_trips:.1f} per tick in the backlog",
        busy_trips <= 3,
    )
    target("round trips per idle tick <= 2", f"{idle_trips:.0f}", idle_trips <= 2)
    ours_rate = get(f"busy K=1000 N={mid}", "ours", "per_second")
    floor_rate = 1000 / r["floor_busy"][mid]
    target(
        f"busy tick K=1000 of N={mid}: within 2x of the floor's rate",
        f"{ours_rate:,.0f}/s vs floor {floor_rate:,.0f}/s = {ratio(floor_rate, ours_rate)} slower",
        floor_rate / ours_rate <= 2,
    )
    if compare:
        ref_rate = get(f"busy K=1000 N={mid}", "celery-redbeat", "per_second")
        target(
            "busy tick: >= 8x celery-redbeat's throughput",
            f"{ours_rate:,.0f}/s vs {ref_rate:,.0f}/s = {ratio(ours_rate, ref_rate)}",
            ours_rate / ref_rate >= 8,
        )
    if backlog_key:
        due = r["floor_backlog"]["due"]
        b_rate = get(backlog_key, "ours", "per_second")
        f_rate = due / r["floor_backlog"]["seconds"]
        largest = get(backlog_key, "ours", "largest_reply")
        target(
            f"backlog of {due:,} drained in bounded batches, within 2x of the floor",
            f"{b_rate:,.0f}/s vs floor {f_rate:,.0f}/s = {ratio(f_rate, b_rate)}; largest reply "
            f"{largest:,.0f} elements (5 per entry: at most one batch)",
            f_rate / b_rate <= 2 and largest <= 5 * 1000 + 10,
        )
    start_trips = max(get(f"startup N={n}", "ours", "round_trips") for n in sizes)
    start_ours = get(f"startup N={mid}", "ours", "seconds")
    target(
        "startup with 1,000 statics: <= 5 round trips whatever N",
        f"{start_trips:.0f}",
        start_trips <= 5,
    )
    target(
        "startup within 2x of the floor's time",
        f"{start_ours * 1000:.0f} ms vs floor {r['floor_startup'][mid] * 1000:.0f} ms = "
        f"{ratio(start_ours, r['floor_startup'][mid])}",
        start_ours / r["floor_startup"][mid] <= 2,
    )
    idle_small, idle_big = (
        get(f"idle N={small}", "ours", "seconds"),
        get(f"idle N={big}", "ours", "seconds"),
    )
    st_small, st_big = (
        get(f"startup N={small}", "ours", "seconds"),
        get(f"startup N={big}", "ours", "seconds"),
    )
    target(
        f"idle tick independent of N ({small:,} vs {big:,} within 1.5x)",
        f"{idle_small * 1000:.2f} ms vs {idle_big * 1000:.2f} ms = {ratio(idle_big, idle_small)}",
        idle_big / idle_small <= 1.5,
    )
    target(
        f"startup independent of N ({small:,} vs {big:,} within 1.5x)",
        f"{st_small * 1000:.0f} ms vs {st_big * 1000:.0f} ms = {ratio(st_big, st_small)}",
        st_big / st_small <= 1.5,
    )
    lag_ours = get("lag 200 over 10s", "ours", "p99_ms")
    if compare:
        lag_ref = get("lag 200 over 10s", "celery-redbeat", "p99_ms")
        target(
            "dispatch lag p99 no worse than celery-redbeat's",
            f"{lag_ours:.1f} ms vs {lag_ref:.1f} ms",
            lag_ours <= lag_ref,
        )
    else:
        target("dispatch lag p99", f"{lag_ours:.1f} ms", None)
    idle_cpu = get("lag 200 over 10s", "ours", "idle_cpu_percent")
    target("no busy-wait: CPU while idle near zero", f"{idle_cpu:.2f}% of one core", idle_cpu < 2)
    rss_small, rss_big = (
        get(f"busy K=1000 N={small}", "ours", "peak_rss_mb"),
        get(f"busy K=1000 N={big}", "ours", "peak_rss_mb"),
    )
    target(
        "scheduler RSS flat in N",
        f"{rss_small:.0f} MB at N={small:,}, {rss_big:.0f} MB at N={big:,}",
        rss_big / rss_small <= 1.2,
    )
    return rows


def detail_rows(r: dict[str, Any]) -> list[str]:
    """Every figure, per N, with the ratios measured in this run."""
    sizes, small, mid, big, compare = _shape(r)

    def get(key: str, impl: str, field: str) -> float:
        return _get(r, key, impl, field)

    detail = [
        "| measurement | N | ours | "
        + ("celery-redbeat | ratio |" if compare else "")
        + " floor |",
        "|---|---|---|" + ("---|---|" if compare else "") + "---|",
    ]
    for n in sizes:
        for label, key, field, floor in (
            ("startup, 1,000 statics (ms)", f"startup N={n}", "seconds", r["floor_startup"][n]),
            ("startup round trips", f"startup N={n}", "round_trips", None),
            ("idle tick (ms)", f"idle N={n}", "seconds", None),
            ("idle tick round trips", f"idle N={n}", "round_trips", None),
            (
                "busy tick K=1000 (dispatches/s)",
                f"busy K=1000 N={n}",
                "per_second",
                1000 / r["floor_busy"][n],
            ),
            ("busy tick round trips", f"busy K=1000 N={n}", "round_trips", None),
            ("busy tick largest reply (elements)", f"busy K=1000 N={n}", "largest_reply", None),
            ("peak RSS (MB)", f"busy K=1000 N={n}", "peak_rss_mb", None),
        ):
            scale = 1000 if label.endswith("(ms)") else 1
            ours = get(key, "ours", field) * scale
            cells = [label, f"{n:,}", f"{ours:,.2f}"]
            if compare:
                ref = get(key, "celery-redbeat", field) * scale
                cells += [
                    f"{ref:,.2f}",
                    ratio(ref, ours) if field != "per_second" else ratio(ours, ref),
                ]
            cells.append(f"{floor * scale:,.2f}" if floor is not None else "")
            detail.append("| " + " | ".join(cells) + " |")
    for key in (k for k in r if k.startswith("backlog")):
        for impl, values in r[key].items():
            detail.append(
                f"| {key} ({impl}) | | {values['per_second']:,.0f}/s, "
                f"{values['ticks']:.0f} ticks, {values['round_trips']:.0f} round trips, "
                f"largest reply {values['largest_reply']:,.0f} |"
            )
    for impl, values in r.get("lag 200 over 10s", {}).items():
        detail.append(
            f"| dispatch lag ({impl}) | | p50 {values['p50_ms']:.1f} ms, p99 "
            f"{values['p99_ms']:.1f} ms, max {values['max_ms']:.1f} ms, idle CPU "
            f"{values['idle_cpu_percent']:.2f}% |"
        )
    return detail


def write_report(r: dict[str, Any], args: argparse.Namespace) -> None:
    rows, detail = target_rows(r), detail_rows(r)
    compare = _shape(r)[4]
    command = (
        "python benchmarks/bench.py"
        + (f" --compare {args.compare}" if args.compare else "")
        + (" --quick" if args.quick else "")
    )
    memory = ", ".join(f"N={n:,}: {v:,.0f} B" for n, v in r["memory_per_entry"].items())
    text = f"""# Benchmark results

Machine: {machine()}; Redis {r["redis_version"]} on loopback (started by the benchmark).
Command: `{command}`,
run {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}.

Dispatch is a counting stand-in for `apply_async` in both implementations (the broker
is not measured). Round trips are counted client side (each request redis-py writes is
one round trip; a pipeline or a script call is one). Figures are medians of 3 runs (1
at N=1,000,000); ratios are taken within this run. Timings on a shared 2-core machine
are noisy: compare ratios, not absolute numbers.

## Targets

| target | measured | |
|---|---|---|
{chr(10).join(rows)}

## Detail

{chr(10).join(detail)}

Redis memory per entry (used_memory delta while filling): {memory}.
The floor is raw redis-py doing the same Redis reads and writes with no scheduling.
"""
    if compare:
        text += (
            "\ncelery-redbeat's backlog was measured at K=10,000, not 100,000: at two "
            "round trips per entry it would take minutes.\n"
        )
    (HERE / "RESULTS.md").write_text(text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--compare", metavar="PYTHON", help="an interpreter with celery-redbeat installed"
    )
    parser.add_argument("--quick", action="store_true", help="small N only")
    Bench(parser.parse_args()).run()


if __name__ == "__main__":
    main()

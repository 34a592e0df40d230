"""redbeat's scheduler benchmark: startup, idle and busy ticks, a backlog, dispatch lag,
memory, against the size of the schedule; with the raw redis-py floor for the same Redis
work and (with --compare) celery-redbeat run in alternation on the same Redis.

    python benchmarks/bench.py                        # ours and the floor
    python benchmarks/bench.py --compare /opt/ref/bin/python
    python benchmarks/bench.py --quick                # N up to 10,000, for development

It starts its own redis-server on a free loopback port, fills it with N entries in the
format both packages share, and runs each measurement in a fresh subprocess of the
interpreter being measured (benchmarks/worker.py). Figures are medians of several runs;
ratios are taken within one run. Results go to benchmarks/RESULTS.md and results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import redis
except ImportError:  # a bare `python` on PATH: re-run under the project's venv, if any
    _VENV = Path(__file__).resolve().parent.parent / ".venv"
    if (_VENV / "bin" / "python").exists() and Path(sys.prefix).resolve() != _VENV.resolve():
        os.execv(str(_VENV / "bin" / "python"), [str(_VENV / "bin" / "python"), *sys.argv])
    raise

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dataset  # noqa: E402  (benchmarks/dataset.py)

# the redis-server launcher the tests use (tests/support/redis_server.py)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.redis_server import RedisServer  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO_VENV_PYTHON = HERE.parent / ".venv" / "bin" / "python"
WORKER = HERE / "worker.py"
STATICS = 1000
BUSY_K = 1000
BACKLOG_K = 100_000
#: Entries scored as due that must not run (half disabled, half early).
STALE = 500
LAG_ENTRIES = 200
SMALL = 1_000


def middle_size(sizes: list[int]) -> int:
    """The N that the single-size measurements and targets use: 100,000 (the issue's),
    or the largest of a quick run."""
    return 100_000 if 100_000 in sizes else sizes[-1]

BASELINE = "ours at N=1,000"
FIXED_KEYS = (
    "redbeat::lock",
    "redbeat::statics",
    "redbeat::pending",
    "redbeat::nodes",
    "redbeat:celery.backend_cleanup",
)


def clean(client: redis.Redis, size: int) -> None:
    """Back to exactly the N background entries: drop what a run added (statics, due and
    lag entries, the lock and the packages' bookkeeping keys)."""
    names = [f"static{i}" for i in range(STATICS)] + [f"lag{i}" for i in range(LAG_ENTRIES)]
    extra = client.zcard(dataset.SCHEDULE_KEY) - size  # due entries are due0.. contiguous
    names += [f"due{i}" for i in range(max(0, extra))]
    for first in range(0, len(names), 10_000):
        keys = [f"redbeat:{n}" for n in names[first : first + 10_000]]
        with client.pipeline(transaction=False) as pipe:
            pipe.delete(*keys)
            pipe.zrem(dataset.SCHEDULE_KEY, *keys)
            pipe.execute()
    client.delete(*FIXED_KEYS)
    client.zrem(dataset.SCHEDULE_KEY, *[k for k in FIXED_KEYS if k.startswith("redbeat:")])
    if client.dbsize() != size + 1 or client.zcard(dataset.SCHEDULE_KEY) != size:
        _clean_by_scan(client, size)


def is_background(key: str) -> bool:
    return key.startswith("redbeat:n") and key[len("redbeat:n"):].isdigit()


def _clean_by_scan(client: redis.Redis, size: int) -> None:
    """Slow path: anything that is not a background entry goes."""
    for key in client.scan_iter(count=10_000):
        name = key.decode()
        if name != dataset.SCHEDULE_KEY and not is_background(name):
            client.delete(key)
    for member, _ in client.zscan_iter(dataset.SCHEDULE_KEY, count=10_000):
        name = member.decode()
        if not is_background(name):
            client.zrem(dataset.SCHEDULE_KEY, member)
    if client.dbsize() != size + 1:
        raise RuntimeError(f"could not restore the {size} background entries")


# -- workers and the floor -----------------------------------------------------------------


#: an earlier tree of ours measured as "before" (``--before SRC``), in the same alternation
BEFORE = "before"
SOURCES: dict[str, str] = {}


def environment(impl: str) -> dict[str, str]:
    """The workers' environment: ours imports this checkout's ``src`` first, whatever
    the interpreter has installed ("before" imports the ``src`` it was given);
    celery-redbeat's interpreter gets no PYTHONPATH, which would otherwise put our
    ``redbeat`` in front of the one it has installed."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    if impl != "celery-redbeat":
        env["PYTHONPATH"] = SOURCES.get(impl, str(HERE.parent / "src"))
    return env


def run_worker(python: str, scenario: str, url: str, *arguments: object,
               script: Path = WORKER, timeout: float = 600,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one scenario of ``script`` (worker.py's by default) in a fresh ``python``
    (with ``env``, else this process's environment); its last line of output is the
    result, as JSON."""
    result = subprocess.run(
        [python, str(script), scenario, url, *map(str, arguments)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{python} {script.name} {scenario} {url} {' '.join(map(str, arguments))} failed:\n"
            + result.stderr[-4000:]
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


def redis_cpu(client: redis.Redis) -> float:
    """The Redis server's CPU seconds so far (user and system)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def floor_busy(client: redis.Redis, count: int, cpu: list[float] | None = None) -> float:
    """Raw redis-py doing a busy tick's Redis work for ``count`` due entries, with no
    scheduling: one range read, one pipelined read of the hashes, one pipelined
    write-back (meta and score), each one round trip. With ``cpu``, the CPU seconds it
    took (this process's and the Redis server's) are appended to it."""
    dataset.add_due(client, count)
    now = time.time()
    if cpu is not None:
        cpu_began = time.process_time() + redis_cpu(client)
    began = time.perf_counter()
    keys = client.zrangebyscore(dataset.SCHEDULE_KEY, 0, now)
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hmget(key, "definition", "meta")
        rows = pipe.execute()
    with client.pipeline(transaction=False) as pipe:
        for key, (_, meta) in zip(keys, rows, strict=True):
            pipe.hset(key, "meta", meta)
            pipe.zadd(dataset.SCHEDULE_KEY, {key: now + 3600})
        pipe.execute()
    elapsed = time.perf_counter() - began
    if cpu is not None:
        cpu.append(time.process_time() + redis_cpu(client) - cpu_began)
    if len(keys) != count:
        raise RuntimeError(f"floor: {len(keys)} due, expected {count}")
    return elapsed


def floor_startup(client: redis.Redis, statics: int) -> float:
    """Raw redis-py storing ``statics`` entries: one pipelined read of what is there,
    one pipelined (transactional) write of definitions, metas and scores."""
    began = time.perf_counter()
    with client.pipeline(transaction=False) as pipe:
        pipe.smembers("redbeat::statics")
        for i in range(statics):
            pipe.hget(f"redbeat:static{i}", "meta")
        pipe.execute()
    now = time.time()
    with client.pipeline(transaction=True) as pipe:
        for i in range(statics):
            key = f"redbeat:static{i}"
            definition = {"name": f"static{i}", "task": "tasks.static", "args": [], "kwargs": {},
                          "options": {}, "enabled": True,
                          "schedule": {"__type__": "interval", "every": 3600.0, "relative": False}}
            pipe.hset(key, "definition", json.dumps(definition))
            pipe.hsetnx(key, "meta", json.dumps({"last_run_at": dataset.datetime_json(now)}))
            pipe.zadd(dataset.SCHEDULE_KEY, {key: now + 3600})
        pipe.sadd("redbeat::statics", *[f"static{i}" for i in range(statics)])
        pipe.execute()
    return time.perf_counter() - began


def floor_idle(client: redis.Redis) -> float:
    """One round trip asking for the next due entry: the least an idle tick can do."""
    timings = []
    for _ in range(50):
        began = time.perf_counter()
        client.zrangebyscore(dataset.SCHEDULE_KEY, "-inf", "+inf", start=0, num=1, withscores=True)
        timings.append(time.perf_counter() - began)
    return statistics.median(timings)


def memory_per_entry(client: redis.Redis, size: int) -> dict[str, float]:
    """MEMORY USAGE of sampled entry hashes, plus the sorted set's share per member."""
    sample = [f"redbeat:n{i}" for i in range(0, size, max(1, size // 200))]
    with client.pipeline(transaction=False) as pipe:
        for key in sample:
            pipe.memory_usage(key)
        hashes = pipe.execute()
    zset = client.memory_usage(dataset.SCHEDULE_KEY) or 0
    return {
        "hash_bytes": statistics.mean(hashes),
        "zset_bytes_per_member": zset / size,
        "memory_usage_bytes": statistics.mean(hashes) + zset / size,
    }


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def merge(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the numeric figures; other values from the first sample."""
    merged: dict[str, Any] = {}
    for name, value in samples[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            merged[name] = median([s[name] for s in samples])
        else:
            merged[name] = value
    merged["runs"] = len(samples)
    return merged


# -- the run -------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.impls = {"ours": args.ours}
        if args.compare:
            self.impls["celery-redbeat"] = args.compare
        if getattr(args, "before", None):
            self.impls[BEFORE] = self.impls["ours"]
            SOURCES[BEFORE] = str(Path(args.before).resolve())
        self.results: dict[str, Any] = {"cases": {}, "floor": {}, "memory": {}}
        self.flip = False

    def log(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.began:6.1f}s] {text}", flush=True)

    def measure(
        self,
        key: str,
        scenario: str,
        arguments: tuple[object, ...],
        size: int,
        impls: list[str] | None = None,
        repeats: int = 1,
        baseline: bool = False,
        floor: Callable[[], float] | None = None,
    ) -> None:
        """Run ``scenario`` ``repeats`` times per implementation, alternating them (and
        who goes first) so all see the same machine. ``baseline`` adds ours against the
        fixed N=1,000 database in the same alternation, ``floor`` the raw redis-py floor
        once per round: ratios to them are measured in the same window."""
        chosen = [(impl, self.impls[impl], self.client, size, self.url)
                  for impl in impls or list(self.impls)]
        if baseline:
            chosen.append((BASELINE, self.impls["ours"], self.small, SMALL, self.small_url))
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in chosen}
        floors = []
        for _ in range(repeats):
            self.flip = not self.flip
            for label, python, client, n, url in chosen if self.flip else chosen[::-1]:
                clean(client, n)
                runs[label].append(run_worker(python, scenario, url, *arguments,
                                              timeout=900, env=environment(label)))
            if floor is not None:
                clean(self.client, size)
                floors.append(floor())
        clean(self.client, size)
        self.results.setdefault("samples", {})[key] = runs  # each run's own figures
        for label, samples in runs.items():
            merged = merge(samples)
            self.results["cases"].setdefault(key, {})[label] = merged
            brief = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in merged.items()
                     if not isinstance(v, (dict, list)) and len(str(v)) < 100}
            self.log(f"{key:<26} {label:<15} {json.dumps(brief)}")
        if floor is not None:
            self.results["floor"][key] = median(floors)
            self.log(f"{key:<26} {'floor':<15} {median(floors) * 1000:.3f} ms")

    def describe(self) -> None:
        probe = ("import sys, importlib.metadata as m, celery, redis, redbeat; "
                 "d = 'redbeat' if 'site-packages' not in redbeat.__file__ else 'celery-redbeat'; "
                 "print(sys.version.split()[0], celery.__version__, redis.__version__, "
                 "m.version(d) if d != 'redbeat' else getattr(redbeat, '__version__', '?'), "
                 "redbeat.__file__)")
        described = {}
        for impl, python in self.impls.items():
            out = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                                 env=environment(impl))
            if out.returncode != 0:
                raise SystemExit(f"{impl} ({python}) cannot import redbeat:\n{out.stderr}")
            py, celery_v, redis_v, version, where = out.stdout.split()
            described[impl] = {"python": python, "python_version": py, "celery": celery_v,
                               "redis_py": redis_v, "version": version, "module": where}
        self.results["implementations"] = described

    def run(self) -> None:
        self.began = time.perf_counter()
        self.describe()
        sizes = [1_000, 10_000] if self.args.quick else [1_000, 10_000, 100_000, 1_000_000]
        middle = middle_size(sizes)
        backlog = 10_000 if self.args.quick else BACKLOG_K
        ref_backlog = min(backlog, self.args.ref_backlog)
        server = RedisServer(binary=self.args.redis_server).start()
        self.client = server.client(decode_responses=False, socket_timeout=120)
        self.url = server.url
        # database 1 keeps a fixed N=1,000 schedule: the baseline for "independent of N"
        self.small = redis.Redis(port=server.port, db=1, socket_timeout=120)
        self.small_url = f"redis://127.0.0.1:{server.port}/1"
        floor = self.results["floor"]
        try:
            dataset.add_background(self.small, 0, SMALL)
            populated = 0
            for size in sizes:
                before = self.client.info("memory")["used_memory"]
                dataset.add_background(self.client, populated, size)
                after = self.client.info("memory")["used_memory"]
                self.results["memory"][size] = {
                    "info_delta_per_entry": (after - before) / (size - populated),
                    **memory_per_entry(self.client, size),
                }
                populated = size
                self.log(f"N={size:,}: populated")
                repeats = self.args.repeats
                self.measure(f"startup N={size}", "startup", (STATICS,), size, None, repeats,
                             baseline=True, floor=lambda: floor_startup(self.client, STATICS))
                self.measure(f"idle N={size}", "idle", (0,), size, None, repeats,
                             baseline=True, floor=lambda: floor_idle(self.client))
                self.measure(f"busy N={size}", "busy", (BUSY_K,), size, None, repeats,
                             floor=lambda: floor_busy(self.client, BUSY_K))
                if size == middle:
                    self.measure(f"stale N={size}", "stale", (STALE,), size)
                    self.measure(f"backlog K={backlog} N={size}", "busy", (backlog,), size,
                                 ["ours"])
                    if "celery-redbeat" in self.impls:
                        self.measure(f"backlog K={ref_backlog} N={size}", "busy",
                                     (ref_backlog,), size, ["celery-redbeat"])
                    for k in sorted({backlog, ref_backlog}):
                        clean(self.client, size)
                        floor[f"backlog K={k} N={size}"] = floor_busy(self.client, k)
                    clean(self.client, size)
                    self.results["backlog"] = {"size": size, "ours": backlog, "ref": ref_backlog}
            window = 4.0 if self.args.quick else 10.0
            self.results["lag_window_s"] = window
            self.measure(f"lag N={populated}", "lag", (LAG_ENTRIES, window), populated)
            self.measure(f"lag celery-redbeat format N={populated}", "lag",
                         (LAG_ENTRIES, window, 1), populated, ["ours"])
            self.measure("dispatch cost", "dispatch_cost", (10_000,), populated, ["ours"])
            self.results["redis_version"] = self.client.info("server")["redis_version"]
        finally:
            self.small.close()
            self.client.close()
            server.cleanup()
        self.results["sizes"] = sizes
        self.results["quick"] = self.args.quick
        self.results["repeats"] = self.args.repeats
        self.results["elapsed_s"] = time.perf_counter() - self.began
        self.results["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        (HERE / "results.json").write_text(json.dumps(self.results, indent=1, default=str))
        text = report(self.results, self.args)
        results = HERE / "RESULTS.md"
        import sections  # noqa: PLC0415 - the other benchmarks' sections are kept too

        text += kept_section(results)
        results.write_text(sections.keep(results.read_text() if results.exists() else "", text))
        print(text)


# -- the report ----------------------------------------------------------------------------

#: RESULTS.md's last section, from this line on, is benchmarks/memory.py's: kept when
#: this benchmark rewrites the rest of the file, and the other way round.
MEMORY_MARKER = "<!-- the section below is written by benchmarks/memory.py -->"


def kept_section(results: Path) -> str:
    """The memory section of ``results`` (empty when it has none)."""
    text = results.read_text() if results.exists() else ""
    at = text.find(MEMORY_MARKER)
    return "" if at < 0 else "\n" + text[at:]


def machine() -> dict[str, str]:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": str(os.cpu_count()),
        "cpu": cpu,
        "os": f"{platform.system()} {platform.release()}",
    }


def fmt(value: float, digits: int = 0) -> str:
    if value != value:  # nan
        return "n/a"
    return f"{value:,.{digits}f}"


def times(a: float, b: float) -> str:
    """a / b as 'N.NNx'."""
    if not b or a != a or b != b:
        return "n/a"
    return f"{a / b:.2f}x"


class Report:
    def __init__(self, r: dict[str, Any]) -> None:
        self.r = r
        self.sizes: list[int] = r["sizes"]
        self.small, self.big = self.sizes[0], self.sizes[-1]
        self.mid = middle_size(self.sizes)
        self.compare = "celery-redbeat" in r["implementations"]
        self.rows: list[str] = []

    def get(self, key: str, impl: str, field: str) -> float:
        value = self.r["cases"].get(key, {}).get(impl, {}).get(field, float("nan"))
        return float(value)

    def floor(self, key: str) -> float:
        return float(self.r["floor"].get(key, float("nan")))

    def target(self, name: str, figure: str, met: bool | None) -> None:
        mark = "-" if met is None else ("**met**" if met else "**NOT met**")
        self.rows.append(f"| {name} | {figure} | {mark} |")

    def targets(self) -> str:
        sizes, small, mid, big = self.sizes, self.small, self.mid, self.big
        g = self.get
        bl = self.r.get("backlog", {})
        bl_key = f"backlog K={bl.get('ours')} N={bl.get('size')}"

        busy_max = max(g(f"busy N={n}", "ours", "round_trips_max_tick") for n in sizes)
        bl_max = g(bl_key, "ours", "round_trips_max_tick")
        self.target(
            "round trips per tick <= 3 for any K (lock extension included)",
            f"K={BUSY_K:,}: {fmt(busy_max)} at most, any N; backlog K={bl.get('ours', 0):,}: "
            f"{fmt(bl_max)} at most ({fmt(g(bl_key, 'ours', 'round_trips'))} in "
            f"{fmt(g(bl_key, 'ours', 'ticks'))} ticks)",
            max(busy_max, bl_max) <= 3,
        )
        idle_max = max(g(f"idle N={n}", "ours", "round_trips") for n in sizes)
        ref_idle = g(f"idle N={mid}", "celery-redbeat", "round_trips") if self.compare else None
        self.target(
            "idle tick: round trips <= 2",
            f"{fmt(idle_max)}" + (f" (celery-redbeat {fmt(ref_idle)})" if ref_idle else ""),
            idle_max <= 2,
        )
        ours_rate = g(f"busy N={mid}", "ours", "per_second")
        floor_rate = BUSY_K / self.floor(f"busy N={mid}")
        self.target(
            f"busy tick K={BUSY_K:,} of N={mid:,}: within 2x of the floor's rate",
            f"{fmt(ours_rate)}/s vs floor {fmt(floor_rate)}/s: floor is "
            f"{times(floor_rate, ours_rate)} faster",
            floor_rate / ours_rate <= 2,
        )
        if self.compare:
            ref_rate = g(f"busy N={mid}", "celery-redbeat", "per_second")
            self.target(
                f"busy tick K={BUSY_K:,} of N={mid:,}: >= 8x celery-redbeat's throughput",
                f"{fmt(ours_rate)}/s vs {fmt(ref_rate)}/s = {times(ours_rate, ref_rate)}",
                ours_rate / ref_rate >= 8,
            )
        if bl:
            k = bl["ours"]
            b_rate = g(bl_key, "ours", "per_second")
            f_rate = k / self.floor(bl_key)
            largest = g(bl_key, "ours", "largest_reply_elements")
            largest_bytes = g(bl_key, "ours", "largest_reply_bytes")
            one_batch = g(f"busy N={bl['size']}", "ours", "largest_reply_elements")
            one_batch_bytes = g(f"busy N={bl['size']}", "ours", "largest_reply_bytes")
            bounded = largest <= one_batch and largest_bytes <= one_batch_bytes * 1.05
            self.target(
                f"backlog of {k:,} drained in bounded batches (no reply larger than a batch)",
                f"largest reply {fmt(largest)} elements / {fmt(largest_bytes / 1024)} KiB; one "
                f"batch of {BUSY_K:,} (K={BUSY_K:,}): {fmt(one_batch)} / "
                f"{fmt(one_batch_bytes / 1024)} KiB; {fmt(g(bl_key, 'ours', 'ticks'))} ticks",
                bounded,
            )
            self.target(
                f"backlog of {k:,}: within 2x of the floor",
                f"{fmt(b_rate)}/s vs floor {fmt(f_rate)}/s: "
                f"floor is {times(f_rate, b_rate)} faster",
                f_rate / b_rate <= 2,
            )
        start_trips = max(g(f"startup N={n}", "ours", "round_trips") for n in sizes)
        self.target(
            f"startup with {STATICS:,} statics: <= 5 round trips whatever N",
            f"{fmt(start_trips)} at most (N={small:,}..{big:,}; connection handshakes "
            f"not counted: {fmt(g(f'startup N={big}', 'ours', 'handshake_round_trips'))})",
            start_trips <= 5,
        )
        worst = max(sizes, key=lambda n: g(f"startup N={n}", "ours", "seconds")
                    / self.floor(f"startup N={n}"))
        s_ours = g(f"startup N={worst}", "ours", "seconds")
        s_floor = self.floor(f"startup N={worst}")
        self.target(
            "startup: within 2x of the floor's time (worst N)",
            f"N={worst:,}: {fmt(s_ours * 1000, 1)} ms vs floor {fmt(s_floor * 1000, 1)} ms = "
            f"{times(s_ours, s_floor)}",
            s_ours / s_floor <= 2,
        )
        for label, key in (("idle tick", "idle"), ("startup", "startup")):
            a = g(f"{key} N={big}", BASELINE, "seconds")
            b = g(f"{key} N={big}", "ours", "seconds")
            digits = 3 if key == "idle" else 1
            self.target(
                f"{label} independent of N ({SMALL:,} vs {big:,} within 1.5x)",
                f"{fmt(a * 1000, digits)} ms vs {fmt(b * 1000, digits)} ms = {times(b, a)} "
                "(run alternately)",
                max(a, b) / min(a, b) <= 1.5,
            )
        stale_key = f"stale N={mid}"
        stale_trips = g(stale_key, "ours", "round_trips")
        stale_commands = g(stale_key, "ours", "server_commands_per_tick")
        idle_commands = g(f"idle N={mid}", "ours", "server_commands_per_tick")
        ref = ""
        if self.compare:
            ref = (f"; celery-redbeat: {fmt(g(stale_key, 'celery-redbeat', 'round_trips'))} "
                   f"round trips, {fmt(g(stale_key, 'celery-redbeat', 'server_commands_per_tick'))}"
                   f" commands, wakes every "
                   f"{fmt(g(stale_key, 'celery-redbeat', 'sleep_min_s'), 1)} s")
        self.target(
            f"{STALE} entries scored early or disabled cost nothing per tick",
            f"idle tick with them: {fmt(stale_trips)} round trip(s), "
            f"{fmt(stale_commands, 1)} server commands (without them: "
            f"{fmt(idle_commands, 1)}), sleeps {fmt(g(stale_key, 'ours', 'sleep_min_s'), 1)} s, "
            f"sent {fmt(g(stale_key, 'ours', 'sent'))}" + ref,
            stale_trips <= 1 and stale_commands <= idle_commands
            and g(stale_key, "ours", "sent") == 0,
        )
        lag_key = f"lag N={big}"
        lag = g(lag_key, "ours", "p99_ms")
        if self.compare:
            ref_lag = g(lag_key, "celery-redbeat", "p99_ms")
            self.target(
                "dispatch lag p99 no worse than celery-redbeat's",
                f"{fmt(lag, 1)} ms vs {fmt(ref_lag, 1)} ms",
                lag <= ref_lag,
            )
        else:
            self.target("dispatch lag p99", f"{fmt(lag, 1)} ms", None)
        cpu = g(lag_key, "ours", "idle_cpu_percent")
        ref_cpu = g(lag_key, "celery-redbeat", "idle_cpu_percent") if self.compare else None
        self.target(
            "no busy-wait: CPU while idle near zero (< 1% of a core)",
            f"{fmt(cpu, 2)}% of a core in the real loop, nothing due"
            + (f" (celery-redbeat {fmt(ref_cpu, 2)}%)" if ref_cpu is not None else ""),
            cpu < 1,
        )
        rss = [g(f"busy N={n}", "ours", "peak_rss_mb") for n in sizes]
        self.target(
            "scheduler peak RSS flat in N (within 10%)",
            ", ".join(f"{fmt(v, 1)} MB" for v in rss)
            + f" at N={', '.join(f'{n:,}' for n in sizes)}",
            max(rss) / min(rss) <= 1.1,
        )
        return "\n".join(["| target | measured | |", "|---|---|---|", *self.rows])

    def detail(self) -> str:
        c = self.compare
        head = "| measurement | N | ours | "
        head += "celery-redbeat | ours better by | " if c else ""
        head += "floor | floor better by |"
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        spec = [
            # label, case, field, scale, digits, floor case or None
            ("startup, 1,000 statics (ms)", "startup", "seconds", 1000, 1, "startup"),
            ("startup round trips", "startup", "round_trips", 1, 0, None),
            ("startup server commands", "startup", "server_commands", 1, 0, None),
            ("idle tick (ms)", "idle", "seconds", 1000, 3, "idle"),
            ("idle tick round trips", "idle", "round_trips", 1, 0, None),
            ("idle tick server commands", "idle", "server_commands_per_tick", 1, 0, None),
            ("busy tick K=1,000 (ms, wall)", "busy", "seconds", 1000, 1, "busy"),
            ("busy tick K=1,000 (dispatches/s)", "busy", "per_second", 1, 0, "busy"),
            ("busy tick round trips", "busy", "round_trips", 1, 0, None),
            ("busy tick server commands", "busy", "server_commands", 1, 0, None),
            ("busy tick largest reply (elements)", "busy", "largest_reply_elements", 1, 0, None),
            ("busy tick largest reply (KiB)", "busy", "largest_reply_bytes", 1 / 1024, 0, None),
            ("scheduler peak RSS (MB)", "busy", "peak_rss_mb", 1, 1, None),
        ]
        for n in self.sizes:
            for label, case, field, scale, digits, floor_case in spec:
                higher_is_better = field == "per_second"
                ours = self.get(f"{case} N={n}", "ours", field) * scale
                cells = [label, f"{n:,}", fmt(ours, digits)]
                if c:
                    ref = self.get(f"{case} N={n}", "celery-redbeat", field) * scale
                    better = times(ours, ref) if higher_is_better else times(ref, ours)
                    cells += [fmt(ref, digits), better]
                if floor_case:
                    f = self.floor(f"{floor_case} N={n}")
                    f = BUSY_K / f if higher_is_better else f * scale
                    worse = times(f, ours) if higher_is_better else times(ours, f)
                    cells += [fmt(f, digits), worse]
                else:
                    cells += ["", ""]
                lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def independence(self) -> str:
        lines = [f"| N | startup (ms) | startup at N={SMALL:,} (ms) | ratio | idle tick (ms) "
                 f"| idle tick at N={SMALL:,} (ms) | ratio |", "|---|---|---|---|---|---|---|"]
        for n in self.sizes:
            cells = [f"{n:,}"]
            for key, digits in (("startup", 1), ("idle", 3)):
                ours = self.get(f"{key} N={n}", "ours", "seconds")
                base = self.get(f"{key} N={n}", BASELINE, "seconds")
                cells += [fmt(ours * 1000, digits), fmt(base * 1000, digits), times(ours, base)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def backlog(self) -> str:
        bl = self.r.get("backlog")
        if not bl:
            return ""
        lines = ["| implementation | K due | N | wall (s) | dispatches/s | ticks | round trips "
                 "| most in a tick | largest reply (elements / KiB) | sent | floor dispatches/s "
                 "| floor faster by |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for impl, k in (("ours", bl["ours"]), ("celery-redbeat", bl["ref"])):
            key = f"backlog K={k} N={bl['size']}"
            if impl not in self.r["cases"].get(key, {}):
                continue
            v = self.r["cases"][key][impl]
            f_rate = k / self.floor(key)
            lines.append(
                f"| {impl} | {k:,} | {bl['size']:,} | {fmt(v['seconds'], 2)} | "
                f"{fmt(v['per_second'])} | {fmt(v['ticks'])} | {fmt(v['round_trips'])} | "
                f"{fmt(v['round_trips_max_tick'])} | {fmt(v['largest_reply_elements'])} / "
                f"{fmt(v['largest_reply_bytes'] / 1024)} | {fmt(v['sent'])} | {fmt(f_rate)} | "
                f"{times(f_rate, v['per_second'])} |"
            )
        return "\n".join(lines)

    def lag(self) -> str:
        key = f"lag N={self.big}"
        lines = ["| implementation | sent / expected | early | p50 (ms) | p99 (ms) | max (ms) "
                 "| idle CPU (% of a core) |", "|---|---|---|---|---|---|---|"]
        rows = [(impl, v) for impl, v in self.r["cases"].get(key, {}).items()]
        other = self.r["cases"].get(f"lag celery-redbeat format N={self.big}", {})
        rows += [(f"{impl}, entries in celery-redbeat's format", v) for impl, v in other.items()]
        for impl, v in rows:
            lines.append(
                f"| {impl} | {fmt(v['sent'])} / {fmt(v['expected'])} | {fmt(v['early'])} | "
                f"{fmt(v['p50_ms'], 1)} | {fmt(v['p99_ms'], 1)} | {fmt(v['max_ms'], 1)} | "
                f"{fmt(v['idle_cpu_percent'], 2)} |"
            )
        return "\n".join(lines)

    def memory(self) -> str:
        lines = ["| N | INFO used_memory delta per entry (B) | MEMORY USAGE: hash (B) "
                 "| + sorted-set share (B) | = per entry (B) |", "|---|---|---|---|---|"]
        for n, m in self.r["memory"].items():
            lines.append(
                f"| {int(n):,} | {fmt(m['info_delta_per_entry'])} | {fmt(m['hash_bytes'])} | "
                f"{fmt(m['zset_bytes_per_member'])} | {fmt(m['memory_usage_bytes'])} |"
            )
        return "\n".join(lines)

    def after_run(self) -> str:
        key = f"busy N={self.mid}"
        parts = []
        for impl in self.r["cases"].get(key, {}):
            parts.append(f"{impl} {fmt(self.get(key, impl, 'entry_bytes_after_run'))} B")
        return ", ".join(parts)

    def commands(self) -> str:
        key = f"busy N={self.mid}"
        parts = []
        for impl, v in self.r["cases"].get(key, {}).items():
            by = ", ".join(f"{name} {n}" for name, n in v["server_commands_by_name"].items())
            parts.append(f"- {impl}: {by}")
        return "\n".join(parts)


def report(r: dict[str, Any], args: argparse.Namespace) -> str:
    rep = Report(r)
    m = machine()
    impls = r["implementations"]
    ours = impls["ours"]
    described = [f"ours: redbeat {ours['version']} ({ours['module']}), Python "
                 f"{ours['python_version']}, Celery {ours['celery']}, redis-py {ours['redis_py']}"]
    if "celery-redbeat" in impls:
        ref = impls["celery-redbeat"]
        described.append(f"celery-redbeat {ref['version']} ({ref['python']}), Python "
                         f"{ref['python_version']}, Celery {ref['celery']}, "
                         f"redis-py {ref['redis_py']}")
    command = "python benchmarks/bench.py" + (f" --compare {args.compare}" if args.compare else "")
    command += " --quick" if args.quick else ""
    command += f" --repeats {args.repeats}" if args.repeats != (3 if args.quick else 5) else ""
    command += f" --ref-backlog {args.ref_backlog}" if args.ref_backlog != 100_000 else ""
    dispatch = rep.get("dispatch cost", "ours", "seconds_per_dispatch") * 1e6
    bl = r.get("backlog", {})
    ref_note = ""
    if rep.compare and bl and bl["ref"] != bl["ours"]:
        ref_note = (f"celery-redbeat's backlog is measured at K={bl['ref']:,}, not "
                    f"{bl['ours']:,} (`--ref-backlog`): it pays two round trips per entry; "
                    "its rate hardly depends on K.\n")
    return f"""# Benchmark results

- Machine: {m['cores']} cores ({m['cpu']}), {m['os']}; shared and noisy.
- Redis {r['redis_version']}, a private `redis-server` on a loopback port started by the benchmark.
- {chr(10).join('- ' + d if i else d for i, d in enumerate(described))}
- Command: `{command}`, run {r['date']}, {fmt(r['elapsed_s'])} s in all.

How it is measured (see README.md): every figure comes from a fresh subprocess of the
interpreter being measured, using only the packages' public API; implementations are
run in alternation on the same Redis. **Dispatch is a counting stand-in**: Celery's
`Scheduler.send_task` records the send and publishes nothing, so the broker is not
measured (Celery's own `apply_async` path around it costs {fmt(dispatch, 1)} µs per
dispatch and is paid by both). **Round trips** are counted client side: each request
redis-py writes (a command, a pipeline, a script call) is one; connection handshakes
are counted apart. **Server commands** are the server's own `INFO commandstats` delta,
a cross-check: a pipeline of n commands counts n, a script 1 plus what it calls.
Timings are medians of {r['repeats']} runs (1 for the backlog and the lag); ratios are
taken within this run, the floor and the N={SMALL:,} baseline measured in alternation
with the workers. The **floor** is raw redis-py doing the same Redis work with no
scheduling: one range read, one pipelined hash read, one pipelined write-back (startup:
one pipelined read, one pipelined write of the statics; idle: one range read).

## Targets

{rep.targets()}

## Per N

{rep.detail()}

## Independence of N

Ours at each N, run alternately with ours against a second database holding a fixed
N={SMALL:,} schedule (same server, same window), so machine drift cancels out.

{rep.independence()}

## Backlog

{rep.backlog()}

{ref_note}
## Dispatch lag

{LAG_ENTRIES} entries due at staggered times over {fmt(r.get('lag_window_s', 10))} s (saved
through each package's own `RedBeatSchedulerEntry.save()`), run through the real beat
loop (tick, then sleep what it returns) with N={rep.big:,} entries in Redis; lag is send
time minus due time.
Idle CPU: the same loop for {fmt(min(5, r.get('lag_window_s', 10) / 2), 1)} s with nothing due.
The last row is ours again, with the entries written the way celery-redbeat 2.4.2 stores
them (score = due time truncated to the second), as when a celery-redbeat client shares
the schedule or before ours has run an entry once; not a target, shown for migration.

{rep.lag()}

## Redis memory per entry

Background entries in the shared format (definition and meta):

{rep.memory()}

An entry after one run through the scheduler (`MEMORY USAGE`, N={rep.mid:,}): {rep.after_run()}.

## Server commands in one busy tick (K={BUSY_K:,}, N={rep.mid:,})

{rep.commands()}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--compare", metavar="PYTHON",
                        help="an interpreter with celery-redbeat installed, measured alongside")
    parser.add_argument("--ours", metavar="PYTHON",
                        default=str(REPO_VENV_PYTHON if REPO_VENV_PYTHON.exists()
                                    else sys.executable),
                        help="the interpreter with our redbeat (default: the repo's .venv)")
    parser.add_argument("--quick", action="store_true", help="N up to 10,000 only (under a minute)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs per figure, their median is shown (default 5; --quick: 3)")
    parser.add_argument("--ref-backlog", type=int, default=100_000, metavar="K",
                        help="celery-redbeat's backlog size (default 100,000, about a minute)")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server",
                        help="the redis-server binary")
    args = parser.parse_args()
    if args.repeats is None:
        args.repeats = 3 if args.quick else 5
    Bench(args).run()


if __name__ == "__main__":
    main()

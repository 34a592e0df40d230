"""End-to-end dispatch benchmark: from the moment K entries fall due until a real broker
holds all K messages, with a Redis broker and with RabbitMQ; ours and (with --compare)
celery-redbeat 2.4.2 in alternation, and a floor that includes the broker's work.

    python benchmarks/e2e.py --compare /opt/ref/bin/python
    python benchmarks/e2e.py --compare /opt/ref/bin/python --sizes 10000,1000000 --k 1000,10000

Shares bench.py's server, schedule filling, alternation and floor (bench.Bench): only
the scenario (worker.py ``e2e``: the real beat loop, nothing stubbed, publishing for
real) and the broker half of the floor are its own. Writes its section at the top of
RESULTS.md (bench.py keeps it when it rewrites the rest) and e2e.json.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (benchmarks/bench.py)
import dataset  # noqa: E402
import sections  # noqa: E402

HERE = Path(__file__).resolve().parent
RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"


def rabbitmq_up(url: str) -> bool:
    from kombu.utils.url import url_to_parts

    parts = url_to_parts(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 1).close()
    except OSError:
        return False
    return True


def sample_message(broker: redis.Redis, broker_url: str) -> str:
    """A message as Celery writes it to a Redis broker for one of the benchmark's
    entries (the floor writes K copies of it)."""
    from celery import Celery

    app = Celery("floor", broker=broker_url, set_as_current=False)
    app.conf.task_default_queue = "floor-sample"
    app.send_task("tasks.e2e", [], {}, task_id=f"due0:{int(time.time() * 1000)}",
                  headers={"celery_beat_task": True})
    text = broker.lindex("floor-sample", 0).decode()
    broker.delete("floor-sample")
    return text


def floor_redis(client: redis.Redis, broker: redis.Redis, count: int, message: str,
                cpu: list[float] | None = None) -> float:
    """The scheduling floor (bench.floor_busy) plus one pipelined LPUSH of ``count``
    messages of the real size. With ``cpu``, the CPU seconds it took (this process's
    and the Redis server's, which holds the broker too) are appended to it."""
    spent: list[float] = []
    scheduling = bench.floor_busy(client, count, spent)
    cpu_began = time.process_time() + bench.redis_cpu(broker)
    began = time.perf_counter()
    with broker.pipeline(transaction=False) as pipe:
        for _ in range(count):
            pipe.lpush("floor", message)
        pipe.execute()
    elapsed = time.perf_counter() - began
    if cpu is not None:
        cpu.append(spent[0] + time.process_time() + bench.redis_cpu(broker) - cpu_began)
    broker.delete("floor")
    return scheduling + elapsed


def floor_amqp(client: redis.Redis, url: str, count: int, message: str) -> float:
    """The scheduling floor plus the raw AMQP publish (py-amqp) of ``count`` messages of
    the real size on one channel, until RabbitMQ confirmed the last."""
    import amqp
    from kombu.utils.url import url_to_parts

    scheduling = bench.floor_busy(client, count)
    record = json.loads(message)
    body = base64.b64decode(record["body"])
    parts = url_to_parts(url)
    connection = amqp.Connection(f"{parts.hostname}:{parts.port or 5672}",
                                 userid=parts.username or "guest",
                                 password=parts.password or "guest")
    connection.connect()
    channel = connection.channel()
    queue = f"rbfloor{uuid.uuid4().hex[:8]}"
    channel.queue_declare(queue, durable=True, auto_delete=False)
    channel.confirm_select()
    acked = [0]

    def on_ack(tag: int, multiple: bool) -> None:
        acked[0] = max(acked[0], tag)

    channel.events["basic_ack"].add(on_ack)
    began = time.perf_counter()
    for _ in range(count):
        channel.basic_publish(
            amqp.Message(body, content_type=record["content-type"],
                         content_encoding=record["content-encoding"],
                         application_headers=record["headers"], delivery_mode=2),
            exchange="", routing_key=queue)
    while acked[0] < count:
        connection.drain_events(timeout=30)
    elapsed = time.perf_counter() - began
    channel.queue_delete(queue)
    connection.close()
    return scheduling + elapsed


class EndToEnd(bench.Bench):
    """bench.Bench's alternation and floors, with the end-to-end scenario."""

    def run(self) -> None:  # noqa: C901 - one linear plan of measurements
        args = self.args
        self.began = time.perf_counter()
        self.describe()
        server = bench.RedisServer(binary=args.redis_server).start()
        self.client = server.client(decode_responses=False, socket_timeout=120)
        self.url = server.url
        self.small = redis.Redis(port=server.port, db=1, socket_timeout=120)
        self.small_url = f"redis://127.0.0.1:{server.port}/1"
        broker_url = f"redis://127.0.0.1:{server.port}/2"
        broker = redis.Redis(port=server.port, db=2, socket_timeout=120)
        brokers = [("redis", broker_url)]
        if args.rabbitmq and rabbitmq_up(args.rabbitmq):
            brokers.append(("rabbitmq", args.rabbitmq))
        message = sample_message(broker, broker_url)
        self.results.update(e2e=[], message_bytes=len(message), sizes=args.sizes, ks=args.k)
        try:
            dataset.add_background(self.small, 0, bench.SMALL)
            populated = 0
            for size in args.sizes:
                dataset.add_background(self.client, populated, size)
                populated = size
                self.log(f"N={size:,}: populated")
                flat_only = size != args.sizes[0]  # a larger N: ours, for flatness only
                for k in args.k if not flat_only else args.k[:1]:
                    big = k > bench.BUSY_K
                    bursts, repeats = (2, 1) if big else (args.bursts, args.repeats)
                    for name, url in brokers if not flat_only else brokers[:1]:
                        key = f"e2e {name} K={k} N={size}"

                        floor_cpu = self.results.setdefault("floor_cpu", {}).setdefault(
                            f"e2e {name} K={k} N={size}", [])

                        def floor(name: str = name, url: str = url, k: int = k,
                                  floor_cpu: list[float] = floor_cpu) -> float:
                            if name == "redis":
                                return floor_redis(self.client, broker, k, message, floor_cpu)
                            return floor_amqp(self.client, url, k, message)

                        queue = f"rbbench{uuid.uuid4().hex[:8]}"
                        self.measure(key, "e2e", (k, bursts, url, queue), size,
                                     ["ours"] if flat_only else None, repeats,
                                     baseline=flat_only, floor=floor)
                        self.results["e2e"].append({"key": key, "broker": name, "k": k,
                                                    "n": size})
        finally:
            self.small.close()
            broker.close()
            self.client.close()
            server.cleanup()
        self.results["elapsed_s"] = time.perf_counter() - self.began
        self.results["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        sections.publish("e2e", self.results, report(self.results, args),
                         write=not args.no_write)


def pooled(r: dict[str, Any], key: str, impl: str) -> list[float]:
    """Every measured burst's lag (ms) of ``impl`` for ``key``, over all runs."""
    runs = r["samples"].get(key, {}).get(impl, [])
    return sorted(lag for run in runs for lag in run["lags_ms"])


def cpu_ms(r: dict[str, Any], key: str, impl: str) -> float:
    """The median CPU (ms) a measured burst of ``impl`` cost: its process and Redis."""
    runs = r["samples"].get(key, {}).get(impl, [])
    spent = [own + server for run in runs
             for own, server in zip(run.get("cpu_ms", []), run.get("redis_cpu_ms", []),
                                    strict=True)]
    return statistics.median(spent) if spent else float("nan")


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def report(r: dict[str, Any], args: argparse.Namespace) -> str:  # noqa: C901
    fmt, times = bench.fmt, bench.times
    compare = "celery-redbeat" in r["implementations"]
    rows = ["| broker | K due | N | celery-redbeat 2.4.2 | ours | floor | ours faster than "
            "celery-redbeat | floor faster than ours | last message lag p50 / p99, ours "
            "(celery-redbeat) | CPU per burst (process + Redis): celery-redbeat / ours / "
            "floor |", "|---|---|---|---|---|---|---|---|---|---|"]
    targets: list[str] = []
    seen: dict[tuple[str, int, int], dict[str, float]] = {}
    for case in r["e2e"]:
        key, k = case["key"], case["k"]
        cases = r["cases"][key]
        ours = cases.get("ours", {}).get("seconds", float("nan"))
        ref = cases.get("celery-redbeat", {}).get("seconds", float("nan"))
        floor = r["floor"].get(key, float("nan"))
        lags = pooled(r, key, "ours")
        ref_lags = pooled(r, key, "celery-redbeat")

        def cell(seconds: float, k: int = k) -> str:
            return f"{fmt(seconds * 1000)} ms ({fmt(k / seconds)}/s)" if seconds == seconds \
                else "-"

        lag_cell = f"{fmt(percentile(lags, .5))} / {fmt(percentile(lags, .99))} ms"
        if ref_lags:
            lag_cell += (f" ({fmt(percentile(ref_lags, .5))} / "
                         f"{fmt(percentile(ref_lags, .99))} ms)")
        floor_cpu = r.get("floor_cpu", {}).get(key) or []
        cpus = (cpu_ms(r, key, "celery-redbeat"), cpu_ms(r, key, "ours"),
                statistics.median(floor_cpu) * 1000 if floor_cpu else float("nan"))
        cpu_cell = " / ".join(f"{fmt(c)} ms" if c == c else "-" for c in cpus) \
            if case["broker"] == "redis" else "-"
        rows.append(f"| {case['broker']} | {k:,} | {case['n']:,} | {cell(ref)} | {cell(ours)} | "
                    f"{cell(floor)} | {times(ref, ours)} | {times(ours, floor)} | {lag_cell} | "
                    f"{cpu_cell} |")
        seen[(case["broker"], k, case["n"])] = {"ours": ours, "ref": ref, "floor": floor,
                                                "cpu": cpus,
                                                "base": cases.get(bench.BASELINE, {})
                                                .get("seconds", float("nan"))}

    def target(name: str, figure: str, met: bool) -> None:
        targets.append(f"| {name} | {figure} | {'**met**' if met else '**NOT met**'} |")

    if bench.BEFORE in r["implementations"]:
        for case in r["e2e"]:
            key = case["key"]
            before = r["cases"][key].get(bench.BEFORE, {}).get("seconds", float("nan"))
            ours = r["cases"][key].get("ours", {}).get("seconds", float("nan"))
            targets.append(f"| {key}: ours / before (`--before`), same window | "
                           f"{fmt(ours * 1000)} / {fmt(before * 1000)} ms; CPU "
                           f"{fmt(cpu_ms(r, key, 'ours'))} / "
                           f"{fmt(cpu_ms(r, key, bench.BEFORE))} ms | |")
    first = args.sizes[0]
    redis_case = seen.get(("redis", 1000, first))
    if redis_case:
        o, f, ref = redis_case["ours"], redis_case["floor"], redis_case["ref"]
        target(f"Redis broker, K=1,000 of N={first:,}: within 2x of the floor",
               f"{fmt(o * 1000)} ms vs floor {fmt(f * 1000)} ms = {times(o, f)}", o / f <= 2)
        _, ours_cpu, floor_cpu = redis_case["cpu"]
        if ours_cpu == ours_cpu and floor_cpu == floor_cpu:
            target("the same, in CPU per burst (process + Redis; independent of the load)",
                   f"{fmt(ours_cpu)} ms vs floor {fmt(floor_cpu)} ms = "
                   f"{times(ours_cpu, floor_cpu)}", ours_cpu / floor_cpu <= 2)
        if compare:
            target(f"Redis broker, K=1,000 of N={first:,}: >= 8x celery-redbeat's rate",
                   f"{fmt(1000 / o)}/s vs {fmt(1000 / ref)}/s = {times(ref, o)}", ref / o >= 8)
    amqp_case = seen.get(("rabbitmq", 1000, first))
    if amqp_case and compare:
        o, ref = amqp_case["ours"], amqp_case["ref"]
        target(f"RabbitMQ, K=1,000 of N={first:,}: >= 3x celery-redbeat's rate",
               f"{fmt(1000 / o)}/s vs {fmt(1000 / ref)}/s = {times(ref, o)}", ref / o >= 3)
    for (name, k, n), v in seen.items():
        if n != first and v["base"] == v["base"]:
            target(f"flat in N: {name} broker K={k:,}, N={n:,} vs N={bench.SMALL:,} "
                   "(run alternately) within 1.5x",
                   f"{fmt(v['ours'] * 1000)} ms vs {fmt(v['base'] * 1000)} ms = "
                   f"{times(v['ours'], v['base'])}",
                   max(v["ours"], v["base"]) / min(v["ours"], v["base"]) <= 1.5)
    command = "python benchmarks/e2e.py" + (f" --compare {args.compare}" if args.compare else "")
    command += f" --sizes {','.join(map(str, args.sizes))} --k {','.join(map(str, args.k))}"
    return f"""## End to end: due -> all K messages in the broker

Command: `{command}`, run {r['date']}, {fmt(r['elapsed_s'])} s in all.
K entries fall due at once among N; the real beat loop (tick, sleep what it returns) of
each package's own, unchanged `RedBeatScheduler` publishes them for real; the time is from
the due time until the broker holds all K messages (the last message's lag), median of
the measured bursts ({args.bursts} per run after one unmeasured warm-up burst,
{args.repeats} runs in alternation; K above 1,000: 2 bursts, 1 run). Brokers: a Redis
database of the benchmark's own redis-server, and the RabbitMQ server on this machine
(a queue of the run's own, deleted after). The **floor** is the stand-in floor's Redis
work (one range read, one pipelined hash read, one pipelined write-back) plus the
broker's: one pipelined `LPUSH` of K messages of the real size ({fmt(r['message_bytes'])}
bytes, as Celery writes it) for Redis; for RabbitMQ the raw py-amqp publish of K such
messages on one channel until the last is confirmed. The machine has 2 cores shared with
other jobs: compare ratios, which are measured in the same window, not absolute figures.
The CPU a burst cost (Redis broker) is the measuring process's (every thread) plus the
redis-server's, which holds both the schedule and the broker: from 0.3 s before the due
time to the end for the packages, around the same work for the floor. A loaded machine
makes the wall times wait for a CPU, not the CPU times.

""" + sections.tables(targets, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--compare", metavar="PYTHON",
                        help="an interpreter with celery-redbeat installed, measured alongside")
    sections.add_ours_option(parser)
    sections.add_no_write_option(parser)
    parser.add_argument("--sizes", default="10000",
                        help="N, comma-separated; N after the first: ours only, for flatness")
    parser.add_argument("--k", default="1000", help="K due at once, comma-separated")
    parser.add_argument("--bursts", type=int, default=5, help="measured bursts per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per implementation")
    parser.add_argument("--rabbitmq", default=os.environ.get("REDBEAT_BENCH_RABBITMQ", RABBITMQ),
                        help="the RabbitMQ URL (skipped when nothing listens there)")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    parser.add_argument("--before", metavar="SRC",
                        help="an earlier tree of ours (its src), measured in the same alternation")
    args = parser.parse_args()
    args.sizes = [int(n) for n in args.sizes.split(",")]
    args.k = [int(k) for k in args.k.split(",")]
    EndToEnd(args).run()


if __name__ == "__main__":
    main()

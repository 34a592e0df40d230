"""Changes by label on a large schedule: what ``redbeat.groups`` costs.

    python benchmarks/labels.py                   # N = 100,000 entries, 10% labelled
    python benchmarks/labels.py --n 20000 --share 0.5

A redis-server of the benchmark's own holds N interval entries written straight in the
stored format; a share of them carries the label ``tenant:7`` (the rest ``tenant:0``).
Each operation is timed once, in order (select, disable, enable, run now, delete), with
the client's round trips counted (one per command or pipeline sent) and the server's
commands (``INFO commandstats``). Writes its section of RESULTS.md (the rest of the file
is kept) and the raw figures to ``benchmarks/labels.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import redis  # noqa: E402
import sections  # noqa: E402
from celery import Celery  # noqa: E402
from dataset import write_entries  # noqa: E402

from redbeat import groups  # noqa: E402

LABEL = "tenant:7"


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one send is one round trip."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_commands(client: redis.Redis) -> int:
    return sum(int(stats["calls"]) for stats in client.info("commandstats").values())


def fill(client: redis.Redis, n: int, share: float) -> int:
    """N entries due in the next hour; every (1/share)-th carries LABEL. Returns how
    many do."""
    now = time.time()
    write_entries(client, ((f"e{i}", now + 3600 + i % 600) for i in range(n)), 3600.0,
                  "tasks.report")
    step = max(1, round(1 / share))
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.hset(f"redbeat:e{i}", "labels", json.dumps([LABEL if i % step == 0
                                                         else "tenant:0"]))
        if len(pipe) >= 10_000:
            pipe.execute()
    pipe.execute()
    return len(range(0, n, step))


def measure(name: str, client: redis.Redis, action: Any) -> dict[str, Any]:
    commands, sent = server_commands(client), CountingConnection.sent
    began = time.perf_counter()
    result = action()
    took = time.perf_counter() - began
    return {"operation": name, "seconds": took, "round_trips": CountingConnection.sent - sent,
            "server_commands": server_commands(client) - commands - 1,  # INFO itself
            "entries": len(result.changed) if hasattr(result, "changed") else len(result)}


def run(n: int, share: float) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="redbeat-labels-")
    port = free_port()
    server = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port",
                               str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", directory],
                              stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, decode_responses=True)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        expected = fill(client, n, share)
        app = Celery("labels", set_as_current=False)
        app.conf.redbeat_redis_url = f"redis://127.0.0.1:{port}/0"
        app.redbeat_redis = redis.Redis(connection_pool=redis.ConnectionPool(
            host="127.0.0.1", port=port, decode_responses=True,
            connection_class=CountingConnection))
        rows = [
            measure("select (labelled)", client, lambda: groups.labelled(app, LABEL)),
            measure("disable", client, lambda: groups.set_enabled(app, LABEL, False)),
            measure("enable", client, lambda: groups.set_enabled(app, LABEL, True)),
            measure("run now", client, lambda: groups.run_all_now(app, LABEL)),
            measure("delete", client, lambda: groups.delete(app, LABEL)),
        ]
        assert all(row["entries"] == expected for row in rows), (rows, expected)
        assert client.zcard("redbeat::schedule") == n - expected
        return {"n": n, "labelled": expected, "rows": rows,
                "redis_version": client.info("server")["redis_version"]}
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


def table(results: dict[str, Any]) -> str:
    lines = ["## Changes by label (benchmarks/labels.py)", "",
             f"N = {results['n']:,} entries, {results['labelled']:,} carrying the label "
             f"(Redis {results['redis_version']}, {os.cpu_count()} cores). A round trip is "
             "one command or pipeline the client sent; the labels are read 2,000 members "
             "per round trip, the writes pipelined 500 scripts per round trip (run now: "
             "two round trips per entry, as `run-now` does):", "",
             "| operation | entries | seconds | round trips | server commands |",
             "| --- | --- | --- | --- | --- |"]
    for row in results["rows"]:
        lines.append(f"| {row['operation']} | {row['entries']:,} | {row['seconds']:.2f} | "
                     f"{row['round_trips']:,} | {row['server_commands']:,} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--share", type=float, default=0.1)
    sections.add_no_write_option(parser)
    args = parser.parse_args()
    results = run(args.n, args.share)
    sections.publish("labels", results, table(results), write=not args.no_write)


if __name__ == "__main__":
    main()

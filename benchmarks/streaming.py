"""`redbeat export`, `import` and `list` at 100,000 and 1,000,000 entries: wall time and
peak memory (RSS) of the command's own process.

    python benchmarks/streaming.py                      # 100,000 and 1,000,000
    python benchmarks/streaming.py --sizes 100000

For each size a private redis-server is filled with that many entries (an interval
each, with arguments), then each command runs as a user runs it, ``python -m redbeat
--url ...``, in a process of its own, its output to a file; its peak RSS is the one the
kernel reports for that child (``wait4``). ``import`` writes the export into another
prefix of the same server (every entry created), so it plans and writes them all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.redis_server import RedisServer  # noqa: E402

CHUNK = 10_000


def fill(server: RedisServer, size: int) -> None:
    client = server.client()
    client.flushall()
    for start in range(0, size, CHUNK):
        with client.pipeline(transaction=False) as pipe:
            for number in range(start, min(start + CHUNK, size)):
                key = f"redbeat:job-{number:07d}"
                pipe.hset(key, mapping={
                    "definition": json.dumps({
                        "name": f"job-{number:07d}", "task": "tasks.report",
                        "args": [number, "daily"], "kwargs": {"fmt": "pdf"},
                        "options": {"queue": "reports"},
                        "schedule": {"__type__": "interval", "every": 3600.0,
                                     "relative": False}}),
                    "meta": json.dumps({"last_run_at": {
                        "__type__": "datetime", "year": 2026, "month": 11, "day": 26,
                        "hour": 9, "minute": 0, "second": 0, "microsecond": 0,
                        "timezone": "UTC"}, "total_run_count": 3})})
                pipe.zadd("redbeat::schedule", {key: 1_800_000_000 + number})
            pipe.execute()


def run(args: list[str], out: Path) -> tuple[float, float, int]:
    """Seconds, peak RSS in MB and exit status of ``python -m redbeat ARGS > out``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    started = time.perf_counter()
    with open(out, "w") as stdout:
        process = subprocess.Popen([sys.executable, "-m", "redbeat", *args], stdout=stdout,
                                   stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    err = process.stderr.read().decode() if process.stderr else ""
    if process.returncode:
        raise SystemExit(f"{args}: exit {process.returncode}: {err}")
    return seconds, usage.ru_maxrss / 1024, process.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--commands", default="export,import,list,list --json",
                        help="which commands to run (export comes first: import reads it)")
    args = parser.parse_args()
    wanted = args.commands.split(",")
    rows = []
    with RedisServer() as server, tempfile.TemporaryDirectory() as scratch:
        for size in (int(text) for text in args.sizes.split(",")):
            fill(server, size)
            export = Path(scratch) / "export.json"
            url = ["--url", server.url]
            commands = {
                "export": ([*url, "export"], export),
                "import": ([*url, "--prefix", "copy:", "import", str(export), "--quiet"],
                           Path(scratch) / "import.txt"),
                "list": ([*url, "list"], Path(scratch) / "list.txt"),
                "list --json": ([*url, "list", "--json"], Path(scratch) / "list.json"),
            }
            figures = {}
            for command in ["export", *(name for name in wanted if name != "export")]:
                figures[command] = run(*commands[command])
                print(f"{size:>9,}  {command:<12} {figures[command][0]:8.1f} s  "
                      f"{figures[command][1]:7.0f} MB", flush=True)
            if "import" in figures:
                assert server.client().zcard("copy::schedule") == size
            if "list" in figures:
                lines = (Path(scratch) / "list.txt").read_text().count("\n")
                assert lines == size + 1, lines
            for command, (seconds, rss, _) in figures.items():
                rows.append((size, command, seconds, rss, export.stat().st_size))
    print("\n| entries | command | wall (s) | peak RSS (MB) |")
    print("| --- | --- | --- | --- |")
    for size, command, seconds, rss, _ in rows:
        print(f"| {size:,} | `redbeat {command}` | {seconds:.1f} | {rss:.0f} |")
    print(f"\nexport file: {rows[-1][4] / 1e6:.0f} MB at {rows[-1][0]:,} entries")


if __name__ == "__main__":
    main()

"""`redbeat list` and the web view read entries through one engine (redbeat.browse):
what a 10-entry page by last run costs each, cold (the last-run order not yet built in
Redis) and warm.

    python benchmarks/listing.py                      # 20,000 entries
    python benchmarks/listing.py --size 100000 --repeats 5

A private redis-server is filled with ``--size`` entries that each ran once (at
different times). For each repeat the last-run order is deleted, then read cold: by
``browse.read_page`` (what ``redbeat web`` renders, without HTML), by ``redbeat list
--sort last --limit 10`` in this process (click's runner: the command's own work), and
by ``python -m redbeat ... list`` as a user runs it (a process start included). Then
warm, the order kept. Medians, and the ratio of the CLI to the web's cold page.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dataset  # noqa: E402  (benchmarks/dataset.py)
from celery import Celery  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from redbeat import browse  # noqa: E402
from redbeat.cli import main as cli  # noqa: E402
from redbeat.keys import KeyLayout  # noqa: E402
from support.redis_server import RedisServer  # noqa: E402


def fill(server: RedisServer, size: int) -> None:
    client = server.client()
    client.flushall()
    now = time.time()
    every = 30 * 86400.0
    for start in range(0, size, dataset.CHUNK):
        stop = min(start + dataset.CHUNK, size)
        # each ran once, the later-numbered more recently: due one interval after
        dataset.write_entries(client, ((f"n{i:07d}", now - size + i + every)
                                       for i in range(start, stop)), every, "tasks.t")
    # write_entries records no run (total_run_count 0): say each ran once
    script = client.register_script(
        "for _, key in ipairs(redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2])) do "
        "local meta = redis.call('HGET', key, 'meta') "
        "redis.call('HSET', key, 'meta', (string.gsub(meta, '\"total_run_count\": 0', "
        "'\"total_run_count\": 1'))) end")
    for start in range(0, size, dataset.CHUNK):
        script(keys=[dataset.SCHEDULE_KEY], args=[start, start + dataset.CHUNK - 1])


def timed(action) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with RedisServer() as server:
        fill(server, args.size)
        app = Celery("listing", set_as_current=False)
        app.conf.update(redbeat_redis_url=server.url, timezone="UTC")
        view = KeyLayout().view_by_last_run
        client = server.client()
        runner = CliRunner()
        command = ["--url", server.url, "list", "--sort", "last", "--limit", "10"]

        def web_page() -> None:
            page = browse.read_page(app, browse.Query(order="last", size=10))
            assert len(page.rows) == 10

        def cli_in_process() -> None:
            result = runner.invoke(cli, command)
            assert result.exit_code == 0 and f"n{args.size - 1:07d}" in result.output, \
                result.output

        def cli_process() -> None:
            result = subprocess.run([sys.executable, "-m", "redbeat", *command],
                                    capture_output=True, text=True,
                                    env={"PYTHONPATH": str(ROOT / "src")})
            assert result.returncode == 0, result.stderr

        web_page()  # connections made, scripts loaded
        figures: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for label, action in (("web page (read_page)", web_page),
                                  ("redbeat list, in process", cli_in_process),
                                  ("redbeat list, own process", cli_process)):
                client.delete(view)
                figures.setdefault(f"{label}, cold", []).append(timed(action))
                figures.setdefault(f"{label}, warm", []).append(timed(action))
        print(f"\n### {args.size:,} entries, a 10-entry page by last run "
              f"(median of {args.repeats})\n")
        print("| read | ms |")
        print("| --- | --- |")
        medians = {label: statistics.median(times) * 1000 for label, times in figures.items()}
        for label, ms in medians.items():
            print(f"| {label} | {ms:.0f} |")
        web = medians["web page (read_page), cold"]
        print(f"\nredbeat list (in process) / web cold page: "
              f"{medians['redbeat list, in process, cold'] / web:.2f}x; as its own process: "
              f"{medians['redbeat list, own process, cold'] / web:.2f}x")


if __name__ == "__main__":
    main()

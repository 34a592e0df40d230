"""What a page of the web view's entries table costs as the schedule grows.

    python benchmarks/web_pages.py                       # 10,000 and 100,000 entries
    python benchmarks/web_pages.py --sizes 10000,1000000 --repeats 7

For each size N, a private redis-server is filled with N entries (a tenth of them
disabled, so parked) and each kind of page is read through ``redbeat.browse.read_page``
(what ``redbeat web`` renders): the server-side read only, without HTML or a browser.
Each figure is the median of ``--repeats`` reads; round trips and commands are counted
on the client. The name and last-run orders are built once before they are measured
(their build time, paid at most every 30 s, is reported apart).

Then every page of the view is requested whole through its WSGI app (``redbeat.web.
create_app``, in process, no HTTP server or browser): the Redis reads and the HTML
rendering, with the round trips each request costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dataset  # noqa: E402  (benchmarks/dataset.py)
from celery import Celery  # noqa: E402

from redbeat import browse  # noqa: E402
from redbeat.runtime import store_for  # noqa: E402
from support.counting import counting_client, counting_commands  # noqa: E402
from support.redis_server import RedisServer  # noqa: E402


def queries(size: int) -> dict[str, browse.Query]:
    return {
        "next run, first page": browse.Query(),
        "next run, last page": browse.Query(start=size - browse.PAGE_SIZE),
        "name, middle page": browse.Query(order="name", start=size // 2),
        "last run, middle page": browse.Query(order="last", start=size // 2),
        "state=disabled": browse.Query(state="disabled"),
        "task filter (1 in 10)": browse.Query(task="tasks.t3"),
        "name filter, 10 matches": browse.Query(name=f"n{size // 2 // 10}"),
    }


def fill(server: RedisServer, size: int) -> None:
    client = server.client()
    client.flushall()
    due = time.time() + 30 * 86400
    for group in range(10):  # tasks.t0 .. tasks.t9, one entry in ten of each
        dataset.write_entries(client, ((f"n{i}", due + i) for i in range(group, size, 10)
                                       if i % 10 != 0), 30 * 86400.0, f"tasks.t{group}")
    dataset.write_entries(client, ((f"n{i}", -1.0) for i in range(0, size, 10)),
                          30 * 86400.0, "tasks.t0", enabled=False)


def measure(app: Any, query: browse.Query, repeats: int) -> dict[str, float]:
    times, trips, commands = [], 0, 0
    for _ in range(repeats):
        before = app.redbeat_redis.counter.round_trips
        with counting_commands() as count:
            started = time.perf_counter()
            page = browse.read_page(app, query)
            times.append(time.perf_counter() - started)
        trips, commands = app.redbeat_redis.counter.round_trips - before, count.total
    return {"ms": statistics.median(times) * 1000, "round trips": trips,
            "commands": commands, "rows": len(page.rows), "examined": page.examined}


def pages(size: int) -> dict[str, str]:
    return {
        "/entries": "/entries",
        "/entries, last page": f"/entries?start={size - browse.PAGE_SIZE}",
        "/entries?order=name, middle": f"/entries?order=name&start={size // 2}",
        "/entries?state=disabled": "/entries?state=disabled",
        "/entry (one entry)": f"/entry?name=n{size // 2 + 1}",
        "/timeline (as cached)": "/timeline",
        "/nodes": "/nodes",
    }


def measure_pages(app: Any, size: int, repeats: int) -> None:
    """Each page through the WSGI app: median time, round trips of the last request.
    The timeline is requested once before (its computation is kept 30 s in Redis and
    shared) and its first computation reported apart."""
    from redbeat.web import create_app

    client = create_app(app).test_client()
    started = time.perf_counter()
    client.get("/timeline")
    print(f"\ntimeline computed in {(time.perf_counter() - started) * 1000:.0f} ms "
          f"(at most every {browse.TIMELINE_REFRESH} s)\n")
    print("| page (whole request) | ms (median) | round trips | bytes |")
    print("| --- | --- | --- | --- |")
    for label, path in pages(size).items():
        times, trips, length = [], 0, 0
        for _ in range(repeats):
            before = app.redbeat_redis.counter.round_trips
            started = time.perf_counter()
            response = client.get(path)
            times.append(time.perf_counter() - started)
            trips = app.redbeat_redis.counter.round_trips - before
            length = len(response.data)
            assert response.status_code == 200, (path, response.status_code)
        print(f"| {label} | {statistics.median(times) * 1000:.1f} | {trips} | {length:,} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with RedisServer() as server:
        for size in (int(text) for text in args.sizes.split(",")):
            fill(server, size)
            app = Celery("web-pages", set_as_current=False)
            app.conf.update(redbeat_redis_url=server.url, timezone="UTC")
            app.redbeat_redis = counting_client(server.url)
            store = store_for(app)
            started = time.perf_counter()
            store.build_name_view(browse.VIEW_LIFETIME)
            name_build = time.perf_counter() - started
            started = time.perf_counter()
            store.build_last_run_view(browse.last_run_score, browse.VIEW_LIFETIME)
            last_build = time.perf_counter() - started
            print(f"\n## {size:,} entries\n")
            print(f"name order built in {name_build * 1000:.0f} ms, last-run order in "
                  f"{last_build * 1000:.0f} ms (each at most every {browse.VIEW_REFRESH} s)\n")
            print("| page | ms (median) | round trips | commands | rows | examined |")
            print("| --- | --- | --- | --- | --- | --- |")
            for label, query in queries(size).items():
                m = measure(app, query, args.repeats)
                print(f"| {label} | {m['ms']:.1f} | {m['round trips']} | {m['commands']} | "
                      f"{m['rows']} | {m['examined']} |")
            measure_pages(app, size, args.repeats)


if __name__ == "__main__":
    main()

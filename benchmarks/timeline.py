"""What computing the web view's timeline costs (every run in the next 24 hours).

    python benchmarks/timeline.py                    # 100,000 entries
    python benchmarks/timeline.py --size 200000 --repeats 3

A private redis-server holds ``--size`` entries: a tenth every minute, a thousand
daily crontabs at midnight (UTC), the rest half hourly and half daily intervals, their
next runs spread over their interval. The timeline is computed through
``redbeat.browse.compute_timeline`` with the default budget (the first 20,000 entries by
next run expanded, the rest counted once) and with a budget that expands them all;
each figure is the median of ``--repeats`` computations, round trips counted on the
client. The page serves a computed timeline for 30 s, so this is paid at most that
often.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from celery import Celery  # noqa: E402
from celery.schedules import crontab  # noqa: E402

from redbeat import RedBeatSchedulerEntry, browse  # noqa: E402
from support.counting import counting_client  # noqa: E402
from support.redis_server import RedisServer  # noqa: E402
from support.web import write_entries  # noqa: E402

NIGHTLY = 1000


def fill(app: Celery, size: int, now: float) -> None:
    minutely = size // 10
    rest = size - minutely - NIGHTLY
    rows = [(f"minutely-{i}", "tasks.m", now + 1 + i * 59 / minutely, {"every": 60.0})
            for i in range(minutely)]
    rows += [(f"hourly-{i}", "tasks.h", now + 1 + i * 3599 / (rest // 2), {"every": 3600.0})
             for i in range(rest // 2)]
    rows += [(f"daily-{i}", "tasks.d", now + 1 + i * 86000 / (rest - rest // 2),
              {"every": 86400.0}) for i in range(rest - rest // 2)]
    write_entries(app, rows)
    for i in range(NIGHTLY):  # saved now: due at the next midnight
        RedBeatSchedulerEntry(f"nightly-{i}", "tasks.n", crontab(minute=0, hour=0),
                              app=app).save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    server = RedisServer().start()
    try:
        app = Celery("bench", set_as_current=False)
        app.conf.redbeat_redis_url = server.url
        app.conf.timezone = "UTC"
        app.redbeat_redis = counting_client(server.url)
        now = time.time()  # every computation from the same moment: nothing runs here
        fill(app, options.size, now)
        print(f"{options.size:,} entries: {options.size // 10:,} every minute, {NIGHTLY:,} "
              "nightly crontabs, the rest hourly and daily intervals")
        for label, budget in (("default budget", None), ("all expanded", options.size)):
            times, trips = [], []
            for _ in range(options.repeats):
                before = app.redbeat_redis.counter.round_trips
                found = browse.compute_timeline(app, now, budget=budget)
                times.append(found.seconds)
                trips.append(app.redbeat_redis.counter.round_trips - before)
            total = sum(bucket.count for bucket in found.buckets)
            print(f"{label}: {statistics.median(times):.2f} s, "
                  f"{statistics.median(trips):.0f} round trips; expanded {found.expanded:,}, "
                  f"counted once {found.counted_once:,}, capped {found.capped:,}, "
                  f"{total:,} runs, busiest minute {max(b.count for b in found.buckets):,}")
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()

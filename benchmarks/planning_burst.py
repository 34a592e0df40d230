"""What planning a burst costs per entry, by kind of schedule (issue 29).

    python benchmarks/planning_burst.py                 # K=1,000 entries due at once
    python benchmarks/planning_burst.py --k 10000 --repeats 7

The pure half of a tick, alone: ``planning.plan_batch`` over K rows due at one minute
boundary, as tick.lua hands them over (definition and meta texts), with a fixed "now"
and no Redis or broker. Each kind is K entries of one schedule (a thousand ``* * * * *``
crontabs, the minute burst; intervals; rrules), last run a minute before: decoding
(through the app's definition cache, warm as on a beat that has run a while), the next
run, the catch-up and the run after. The figure is CPU time per entry (process time,
so the machine's other load counts little), the best of ``--repeats`` runs, and its
ratio to the interval's: how much more a calendar schedule costs to plan.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from celery import Celery  # noqa: E402
from celery.schedules import crontab as celery_crontab  # noqa: E402
from celery.schedules import schedule  # noqa: E402

from redbeat import RedBeatSchedulerEntry  # noqa: E402
from redbeat.batch import Row  # noqa: E402
from redbeat.decoder import dumps  # noqa: E402
from redbeat.planning import TickSettings, plan_batch  # noqa: E402
from redbeat.schedules import crontab, rrule  # noqa: E402

UTC = timezone.utc
NOW = datetime(2027, 6, 1, 12, 0, 0, 4000, tzinfo=UTC)  # 4 ms after the boundary
LAST = datetime(2027, 6, 1, 11, 59, tzinfo=UTC)

#: kind -> the schedule stored (the entries' definitions encode it)
SCHEDULES = {
    "interval 60 s": schedule(timedelta(minutes=1)),
    "crontab * * * * *": celery_crontab(),
    "crontab */5 8-18 mon-fri, zoned": crontab("*/5", "8-18", "mon-fri",
                                                timezone="Europe/London"),
    "rrule MINUTELY, zoned": rrule("MINUTELY", dtstart=datetime(2027, 1, 1),
                                   timezone="Europe/London"),
}


def rows(kind: str, k: int) -> list[Row]:
    meta = json.dumps({"last_run_at": {
        "__type__": "datetime", "year": LAST.year, "month": LAST.month, "day": LAST.day,
        "hour": LAST.hour, "minute": LAST.minute, "second": 0, "microsecond": 0,
        "timezone": "UTC"}, "total_run_count": 1})
    return [Row(f"redbeat:{kind}-{i}", NOW.timestamp(),
                json.dumps({"name": f"{kind}-{i}", "task": "tasks.burst",
                            "schedule": json.loads(dumps(SCHEDULES[kind])), "args": [],
                            "kwargs": {},
                            "options": {}, "enabled": True}), meta)
            for i in range(k)]


def measure(app: Celery, batch: list[Row]) -> float:
    """CPU seconds per entry for one plan of ``batch``."""
    started = time.process_time()
    plan = plan_batch(app, batch, NOW, TickSettings(node="bench"), RedBeatSchedulerEntry)
    elapsed = time.process_time() - started
    assert len(plan.claims) == len(batch), "every entry of the burst is due"
    return elapsed / len(batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/planning_burst.py",
                                     description=__doc__)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    app = Celery("planning-burst", set_as_current=False)
    app.conf.update(timezone="Europe/London", redbeat_redis_url="redis://127.0.0.1:1/0")
    batches = {kind: rows(kind, args.k) for kind in SCHEDULES}
    for batch in batches.values():
        measure(app, batch)  # warm: the definition cache holds the texts, as on a beat
    best = {kind: min(measure(app, batches[kind]) for _ in range(args.repeats))
            for kind in SCHEDULES}
    base = best["interval 60 s"]
    print(f"plan_batch, K={args.k} due at once, CPU per entry (best of {args.repeats}):")
    for kind, seconds in best.items():
        print(f"  {kind:34s} {seconds * 1e6:7.1f} us  {seconds / base:5.2f}x the interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())

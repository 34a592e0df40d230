"""How the age of an rrule affects its next-run computation.

    python benchmarks/nexttime_age.py                  # every rule, ages 1 day .. 100 years
    python benchmarks/nexttime_age.py --timeout 60     # wait longer for a slow computation

For each rule and each age (how long before "now" its ``dtstart`` lies) a fresh schedule
is built and its first ``next_after(now)`` and ``latest_slot(.., now)`` are timed: what
a beat pays for an entry on the first tick after it starts, when nothing is cached.
Each measurement runs in its own process (so a computation that never returns is cut at
``--timeout`` and reported as such); the figure is the best of ``--repeats`` runs, and
the ratio is to the same rule one day old. An age-independent computation has ratios
near 1.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from redbeat.nexttime import latest_slot, next_after  # noqa: E402
from redbeat.schedules import rrule  # noqa: E402

NOW = datetime(2026, 6, 1, 12, 0, 7, 250000, tzinfo=timezone.utc)
AGES = {"1 day": timedelta(days=1), "120 days": timedelta(days=120),
        "1 year": timedelta(days=365), "100 years": timedelta(days=36524)}
#: name -> rrule arguments (dtstart is added per age)
RULES: dict[str, dict[str, Any]] = {
    "SECONDLY/10": {"freq": "SECONDLY", "interval": 10},
    "MINUTELY": {"freq": "MINUTELY"},
    "HOURLY/7": {"freq": "HOURLY", "interval": 7},
    "DAILY 09:30": {"freq": "DAILY", "byhour": [9], "byminute": [30], "bysecond": [0]},
    "MINUTELY 9-17h weekdays": {"freq": "MINUTELY", "byhour": list(range(9, 18)),
                                "byweekday": [0, 1, 2, 3, 4]},
    "SECONDLY/10 count=10^9": {"freq": "SECONDLY", "interval": 10, "count": 10**9},
}


def measure(rule: str, age: str) -> float:
    """Seconds for the first next_after and latest_slot of a fresh schedule."""
    arguments = dict(RULES[rule])
    schedule = rrule(arguments.pop("freq"), dtstart=NOW - AGES[age], **arguments)
    started = time.perf_counter()
    upcoming = next_after(schedule, NOW)
    latest_slot(schedule, NOW - timedelta(hours=1), NOW)
    elapsed = time.perf_counter() - started
    assert upcoming is not None and upcoming > NOW
    return elapsed


def _child(rule: str, age: str, pipe: Any) -> None:
    pipe.send(measure(rule, age))


def timed(rule: str, age: str, timeout: float) -> float | None:
    """One measurement in its own process; None when it ran past ``timeout``."""
    receive, send = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.Process(target=_child, args=(rule, age, send), daemon=True)
    process.start()
    if not receive.poll(timeout):
        process.kill()
        process.join()
        return None
    result = float(receive.recv())
    process.join()
    return result


def show(seconds: float | None, timeout: float) -> str:
    if seconds is None:
        return f"> {timeout:g} s"
    return f"{seconds * 1000:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    print(f"now = {NOW.isoformat()}; best of {options.repeats}; "
          f"ratio to the same rule 1 day old")
    print(f"{'rule':<26}" + "".join(f"{age:>22}" for age in AGES))
    for rule in RULES:
        cells, base = [], None
        for age in AGES:
            runs = []
            for _ in range(options.repeats):
                runs.append(timed(rule, age, options.timeout))
                if runs[-1] is None:
                    break  # a timeout does not get faster on a second try
            best = None if None in runs else min(r for r in runs if r is not None)
            base = best if base is None else base
            ratio = "" if best is None or not base else f" (x{best / base:.1f})"
            cells.append(show(best, options.timeout) + ratio)
        print(f"{rule:<26}" + "".join(f"{cell:>22}" for cell in cells), flush=True)


if __name__ == "__main__":
    main()

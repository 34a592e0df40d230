"""The long profile: ``python -m tests.sim [--years N] [--out REPORT.md] [--only NAME...]``.

Runs every scenario of :func:`tests.sim.profiles.long_profile` (simulated years, every
zone as the app zone, ``enable_utc`` on and off) on a redis-server of its own, and writes
a markdown report: per scenario the ticks and the wall time, per case the dispatches
compared and each mismatch (and the ticks that checked the next due time the tick
before worked out, as the row ``(next due time)``). The report is rewritten after every
scenario, so a run cut short still reports what finished. Exit status 1 when any case mismatched.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for support

from support.redis_server import RedisServer  # noqa: E402

from .driver import NEXT_DUE, Outcome, Scenario, simulate  # noqa: E402
from .profiles import long_profile  # noqa: E402

SHOWN = 10  # mismatches listed per case; the count says how many in all


def section(scenario: Scenario, outcomes: list[Outcome], ticks: int, seconds: float) -> str:
    lines = [
        f"## {scenario.name}",
        "",
        f"App zone {scenario.zone}, enable_utc {scenario.enable_utc}, "
        f"{scenario.start:%Y-%m-%d %H:%M} UTC + {scenario.span}, "
        f"{scenario.downtimes} downtimes, seed {scenario.seed}: {ticks} ticks, "
        f"{seconds:.0f} s wall.",
        "",
        "| case | compared | sent | mismatches |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {o.case} | {o.compared} | {o.sent} | {len(o.mismatches)} |" for o in outcomes]
    for outcome in outcomes:
        if outcome.mismatches:
            lines += ["", f"`{outcome.case}`:", ""]
            lines += [f"- {text}" for text in outcome.mismatches[:SHOWN]]
            if len(outcome.mismatches) > SHOWN:
                lines.append(f"- ... {len(outcome.mismatches) - SHOWN} more")
    return "\n".join(lines) + "\n"


def report(command: str, sections: list[str], totals: dict[str, int], done: bool) -> str:
    state = "complete" if done else "in progress (scenarios so far)"
    head = [
        "# Differential simulator: long profile",
        "",
        f"`{command}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {state}.",
        "",
        f"Dispatches compared: {totals['compared']}; sent: {totals['sent']}; "
        f"cases with a mismatch: {totals['failed']} of {totals['cases']}.",
        "",
    ]
    return "\n".join(head) + "\n" + "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("--years", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=Path("sim-report.md"))
    parser.add_argument("--only", nargs="*", default=None, help="scenario names")
    args = parser.parse_args(argv)
    command = "python -m tests.sim " + " ".join(argv if argv is not None else sys.argv[1:])
    scenarios = [s for s in long_profile(args.years) if not args.only or s.name in args.only]
    sections: list[str] = []
    totals = {"compared": 0, "sent": 0, "failed": 0, "cases": 0}
    with RedisServer() as server:
        for scenario in scenarios:
            server.client().flushall()
            began = time.monotonic()
            outcomes, simulation = simulate(scenario, server.url)
            seconds = time.monotonic() - began
            sections.append(section(scenario, outcomes, len(simulation.ticks), seconds))
            totals["compared"] += sum(o.compared for o in outcomes if o.case != NEXT_DUE)
            totals["sent"] += sum(o.sent for o in outcomes)
            totals["failed"] += sum(1 for o in outcomes if o.mismatches)
            totals["cases"] += len(outcomes)
            args.out.write_text(report(command, sections, totals, done=False))
            print(f"{scenario.name}: {len(simulation.ticks)} ticks, {seconds:.0f} s, "
                  f"{sum(1 for o in outcomes if o.mismatches)} case(s) mismatched", flush=True)
    args.out.write_text(report(command, sections, totals, done=True))
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

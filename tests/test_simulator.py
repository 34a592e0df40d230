"""The differential simulator's fast profile: weeks of simulated time (beat up in windows
around what matters, about 20 days of ticks in all) through the real tick and a real Redis,
every dispatch compared with the independent oracle.

See tests/sim/ (driver, oracle, cases, profiles); the long profile is
``python -m tests.sim``. Budget: about 23 s of CPU (its redis-server included), 25-40 s
of wall time alone on two loaded cores; the longest scenario, spring-new-york, about 5 s
of CPU. A case the core still gets wrong is listed in ``KNOWN`` with the issue item: it
fails the suite the day it is fixed, so it is removed then.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery
from celery import schedules as celery_schedules

from sim.driver import simulate
from sim.oracle import Cron, Zone, cron_runs, relative_interval_runs
from sim.profiles import fast_profile
from support.redis_server import RedisServer

SCENARIOS = {scenario.name: scenario for scenario in fast_profile()}

#: (scenario, case) -> why it still mismatches (an issue item): expected to mismatch, and
#: the test fails the day it matches, so the entry is removed then.
KNOWN: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_dispatches_match_the_oracle(redis_server: RedisServer, scenario: str) -> None:
    """A scenario is one test, its cases checked together: with a test per case, xdist
    split a scenario's cases between its workers and each simulated the scenario again
    (up to 19 s of CPU each)."""
    found, _ = simulate(SCENARIOS[scenario], redis_server.url)
    problems = []
    for outcome in found:
        known = KNOWN.get((scenario, outcome.case))
        if known and not outcome.mismatches:
            problems.append(f"{outcome.case}: matches the oracle now; remove it from KNOWN "
                            f"({known})")
        elif outcome.mismatches and not known:
            shown = "\n  ".join(outcome.mismatches[:20])
            problems.append(f"{outcome.case}: {len(outcome.mismatches)} mismatch(es) over "
                            f"{outcome.compared} compared:\n  {shown}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
@pytest.mark.parametrize("cron", [
    Cron(minute="*/20", hour="1-3"), Cron(minute=59, hour=23, day_of_month="28-31"),
    Cron(minute=30, hour=2, day_of_month=29, month_of_year=2),
    Cron(minute="5,35", hour="0-4", day_of_week="sun"), Cron(minute=0, day_of_month=31),
    Cron(minute=15, hour=9, day_of_week="mon-fri"),
], ids=str)
def test_oracle_crontab_walk_agrees_with_celerys_own_arithmetic(cron: Cron, zone: str) -> None:
    """Where no daylight saving is involved the rules coincide with Celery's: the
    oracle's walk of wall days gives exactly the runs Celery's crontab steps through."""
    app = Celery("oracle-check", set_as_current=False)
    app.conf.timezone = zone
    start = datetime(2028, 1, 1, tzinfo=timezone.utc)
    end = start + timedelta(days=100)
    now = [start]
    schedule = celery_schedules.crontab(cron.minute, cron.hour, cron.day_of_week,
                                        cron.day_of_month, cron.month_of_year, app=app,
                                        nowfun=lambda: now[0])
    celery_runs = []
    while True:
        following = now[0] + schedule.remaining_estimate(now[0])
        if following > end:
            break
        celery_runs.append(following)
        now[0] = following
    assert cron_runs(cron, Zone(zone, start, end), start, end) == celery_runs


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
@pytest.mark.parametrize("seconds", [7, 90, 3600, 5400, 86400])
def test_oracle_relative_chain_agrees_with_celerys_own_rounding(seconds: int, zone: str) -> None:
    """Where no daylight saving is involved, the oracle's ``relative=True`` chain is
    Celery's own: each run rounded by ``remaining`` from the last run in the app's zone."""
    app = Celery("oracle-check", set_as_current=False)
    app.conf.timezone = zone
    start = datetime(2028, 3, 20, 0, 0, 7, tzinfo=timezone.utc)
    # about 3,000 runs of the sub-minute chain (rounded to the second), a day of the
    # sub-hour one (to the minute), twelve days of the others
    end = start + (timedelta(hours=6) if seconds < 60 else
                   timedelta(days=1 if seconds < 3600 else 12))
    now = [start.astimezone(app.timezone)]
    every = timedelta(seconds=seconds)
    schedule = celery_schedules.schedule(every, relative=True, app=app, nowfun=lambda: now[0])
    celery_runs = []
    while True:
        following = now[0] + schedule.remaining_estimate(now[0])
        if following > end:
            break
        celery_runs.append(following.astimezone(timezone.utc))
        now[0] = following
    assert relative_interval_runs(start, every, end, Zone(zone, start, end)) == celery_runs

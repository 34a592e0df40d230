"""A randomised property test around daylight-saving transitions: rules x zones x
transitions, each checked against the oracle (tests/sim/oracle.py).

For each random rule (a crontab or an rrule, with minute grids that are not
hour-periodic and hours around the transition), a random zone and one of its
transitions (spring forward or fall back, 30 minutes to 2 hours, at midnight or not),
the oracle lists the rule's runs over the hours around the transition; the package
must give exactly those runs:

- its walk of the runs (``slots_between``, what a catch-up with ``coalesce: false``
  sends);
- ``next_after`` and ``first_due`` from random moments (inside gaps and repeated hours
  too), what every tick and save ask;
- ``latest_slot`` between two random runs and moments, what a coalesced catch-up
  after a downtime across the transition sends;
- ``count_slots``, the misfires record of a catch-up.

The fast run is in the suite (tests/test_sim_transitions.py, a fixed seed, a few
seconds); ``python -m tests.sim.transitions --rules 10000`` is the long profile.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

from redbeat.nexttime import count_slots, first_due, latest_slot, next_after, slots_between
from redbeat.schedules import crontab, rrule

from .oracle import Cron, Zone, cron_runs, rrule_runs

UTC = timezone.utc

#: Zones with transitions of every shape: whole hours (London, New York), at midnight
#: (Santiago, Havana, Beirut), 30 minutes (Lord Howe), two hours (Troll), Casablanca's
#: Ramadan shifts, a 45-minute offset (Chatham), a negative "summer" time (Dublin's
#: winter is the DST of its zone data) and a half-hour offset (St John's, Adelaide).
ZONES = (
    "Europe/London", "America/New_York", "America/Santiago", "America/Havana",
    "Asia/Beirut", "Australia/Lord_Howe", "Antarctica/Troll", "Africa/Casablanca",
    "Pacific/Chatham", "Europe/Dublin", "America/St_Johns", "Australia/Adelaide",
)
YEARS = (2027, 2028)
#: The hours around a transition each rule is checked over (a fine rrule: less).
AROUND = timedelta(hours=9)
AROUND_SECONDLY = timedelta(minutes=50)


#: How long before the transition an rrule's dtstart may be (the oracle iterates from it).
LEAD = timedelta(days=20)


@cache
def zone_around(name: str, transition: datetime) -> Zone:
    """The oracle's zone from an rrule's earliest dtstart to a day after the checks."""
    return Zone(name, transition - LEAD - timedelta(days=1), transition + timedelta(days=1))


def transitions(name: str) -> list[datetime]:
    """Where ``name``'s UTC offset changes in YEARS, to the hour (where to look; the
    oracle's own :class:`Zone` finds each to the second): a day at a time, then hour by
    hour through a day that ends on another offset (no zone changes twice in a day)."""
    tz, found = ZoneInfo(name), []
    day = datetime(YEARS[0], 1, 1, tzinfo=UTC)
    offset = day.astimezone(tz).utcoffset()
    while day.year <= YEARS[-1]:
        following = day + timedelta(days=1)
        if following.astimezone(tz).utcoffset() != offset:
            for hours in range(1, 25):
                hour = day + timedelta(hours=hours)
                if (now := hour.astimezone(tz).utcoffset()) != offset:
                    offset = now
                    found.append(hour)
        day = following
    return found


@dataclass
class Rule:
    """One random rule: the package's schedule and the oracle's runs of it."""

    text: str
    schedule: Any
    zone: str
    fine: bool  # secondly: checked over fewer hours

    def oracle_runs(self, zone: Zone, after: datetime, end: datetime) -> list[datetime]:
        raise NotImplementedError


@dataclass
class CronRule(Rule):
    cron: Cron = Cron()

    def oracle_runs(self, zone: Zone, after: datetime, end: datetime) -> list[datetime]:
        return cron_runs(self.cron, zone, after, end)


@dataclass
class RRuleRule(Rule):
    freq: str = "DAILY"
    dtstart: datetime = datetime(2027, 1, 1)
    parts: dict[str, Any] | None = None

    def oracle_runs(self, zone: Zone, after: datetime, end: datetime) -> list[datetime]:
        return rrule_runs(self.freq, self.dtstart, zone, after, end, **(self.parts or {}))


def _minutes(rng: random.Random) -> str:
    """A minute field: a step that does not divide the hour, a few values, or one."""
    kind = rng.random()
    if kind < 0.4:
        step = rng.choice([7, 11, 13, 25, 35, 40, 45, 50, 17, 23])
        return f"{rng.randint(0, step - 1)}-59/{step}"
    if kind < 0.8:
        return ",".join(str(m) for m in sorted(rng.sample(range(60), rng.randint(1, 5))))
    return str(rng.choice([0, 15, 30, 45, rng.randint(0, 59)]))


def _hours(rng: random.Random, local_hour: int) -> str:
    """An hour field around the transition's local hour, or every hour."""
    kind = rng.random()
    if kind < 0.25:
        return "*"
    if kind < 0.7:
        low = max(0, local_hour - rng.randint(0, 2))
        return f"{low}-{min(23, local_hour + rng.randint(0, 3))}"
    return ",".join(str(h) for h in sorted({local_hour, *rng.sample(range(24), 2)}))


def random_rule(rng: random.Random, zone: str, moment: datetime) -> Rule:
    """A crontab or rrule in ``zone`` whose runs come near ``moment`` (a transition)."""
    tz = ZoneInfo(zone)
    local_hour = moment.astimezone(tz).hour
    if rng.random() < 0.45:
        cron = Cron(minute=_minutes(rng), hour=_hours(rng, local_hour),
                    day_of_week=rng.choice(["*", "*", "*", "sun", "mon-fri", "sat,sun"]))
        return CronRule(f"crontab({cron.minute!r}, {cron.hour!r}, {cron.day_of_week!r}) "
                        f"in {zone}", crontab(cron.minute, cron.hour, cron.day_of_week,
                                              timezone=zone), zone, False, cron)
    freq = rng.choice(["MINUTELY", "MINUTELY", "MINUTELY", "HOURLY", "DAILY", "SECONDLY"])
    local = moment.astimezone(tz).replace(tzinfo=None)
    parts: dict[str, Any] = {}
    # dtstart up to about 2,000 runs before the transition (the oracle iterates from it)
    if freq == "SECONDLY":
        interval = rng.choice([1, 7, 13, 45, 97, 600, 1337])
        back = AROUND_SECONDLY + timedelta(seconds=rng.uniform(0, 2000 * interval))
    elif freq == "MINUTELY":
        interval = rng.choice([1, 7, 11, 13, 25, 35, 40, 45, 50, 59, 61, 90, 150])
        back = timedelta(minutes=rng.uniform(0, 2000 * interval))
        if rng.random() < 0.3:
            parts["byhour"] = sorted({local.hour, (local.hour + 1) % 24,
                                      (local.hour - 1) % 24})
    elif freq == "HOURLY":
        interval = rng.choice([1, 1, 2, 3, 5])
        back = timedelta(hours=rng.uniform(0, 2000 * interval))
        if rng.random() < 0.5:
            parts["byminute"] = sorted(rng.sample(range(60), rng.randint(1, 4)))
    else:
        interval = 1
        back = timedelta(days=rng.uniform(1, 20))
        parts["byhour"] = sorted({local.hour, *rng.sample(range(24), rng.randint(0, 2))})
        parts["byminute"] = sorted(rng.sample(range(60), rng.randint(1, 4)))
    dtstart = local - min(back, LEAD)
    dtstart = dtstart.replace(second=rng.choice([0, 0, rng.randint(0, 59)]), microsecond=0)
    if rng.random() < 0.15:
        parts["count"] = rng.randint(5, 400)
    parts["interval"] = interval
    text = f"rrule({freq}, dtstart={dtstart:%Y-%m-%d %H:%M:%S}, {parts}) in {zone}"
    return RRuleRule(text, rrule(freq, dtstart=dtstart, timezone=zone, **parts), zone,
                     freq == "SECONDLY", freq, dtstart, parts)


@dataclass
class Result:
    rules: int = 0
    runs: int = 0  # oracle runs compared (walks)
    probes: int = 0  # next_after/first_due/latest_slot/count_slots answers compared
    mismatches: list[str] | None = None

    def __post_init__(self) -> None:
        self.mismatches = []


def check(rule: Rule, transition: datetime, rng: random.Random, result: Result) -> None:
    """Every answer of the package for ``rule`` around ``transition`` against the oracle."""
    around = AROUND_SECONDLY if rule.fine else AROUND
    start, end = transition - around, transition + around
    horizon = end + around  # runs known up to here: the next one after any in the span
    zone = zone_around(rule.zone, transition)
    expected = rule.oracle_runs(zone, start - timedelta(seconds=1), horizon)
    stamps = [run.timestamp() for run in expected]
    inside = expected[:bisect_right(stamps, end.timestamp())]
    result.rules += 1
    problems: list[str] = []

    def wrong(what: str, got: object, want: object) -> None:
        problems.append(f"{rule.text}, transition {transition:%Y-%m-%d %H:%MZ}: {what}: "
                        f"got {got}, want {want}")

    def first_from(moment: datetime, inclusive: bool) -> datetime | str:
        i = (bisect_left if inclusive else bisect_right)(stamps, moment.timestamp())
        return expected[i] if i < len(expected) else f"none up to {horizon:%m-%d %H:%MZ}"

    def agrees(got: datetime | None, want: datetime | str) -> bool:
        return got == want or isinstance(want, str) and (got is None or got > horizon)

    if inside:
        walked = list(slots_between(rule.schedule, inside[0], end, limit=100_000))
        result.runs += len(inside)
        if walked != inside:
            missing = sorted(set(inside) - set(walked))[:3]
            extra = sorted(set(walked) - set(inside))[:3]
            wrong("runs", f"{len(walked)} (extra {extra})", f"{len(inside)} (missing {missing})")
    moments = [start + (end - start) * rng.random() for _ in range(12)]
    moments += [transition + around * rng.uniform(-0.3, 0.3) for _ in range(12)]
    moments += [run + timedelta(microseconds=rng.choice([-1, 0, 1]))
                for run in rng.sample(inside, min(6, len(inside)))]
    for moment in moments:
        result.probes += 2
        if not agrees(got := next_after(rule.schedule, moment), want := first_from(moment, False)):
            wrong(f"next_after({moment:%H:%M:%S.%fZ})", got, want)
        if not agrees(got := first_due(rule.schedule, moment), want := first_from(moment, True)):
            wrong(f"first_due({moment:%H:%M:%S.%fZ})", got, want)
    for _ in range(8 if inside else 0):
        due = rng.choice(inside)
        now = due + (end - due) * rng.random() ** 2
        upto = bisect_right(stamps, now.timestamp())
        want_latest = expected[upto - 1]
        want_count = upto - bisect_left(stamps, due.timestamp())
        result.probes += 2
        if (got := latest_slot(rule.schedule, due, now)) != want_latest:
            wrong(f"latest_slot({due:%H:%MZ}, {now:%H:%M:%SZ})", got, want_latest)
        if (got := count_slots(rule.schedule, due, now)) != want_count:
            wrong(f"count_slots({due:%H:%MZ}, {now:%H:%M:%SZ})", got, want_count)
    result.mismatches += problems


def run(rules: int, seed: int) -> Result:
    """``rules`` random rules, each in a random zone around one of its transitions."""
    rng = random.Random(seed)
    result = Result()
    by_zone = {name: transitions(name) for name in ZONES}
    while result.rules < rules:
        zone = rng.choice(ZONES)
        transition = rng.choice(by_zone[zone])
        try:
            rule = random_rule(rng, zone, transition)
        except ValueError:
            continue  # a combination the package refuses when built
        check(rule, transition, rng, result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.transitions",
                                     description=__doc__)
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=2027)
    args = parser.parse_args(argv)
    began = time.monotonic()
    result = run(args.rules, args.seed)
    assert result.mismatches is not None
    print(f"{result.rules} rules (seed {args.seed}) in {len(ZONES)} zones: {result.runs} runs "
          f"walked and {result.probes} answers compared with the oracle, "
          f"{len(result.mismatches)} mismatches, {time.monotonic() - began:.0f} s")
    for line in result.mismatches[:30]:
        print(" ", line)
    return 1 if result.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

"""The scenarios of each profile.

The fast profile (tests/test_simulator.py, in the suite) spans the transitions that
matter in a few simulated weeks each: spring forward in New York and London with Feb 29
(2028), fall back in London and New York (2027), both Lord Howe changes (a 30-minute
shift) and sub-minute intervals; then a day around each of four transitions of issue 24
(New York's gap with beat down across it, Lord Howe's 30-minute and Troll's two-hour
gaps, London's repeated hour with beat down across it). The long profile
(``python -m tests.sim``) runs a year or more per app zone, every zone, ``enable_utc`` on
and off, with more downtimes, every transition scenario, and nine years of sparse
entries (a crontab whose next run is nine years away).
"""

from __future__ import annotations

from datetime import timedelta

from .cases import ZONES, calendar_cases, far_future_cases, seconds_cases, transition_cases
from .driver import Scenario, at, days

UTC_ZONE, LONDON, NEW_YORK, KOLKATA, LORD_HOWE = ZONES
TROLL = "Antarctica/Troll"


def calendar(name: str, zone: str, enable_utc: bool, other: str, start_fields: tuple[int, ...],
             span: float, seed: int, downtimes: int) -> Scenario:
    start = at(*start_fields)
    return Scenario(name, zone, enable_utc, start, days(span),
                    calendar_cases(start, zone, other), seed=seed, downtimes=downtimes)


def seconds(name: str, zone: str, enable_utc: bool, hours: float, seed: int,
            downtimes: int) -> Scenario:
    start = at(2027, 6, 1, 9, 0, 0)
    return Scenario(name, zone, enable_utc, start, timedelta(hours=hours),
                    seconds_cases(start), seed=seed, downtimes=downtimes, longest_downtime=1200,
                    lateness=0.5)


def transition(name: str, zone: str, enable_utc: bool, moment: tuple[int, ...], seed: int,
               down: tuple[float, float] | None = None) -> Scenario:
    """A day around the transition of ``zone`` at ``moment`` (UTC), beat down from
    ``down[0]`` to ``down[1]`` minutes after it (negative: before), else up throughout."""
    instant = at(*moment)
    start = instant - timedelta(hours=12)
    fixed = () if down is None else ((instant + timedelta(minutes=down[0]),
                                      instant + timedelta(minutes=down[1])),)
    return Scenario(name, zone, enable_utc, start, days(1), transition_cases(start, zone),
                    seed=seed, downtimes=0, fixed_downtimes=fixed)


#: Issue 24's transitions: spring forward up (every wall of the shadow of the gap runs)
#: and down across it (the catch-up of each slot), fall back down across the repeated
#: hour (coalesced: one run), in zones that move by an hour, 30 minutes and two hours.
def transition_scenarios(every: bool) -> list[Scenario]:
    chosen = [
        transition("gap-new-york-down", NEW_YORK, True, (2027, 3, 14, 7, 0, 0), 31, (-25, 35)),
        transition("gap-lord-howe", LORD_HOWE, False, (2027, 10, 2, 15, 30, 0), 32),
        transition("gap-troll", TROLL, True, (2027, 3, 28, 1, 0, 0), 33),
        transition("fold-london-down", LONDON, True, (2027, 10, 31, 1, 0, 0), 34, (-50, 40)),
    ]
    if every:
        chosen += [
            transition("gap-london", LONDON, False, (2027, 3, 28, 1, 0, 0), 35),
            transition("gap-new-york", NEW_YORK, False, (2027, 3, 14, 7, 0, 0), 36),
            transition("gap-troll-down", TROLL, False, (2027, 3, 28, 1, 0, 0), 37, (-30, 100)),
            transition("gap-lord-howe-down", LORD_HOWE, True, (2027, 10, 2, 15, 30, 0), 38,
                       (-20, 50)),
            transition("fold-troll-down", TROLL, True, (2027, 10, 31, 1, 0, 0), 39, (-40, 70)),
            transition("fold-lord-howe-down", LORD_HOWE, False, (2027, 4, 3, 15, 0, 0), 40,
                       (-40, 50)),
            transition("fold-new-york", NEW_YORK, True, (2027, 11, 7, 6, 0, 0), 41),
        ]
    return chosen


def far_future(enable_utc: bool) -> Scenario:
    """Nine years from 2027-06-01 in New York with sparse entries: Feb 29 on a Friday
    (2036) among them. Without Celery's daily ``celery.backend_cleanup`` (no result
    expiry), beat ticks a few dozen times in nine years."""
    start = at(2027, 6, 1, 0, 0, 0)
    return Scenario(f"far-future-utc-{'on' if enable_utc else 'off'}", NEW_YORK, enable_utc,
                    start, days(9 * 365 + 10), far_future_cases(start, LONDON), seed=42,
                    downtimes=3, conf={"result_expires": None})


def fast_profile() -> list[Scenario]:
    return [
        # each from a few days before its first event to two or three after its last
        # (Feb 29 and the March month-ends, New York's and London's spring forward;
        # London's and New York's fall back; Lord Howe's and Kolkata's other zone's)
        calendar("spring-new-york", NEW_YORK, True, LONDON, (2028, 2, 24, 0, 0, 7), 33, 11, 3),
        calendar("autumn-london", LONDON, False, NEW_YORK, (2027, 10, 22, 3, 0, 0), 18, 12, 2),
        calendar("lord-howe", LORD_HOWE, True, KOLKATA, (2027, 9, 27, 12, 0, 0), 16, 13, 2),
        calendar("kolkata", KOLKATA, False, LORD_HOWE, (2028, 3, 25, 0, 30, 0), 12, 14, 2),
        seconds("seconds-utc", UTC_ZONE, True, 0.75, 15, 3),
        seconds("seconds-kolkata", KOLKATA, False, 0.5, 16, 2),
        *transition_scenarios(every=False),
    ]


def long_profile(years: float = 1.0) -> list[Scenario]:
    """Every zone as the app zone with ``enable_utc`` on and off, each with its zoned
    entries in another zone, ``years`` from 2027-06-01 (Feb 29, 2028 included), after
    six hours of sub-minute intervals per zone."""
    scenarios = []
    for number, zone in enumerate(ZONES):
        enable_utc = number % 2 == 1
        scenarios.append(seconds(f"seconds-{slug(zone)}-utc-{'on' if enable_utc else 'off'}",
                                 zone, enable_utc, 6.0, 200 + number, 8))
    for number, zone in enumerate(ZONES):
        for flag, enable_utc in enumerate((True, False)):
            other = ZONES[(number + 1 + flag) % len(ZONES)]
            scenarios.append(calendar(
                f"year-{slug(zone)}-utc-{'on' if enable_utc else 'off'}", zone, enable_utc,
                other, (2027, 6, 1, 0, 0, 0), 365 * years, 100 + 2 * number + flag,
                max(1, round(14 * years)),
            ))
    scenarios += transition_scenarios(every=True)
    scenarios += [far_future(enable_utc=True), far_future(enable_utc=False)]
    return scenarios


def slug(zone: str) -> str:
    return zone.replace("/", "-").lower()

"""The scenarios of each profile.

The fast profile (tests/test_simulator.py, in the suite) spans the transitions that
matter in a few simulated weeks each: spring forward in New York and London with Feb 29
(2028), fall back in London and New York (2027), both Lord Howe changes (a 30-minute
shift) and sub-minute intervals. The long profile (``python -m tests.sim``) runs a year or
more per app zone, every zone, ``enable_utc`` on and off, with more downtimes.
"""

from __future__ import annotations

from datetime import timedelta

from .cases import ZONES, calendar_cases, seconds_cases
from .driver import Scenario, at, days

UTC_ZONE, LONDON, NEW_YORK, KOLKATA, LORD_HOWE = ZONES


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


def fast_profile() -> list[Scenario]:
    return [
        calendar("spring-new-york", NEW_YORK, True, LONDON, (2028, 2, 20, 0, 0, 7), 40, 11, 3),
        calendar("autumn-london", LONDON, False, NEW_YORK, (2027, 10, 20, 3, 0, 0), 20, 12, 2),
        calendar("lord-howe", LORD_HOWE, True, KOLKATA, (2027, 9, 25, 12, 0, 0), 20, 13, 2),
        calendar("kolkata", KOLKATA, False, LORD_HOWE, (2028, 3, 25, 0, 30, 0), 15, 14, 2),
        seconds("seconds-utc", UTC_ZONE, True, 0.75, 15, 3),
        seconds("seconds-kolkata", KOLKATA, False, 0.5, 16, 2),
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
    return scenarios


def slug(zone: str) -> str:
    return zone.replace("/", "-").lower()

"""The scenarios of each profile.

The fast profile (tests/test_simulator.py, in the suite) spans the transitions that
matter in nine days to a month of simulated time each: spring forward in New York and
London with Feb 29 (2028), fall back in London and New York (2027), both Lord Howe
changes (a 30-minute shift) and sub-minute intervals. Beat is up only in windows around
what matters (the first day, each transition with the local day it falls in, Feb 29 and
the month ends, each monthly, yearly and one-off run, a window opening and closing), a
fifth to a third of each span, and down in between: each window begins with a restarted
beat's catch-up of days. Then 16 hours around each of four transitions of issue 24 (New
York's gap with beat down across it, Lord Howe's 30-minute and Troll's two-hour gaps,
London's repeated hour with beat down across it). The long profile
(``python -m tests.sim``) runs a year or more per app zone, every zone, ``enable_utc`` on
and off, with more downtimes, every transition scenario, and nine years of sparse
entries (a crontab whose next run is nine years away).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from .cases import ZONES, calendar_cases, far_future_cases, seconds_cases, transition_cases
from .driver import Scenario, at, days

UTC_ZONE, LONDON, NEW_YORK, KOLKATA, LORD_HOWE = ZONES
TROLL = "Antarctica/Troll"


def calendar(name: str, zone: str, enable_utc: bool, other: str, start_fields: tuple[int, ...],
             span: float, seed: int, downtimes: int, up: tuple[str, ...] = ()) -> Scenario:
    """``span`` days from the start; or, with ``up``, beat up only in those windows (each
    "MM-DD HH:MM - MM-DD HH:MM", UTC, in the start's year: the first from the start, the
    last to the end of the span)."""
    start = at(*start_fields)

    def moment(text: str) -> datetime:
        return datetime.fromisoformat(f"{start.year}-{text}+00:00")

    windows = tuple((moment(text.split(" - ")[0]), moment(text.split(" - ")[1]))
                    for text in up)
    return Scenario(name, zone, enable_utc, start,
                    windows[-1][1] - start if windows else days(span),
                    calendar_cases(start, zone, other), seed=seed, downtimes=downtimes,
                    windows=windows)


def seconds(name: str, zone: str, enable_utc: bool, hours: float, seed: int,
            downtimes: int) -> Scenario:
    start = at(2027, 6, 1, 9, 0, 0)
    return Scenario(name, zone, enable_utc, start, timedelta(hours=hours),
                    seconds_cases(start), seed=seed, downtimes=downtimes, longest_downtime=1200,
                    lateness=0.5)


def transition(name: str, zone: str, enable_utc: bool, moment: tuple[int, ...], seed: int,
               down: tuple[float, float] | None = None, hours: float = 12) -> Scenario:
    """``hours`` either side of the transition of ``zone`` at ``moment`` (UTC), beat down
    from ``down[0]`` to ``down[1]`` minutes after it (negative: before), else up
    throughout. Eight hours is enough: the one-offs run three to seven hours after the
    start, and the local hours 0-5 the cases' hour fields name end at most five hours
    after a transition."""
    instant = at(*moment)
    start = instant - timedelta(hours=hours)
    fixed = () if down is None else ((instant + timedelta(minutes=down[0]),
                                      instant + timedelta(minutes=down[1])),)
    return Scenario(name, zone, enable_utc, start, timedelta(hours=2 * hours),
                    transition_cases(start, zone),
                    seed=seed, downtimes=0, fixed_downtimes=fixed)


#: Issue 24's transitions: spring forward up (every wall of the shadow of the gap runs)
#: and down across it (the catch-up of each slot), fall back down across the repeated
#: hour (coalesced: one run), in zones that move by an hour, 30 minutes and two hours.
def transition_scenarios(every: bool) -> list[Scenario]:
    """The first four (the fast profile's) over 16 hours, the rest (and the first four in
    the long profile) over a day."""
    hours = 12 if every else 8
    chosen = [
        transition("gap-new-york-down", NEW_YORK, True, (2027, 3, 14, 7, 0, 0), 31, (-25, 35),
                   hours),
        transition("gap-lord-howe", LORD_HOWE, False, (2027, 10, 2, 15, 30, 0), 32,
                   hours=hours),
        transition("gap-troll", TROLL, True, (2027, 3, 28, 1, 0, 0), 33, hours=hours),
        transition("fold-london-down", LONDON, True, (2027, 10, 31, 1, 0, 0), 34, (-50, 40),
                   hours),
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
        # each from a few days before its first event to a day after its last (Feb 29,
        # New York's and London's spring forward; London's and New York's fall back with
        # the October month ends; Lord Howe's and Kolkata's other zone's), up in the
        # windows listed (UTC): 6, 4, 3 and 3.5 days of ticks instead of 33, 18, 16, 12
        calendar("spring-new-york", NEW_YORK, True, LONDON, (2028, 2, 24, 0, 0, 7), 0, 11, 3, (
            "02-24 00:00:07 - 02-25 02:00",  # the first day
            "02-25 16:30 - 02-25 17:30",  # the last Friday of February (London)
            "02-26 23:30 - 02-27 10:00",  # window-cron opens; the yearly; a Sunday's list
            "02-28 20:00 - 03-01 08:00",  # Feb 29 in New York; month ends
            "03-03 23:45 - 03-04 00:45",  # clocked
            "03-06 07:30 - 03-06 08:30",  # the first Monday of March (London)
            "03-07 01:30 - 03-07 02:30",  # rrule-count's last
            "03-11 20:00 - 03-13 08:00",  # New York springs forward; clocked-grace
            "03-20 06:30 - 03-20 07:30",  # window-cron closes
            "03-25 20:00 - 03-27 06:00",  # London springs forward
        )),
        calendar("autumn-london", LONDON, False, NEW_YORK, (2027, 10, 22, 3, 0, 0), 0, 12, 2, (
            "10-22 03:00 - 10-23 05:00",  # the first day
            "10-24 09:30 - 10-24 10:30",  # the yearly (New York)
            "10-25 02:30 - 10-25 03:30",  # window-cron opens
            "10-29 20:30 - 10-29 21:30",  # the last Friday of October (New York)
            "10-30 20:00 - 11-01 04:00",  # London falls back; month ends; clocked
            "11-01 09:00 - 11-01 12:30",  # the first weekday after; the first Monday
            "11-02 05:30 - 11-02 08:30",  # rrule-count's last; rrule-until
            "11-06 22:00 - 11-08 08:00",  # New York falls back; clocked-grace
        )),
        calendar("lord-howe", LORD_HOWE, True, KOLKATA, (2027, 9, 27, 12, 0, 0), 0, 13, 2, (
            "09-27 12:00 - 09-28 14:00",  # the first day; a month end
            "09-30 00:00 - 09-30 01:00",  # the yearly (Kolkata)
            "09-30 11:30 - 09-30 18:00",  # window-cron opens; month ends
            "10-02 06:00 - 10-03 23:00",  # Lord Howe springs forward 30 minutes
            "10-04 02:00 - 10-04 03:00",  # the first Monday of October (Kolkata)
            "10-04 22:00 - 10-04 23:00",  # rrule-until
            "10-06 12:00 - 10-06 13:00",  # clocked
        )),
        calendar("kolkata", KOLKATA, False, LORD_HOWE, (2028, 3, 25, 0, 30, 0), 0, 14, 2, (
            "03-25 00:30 - 03-26 02:00",  # the first day
            "03-27 16:30 - 03-27 19:30",  # rrule-until; the yearly (Lord Howe)
            "03-28 00:00 - 03-28 01:00",  # window-cron opens
            "03-31 05:30 - 03-31 19:00",  # the last Friday (Lord Howe); month ends
            "04-01 06:00 - 04-02 22:00",  # Lord Howe falls back 30 minutes; first Monday
            "04-03 00:15 - 04-03 01:15",  # clocked
            "04-03 17:00 - 04-03 18:00",  # rrule-until after the change
        )),
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

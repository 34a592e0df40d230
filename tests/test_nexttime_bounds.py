"""Bounded next-run computation (issue 11): an rrule's age costs nothing, a rule that
cannot produce a run raises instead of hanging, degenerate intervals are refused.

Old rules are checked by arithmetic (their runs are a grid from dtstart); rules young
enough for dateutil to walk from their start are checked against dateutil's own answer,
which is what the resumed computation must reproduce exactly.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from itertools import islice, takewhile

import pytest
from celery.schedules import schedule
from dateutil.rrule import FR, MO, SA, SU, WE
from dateutil.rrule import rrule as dateutil_rrule

from conftest import make_app
from redbeat import RedBeatSchedulerEntry, decoder
from redbeat.nexttime import (
    MAX_RRULE_MONTHS,
    ScheduleBoundError,
    count_slots,
    first_due,
    latest_slot,
    next_after,
    slots_between,
)
from redbeat.schedulers import get_redis
from redbeat.schedules import MAX_RRULE_STEPS, MIN_INTERVAL, rrule
from support.recording import T0, Clock, at, leader

UTC = timezone.utc
NOW = datetime(2026, 6, 1, 12, 0, 7, 250000, tzinfo=UTC)
WHOLE = NOW.replace(microsecond=0)  # dateutil drops a dtstart's microseconds
SECOND, MINUTE, HOUR, DAY = (timedelta(seconds=1), timedelta(minutes=1), timedelta(hours=1),
                             timedelta(days=1))


def grid_after(start: datetime, step: timedelta, moment: datetime,
               inclusive: bool = False) -> datetime:
    """The first point of ``start + n * step`` after (or at) ``moment``."""
    point = start + (moment - start) // step * step
    return point if point > moment or inclusive and point == moment else point + step


# -- old rules, by arithmetic ---------------------------------------------------------

YEAR_1 = datetime(1, 1, 1, tzinfo=UTC)
OLD = {  # label: (schedule, its first run, the step between runs)
    "year 1, SECONDLY": (rrule("SECONDLY", dtstart=YEAR_1), YEAR_1, SECOND),
    "120 days, SECONDLY/10": (
        rrule("SECONDLY", interval=10, dtstart=WHOLE - 120 * DAY - 3 * SECOND),
        WHOLE - 120 * DAY - 3 * SECOND, 10 * SECOND),
    "1 year, MINUTELY": (rrule("MINUTELY", dtstart=WHOLE - 365 * DAY - 17 * SECOND),
                         WHOLE - 365 * DAY - 17 * SECOND, MINUTE),
    "100 years, HOURLY/7, count 10^9": (
        rrule("HOURLY", interval=7, count=10**9, dtstart=datetime(1926, 3, 4, 5, 6, 7)),
        datetime(1926, 3, 4, 5, 6, 7, tzinfo=UTC), 7 * HOUR),
    "1000 years, DAILY/3": (rrule("DAILY", interval=3, dtstart=datetime(1026, 1, 1, 9, 30)),
                            datetime(1026, 1, 1, 9, 30, tzinfo=UTC), 3 * DAY),
    "year 1, WEEKLY/2 (wkst SU)": (rrule("WEEKLY", interval=2, wkst=SU, dtstart=YEAR_1),
                                   YEAR_1, 14 * DAY),
}
MOMENTS = {"now": NOW, "a whole second": NOW.replace(microsecond=0),
           "just before": NOW - timedelta(microseconds=1)}


@pytest.mark.parametrize("moment", MOMENTS.values(), ids=MOMENTS.keys())
@pytest.mark.parametrize("label", OLD)
def test_old_rules_resume_near_the_moment(label, moment):
    schedule_, start, step = OLD[label]
    moment = max(moment, start)  # runs on a grid: land on one too
    expected = grid_after(start, step, moment)
    assert next_after(schedule_, moment) == expected
    assert first_due(schedule_, moment) == grid_after(start, step, moment, inclusive=True)
    latest = grid_after(start, step, moment, inclusive=True)
    latest = latest if latest == moment else latest - step
    assert latest_slot(schedule_, moment - 300 * DAY, moment) == latest
    assert list(slots_between(schedule_, expected, expected + 10 * step)) == [
        expected + n * step for n in range(11)]


@pytest.mark.parametrize("label", OLD)
def test_grid_moments_are_exclusive_after_and_inclusive_first(label):
    schedule_, start, step = OLD[label]
    run = grid_after(start, step, NOW)
    assert next_after(schedule_, run) == run + step
    assert first_due(schedule_, run) == run


def test_count_is_honoured_however_old_the_rule():
    hundred = rrule("SECONDLY", count=100, dtstart=YEAR_1)
    assert first_due(hundred, YEAR_1 + 50 * SECOND) == YEAR_1 + 50 * SECOND
    assert next_after(hundred, YEAR_1 + 98 * SECOND) == YEAR_1 + 99 * SECOND  # the 100th
    assert next_after(hundred, YEAR_1 + 99 * SECOND) is None
    assert next_after(hundred, NOW) is None and first_due(hundred, NOW) is None
    assert latest_slot(hundred, YEAR_1, NOW) == YEAR_1 + 99 * SECOND


@pytest.mark.parametrize("moment", [datetime(2026, 6, 1, 12, tzinfo=UTC),
                                    datetime(2026, 11, 4, 9, tzinfo=UTC),
                                    datetime(2026, 11, 4, 17, tzinfo=UTC),
                                    datetime(2027, 1, 1, tzinfo=UTC)])
def test_count_with_by_parts_counts_the_runs_before(moment):
    """Twice a day from 2020, 5000 runs: the last on 2026-11-04 at 17:00."""
    twice = rrule("DAILY", byhour=[9, 17], byminute=[0], bysecond=[0], count=5000,
                  dtstart=datetime(2020, 1, 1))
    reference = twice.rrule  # dateutil's own object, walked from dtstart
    assert next_after(twice, moment) == reference.after(moment)
    assert first_due(twice, moment) == reference.after(moment, inc=True)
    assert latest_slot(twice, moment - 400 * DAY, moment) == reference.before(moment, inc=True)
    assert next_after(twice, moment) == next_after(twice, moment)  # from the kept position


def test_counted_positions_kept_between_computations_stay_exact():
    """A count walk leaves positions behind (every 1024 runs, at the first run of a
    period); later computations start from them, so the end of the count must stay
    exactly dateutil's whichever position they start from."""
    count = 6000  # five positions kept every 1024 runs, and one by each computation below
    rule = rrule("HOURLY", byhour=list(range(9, 18)), byminute=[0, 20, 40],  # 3 an hour
                 byweekday=[0, 1, 2, 3, 4], count=count, dtstart=datetime(2026, 1, 1))
    reference = [run.astimezone(UTC) for run in rule.rrule]
    assert len(reference) == count
    assert next_after(rule, reference[-1]) is None  # walks the whole count once
    samples = random.Random(5).sample(range(count), 40)
    for n in [*range(count - 1, count - 100, -3), *samples, 0]:
        moment = reference[n] - SECOND
        assert next_after(rule, moment) == reference[n], n
        assert latest_slot(rule, reference[0], moment) == reference[max(n - 1, 0)], n
        assert latest_slot(rule, reference[0], reference[n]) == reference[n], n
        assert list(slots_between(rule, reference[n], reference[-1], limit=20_000)) == (
            reference[n:]), n  # counted to the very last run from where n's period starts


# -- young rules, against dateutil ----------------------------------------------------

def _cases() -> dict[str, rrule]:
    wednesday = datetime(2026, 1, 7, 10, 0)
    return {
        "weekly bysetpos, partial first week": rrule(
            "WEEKLY", dtstart=wednesday, byweekday=[MO, WE, FR], bysetpos=1),
        "weekly/2 wkst SU": rrule("WEEKLY", interval=2, wkst=SU, dtstart=wednesday,
                                  byweekday=[SU, SA]),
        "monthly on the 31st": rrule("MONTHLY", dtstart=datetime(2026, 1, 31, 8)),
        "yearly on Feb 29": rrule("YEARLY", dtstart=datetime(2024, 2, 29, 6)),
        "monthly MO(+1) FR(-1)": rrule("MONTHLY", byweekday=[MO(+1), FR(-1)],
                                       dtstart=datetime(2026, 1, 5, 9)),
        "hourly/5 byhour": rrule("HOURLY", interval=5, byhour=[1, 6, 11],
                                 dtstart=datetime(2026, 1, 1, 1, 15, 30)),
        "minutely/7 weekdays 9-10h": rrule("MINUTELY", interval=7, byhour=[9, 10],
                                           byweekday=[0, 1, 2, 3, 4],
                                           dtstart=datetime(2026, 1, 2, 9, 3, 4)),
        "secondly/13 byminute": rrule("SECONDLY", interval=13, byminute=[0, 1],
                                      dtstart=datetime(2026, 1, 1, 0, 0, 5)),
        "daily 02:30 New York (gap)": rrule("DAILY", dtstart=datetime(2026, 3, 1, 2, 30),
                                            timezone="America/New_York"),
        "hourly London (fall back)": rrule("HOURLY", dtstart=datetime(2026, 10, 24, 0, 30),
                                           timezone="Europe/London"),
        "hourly/3 Lord Howe": rrule("HOURLY", interval=3, dtstart=datetime(2026, 3, 30, 1, 15),
                                    timezone="Australia/Lord_Howe"),
        "daily twice, count 40": rrule("DAILY", byhour=[9, 17], count=40,
                                       dtstart=datetime(2026, 1, 1, 12)),
        "minutely/17 count 500 by hour": rrule("MINUTELY", interval=17, count=500,
                                               byhour=[0, 5, 13], dtstart=datetime(2026, 1, 1)),
        "daily until": rrule("DAILY", dtstart=datetime(2026, 1, 1, 7),
                             until=datetime(2026, 2, 10, 7)),
        "yearly week 1 and 53 Mondays": rrule("YEARLY", byweekno=[1, 53], byweekday=[MO],
                                              dtstart=datetime(2015, 1, 1, 9)),
        "yearly Easter and Easter Monday": rrule("YEARLY", byeaster=[0, 1],
                                                 dtstart=datetime(2020, 1, 1, 10)),
        "monthly last day, second-to-last position": rrule(
            "MONTHLY", bymonthday=[-1, -2], bysetpos=-2, dtstart=datetime(2026, 1, 1, 23)),
        "dtstart with microseconds": rrule("MINUTELY", interval=3,
                                           dtstart=datetime(2026, 1, 1, 0, 0, 1, 654321)),
        "weekly/3 Paris": rrule("WEEKLY", interval=3, dtstart=datetime(2026, 1, 1, 9, 30),
                                timezone="Europe/Paris"),
        # hourly and finer with day parts: resumed without them, days checked apart
        "secondly/7 at 23h on Mondays": rrule("SECONDLY", interval=7, byhour=[23],
                                              byweekday=[MO], dtstart=datetime(2026, 1, 1, 5)),
        "minutely/5 9-17h weekdays in Jan and Jul, London": rrule(
            "MINUTELY", interval=5, byhour=list(range(9, 18)), byweekday=[0, 1, 2, 3, 4],
            bymonth=[1, 7], dtstart=datetime(2026, 1, 30, 8, 2), timezone="Europe/London"),
        "hourly/2 straddling midnight, three months": rrule(
            "HOURLY", interval=2, byhour=[3, 18, 23], bymonth=[2, 3, 12],
            dtstart=datetime(2024, 3, 24, 1, 59, 59)),
        "secondly on the 1st, count 9000": rrule("SECONDLY", interval=3, bymonthday=[1],
                                                 byminute=[0, 1], count=9000,
                                                 dtstart=datetime(2026, 1, 1)),
    }


CASES = _cases()


def _reference(schedule_: rrule) -> dateutil_rrule:
    """dateutil's rule for ``schedule_``, built from the arguments ``schedule_.rrule`` is
    built from, with dateutil's cache: ``after``, ``before`` and ``xafter`` still walk it
    from dtstart, but over the runs it generated for an earlier question (one walk per
    rule in place of four per moment: a secondly rule with BYHOUR costs dateutil a step
    per second of each day it skips)."""
    return dateutil_rrule(schedule_.freq, dtstart=schedule_.dtstart, interval=schedule_.interval,
                          until=schedule_.until, cache=True,
                          **{name: value for name, value in schedule_.rules.items()
                             if value is not None})


def _moments(schedule_: rrule, reference: dateutil_rrule) -> list[datetime]:
    """Around the first runs and well into the rule: on runs, just before and after."""
    runs = [run.astimezone(UTC) for run in islice(reference, 0, 150, 17)]
    start = schedule_.dtstart.astimezone(UTC)
    tiny = timedelta(microseconds=1)
    return [start - DAY, start - tiny, start, *runs, *(run - tiny for run in runs),
            *(run + tiny for run in runs), runs[-1] + 13 * DAY + 7 * SECOND]


def as_utc(moment: datetime | None) -> datetime | None:
    """dateutil's answer in UTC: a wall time inside a gap never equals another zone's
    datetime (PEP 495), even at the same instant."""
    return None if moment is None else moment.astimezone(UTC)


def _reference_latest(schedule_: rrule, reference: dateutil_rrule, due: datetime,
                      now: datetime) -> datetime:
    latest = as_utc(reference.before(now.astimezone(schedule_.zone), inc=True))
    return due if latest is None or latest < due else latest


def _check_against_dateutil(schedule_: rrule, moment: datetime,
                            reference: dateutil_rrule) -> None:
    local = moment.astimezone(schedule_.zone)
    first = reference.after(local, inc=True)
    assert next_after(schedule_, moment) == as_utc(reference.after(local))
    assert first_due(schedule_, moment) == as_utc(first)
    due = schedule_.dtstart.astimezone(UTC)
    assert latest_slot(schedule_, due, moment) == _reference_latest(
        schedule_, reference, due, moment)
    if first is not None:
        runs = [as_utc(run) for run in reference.xafter(first, count=25, inc=True)]
        last = runs[len(runs) // 2]
        expected = list(takewhile(lambda run: run <= last, runs))  # by instant, as documented
        assert list(slots_between(schedule_, first, last, limit=25)) == expected


@pytest.mark.parametrize("label", CASES)
def test_resumed_rules_give_dateutils_answers(label):
    schedule_ = CASES[label]
    reference = _reference(schedule_)
    for moment in _moments(schedule_, reference):
        _check_against_dateutil(schedule_, moment, reference)


def _random_rule(rnd: random.Random) -> rrule:
    freq = rnd.choice(["YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY",
                       "SECONDLY"])
    parts: dict = {}
    # (dateutil itself steps through every second of a skipped day when a secondly rule
    # has BYHOUR: seconds per reference answer. The table above has such rules.)
    hour_chance = 0.0 if freq == "SECONDLY" else 0.3
    for name, values, chance in (("byhour", range(24), hour_chance),
                                 ("byminute", range(60), 0.3),
                                 ("bysecond", range(60), 0.2), ("byweekday", range(7), 0.3),
                                 ("bymonth", range(1, 13), 0.15)):
        if rnd.random() < chance:
            parts[name] = sorted(rnd.sample(values, rnd.randint(1, 3)))
    if rnd.random() < 0.2:
        parts["bymonthday"] = rnd.choice([[1], [15], [-1], [31], [29, 30]])
    if rnd.random() < 0.1:
        parts["bysetpos"] = rnd.choice([1, -1, 2])
    if rnd.random() < 0.2:
        parts["count"] = rnd.randint(1, 60)
    if rnd.random() < 0.2:
        parts["wkst"] = rnd.randint(0, 6)
    dtstart = datetime(2024, 1, 1) + timedelta(days=rnd.uniform(0, 400))
    return rrule(freq, dtstart=dtstart.replace(microsecond=rnd.choice([0, 0, 123456])),
                 interval=rnd.choice([1, 1, 2, 3, 7, 13]),
                 timezone=rnd.choice([None, "Europe/London", "America/New_York",
                                      "Australia/Lord_Howe"]), **parts)


SPAN = {0: 3000 * DAY, 1: 800 * DAY, 2: 200 * DAY, 3: 60 * DAY, 4: 5 * DAY, 5: 5 * HOUR,
        6: 7 * MINUTE}  # by frequency: a few hundred periods, for dateutil to walk


@pytest.mark.parametrize("seed", range(4))
def test_random_rules_give_dateutils_answers(seed):
    rnd, compared = random.Random(seed), 0
    while compared < 300:
        try:
            schedule_ = _random_rule(rnd)
        except ValueError:
            continue  # a combination dateutil (or the bounds) refuse
        reference = _reference(schedule_)
        for _ in range(3):
            moment = (schedule_.dtstart + rnd.uniform(-0.01, 1) * SPAN[schedule_.freq])
            try:
                next_after(schedule_, moment)
            except ScheduleBoundError:
                break  # matches no day: dateutil would scan to year 9999 to say None
            _check_against_dateutil(schedule_, moment.astimezone(UTC), reference)
            compared += 1


# -- the bounds -----------------------------------------------------------------------

@pytest.mark.parametrize("freq", ["SECONDLY", "HOURLY", "DAILY", "WEEKLY", "MONTHLY"])
def test_a_rule_matching_no_day_raises_instead_of_scanning_to_year_9999(freq):
    never = rrule(freq, bymonth=2, bymonthday=30, dtstart=datetime(2026, 1, 1))
    message = f"rrule: no run found within {MAX_RRULE_MONTHS} months of calendar after"
    for compute in (next_after, first_due):
        with pytest.raises(ScheduleBoundError, match=message):
            compute(never, NOW)
    assert issubclass(ScheduleBoundError, ValueError)


def test_a_rule_that_never_lines_up_with_its_weekday_raises():
    """Every 7 days from a Wednesday, on Thursdays: never."""
    with pytest.raises(ScheduleBoundError, match="months of calendar"):
        next_after(rrule("DAILY", interval=7, byweekday=[3], dtstart=datetime(2026, 1, 7)),
                   NOW)


def test_a_rare_rule_is_still_found():
    """Feb 29 on a Monday: 2044 after 2016, beyond two dozen years of empty months."""
    rare = rrule("DAILY", bymonth=2, bymonthday=29, byweekday=[MO],
                 dtstart=datetime(2016, 3, 1, 8))
    assert next_after(rare, NOW) == datetime(2044, 2, 29, 8, tzinfo=UTC)


def test_passing_over_too_many_runs_raises():
    """A weekly rule running every second: the runs before a moment late in the week
    are more than the bound."""
    dense = rrule("WEEKLY", byweekday=list(range(7)), byhour=list(range(24)),
                  byminute=list(range(60)), bysecond=list(range(60)),
                  dtstart=datetime(2026, 6, 1))
    assert next_after(dense, datetime(2026, 6, 1, 1, tzinfo=UTC)) == datetime(
        2026, 6, 1, 1, 0, 1, tzinfo=UTC)
    with pytest.raises(ScheduleBoundError,
                       match=f"no run found within {MAX_RRULE_STEPS} steps after 2026-06-05"):
        next_after(dense, datetime(2026, 6, 5, tzinfo=UTC))


# -- refused when built ---------------------------------------------------------------

@pytest.mark.parametrize(("arguments", "message"), [
    ({"freq": "SECONDLY", "interval": 0}, "interval must be a positive integer"),
    ({"freq": "DAILY", "interval": -1}, "interval must be a positive integer"),
    ({"freq": "HOURLY", "interval": 0.5}, "interval must be a positive integer"),
    ({"freq": "SECONDLY", "bysetpos": 2}, "selects none of the 1 run"),
    ({"freq": "DAILY", "byhour": [9, 17], "bysetpos": [3, -3]}, "selects none of the 2 run"),
    ({"freq": "HOURLY", "byminute": [0, 30], "bysecond": [0, 1], "bysetpos": 5},
     "selects none of the 4 run"),
    ({"freq": "MINUTELY", "byhour": [9], "count": MAX_RRULE_STEPS + 1}, "count above"),
])
def test_degenerate_rrules_are_refused(arguments, message):
    freq = arguments.pop("freq")
    with pytest.raises(ValueError, match=message):
        rrule(freq, dtstart=datetime(2026, 1, 1), **arguments)


@pytest.mark.parametrize("arguments", [
    {"freq": "DAILY", "byhour": [9, 17], "bysetpos": [2]},
    {"freq": "HOURLY", "byminute": [0, 30], "bysetpos": -2},
    {"freq": "WEEKLY", "bysetpos": 3},  # weekly and longer: periods vary, not checked
    {"freq": "MINUTELY", "count": 10**9},  # one run per period: counted by arithmetic
    {"freq": "MINUTELY", "byhour": [9], "count": MAX_RRULE_STEPS},
])
def test_bounded_rrules_are_accepted(arguments):
    freq = arguments.pop("freq")
    rrule(freq, dtstart=datetime(2026, 1, 1), **arguments)


@pytest.mark.parametrize("every", [0, -1, 1e-7, 0.001, 0.0999])
def test_intervals_under_the_minimum_are_refused_from_python(fake_app, every):
    with pytest.raises(ValueError, match=f"interval must be at least {MIN_INTERVAL} seconds"):
        RedBeatSchedulerEntry("fast", "tasks.fast", every, app=fake_app)
    entry = RedBeatSchedulerEntry("fast", "tasks.fast", 0.2, app=fake_app)
    entry.schedule = schedule(every)  # changed after it was built: refused on save
    with pytest.raises(ValueError, match=f"interval must be at least {MIN_INTERVAL} seconds"):
        entry.save()
    assert not get_redis(fake_app).exists(entry.key)


@pytest.mark.parametrize("every", [0, -1, 1e-7, 0.001, 0.0999, float("nan")])
def test_intervals_under_the_minimum_are_refused_when_decoded(every):
    with pytest.raises(ValueError, match="interval 'every' must be"):
        decoder.loads(json.dumps({"__type__": "interval", "every": every, "relative": False}))


def test_the_minimum_interval_is_accepted(fake_app):
    entry = RedBeatSchedulerEntry("fast", "tasks.fast", MIN_INTERVAL, app=fake_app).save()
    stored = RedBeatSchedulerEntry.from_key(entry.key, app=fake_app)
    assert stored.schedule.run_every == timedelta(seconds=MIN_INTERVAL)


def test_count_slots_by_arithmetic_agrees_with_the_walk():
    for rule, span in ((rrule("SECONDLY", interval=7, dtstart=datetime(2026, 1, 1, 0, 0, 3)),
                        2 * DAY), (rrule("WEEKLY", dtstart=datetime(2000, 1, 5, 9)), 60 * DAY)):
        first = first_due(rule, NOW - span)
        walked = sum(1 for _ in slots_between(rule, first, NOW, limit=10**6))
        assert count_slots(rule, first, NOW) == walked > 2
    # Runs are wall times: the hour that does not exist runs at the same instant as the
    # next one, and the two are one run (49 instants in 48 hours, not 50 wall times), so
    # across a change they are walked, not counted by arithmetic.
    paris = rrule("HOURLY", dtstart=datetime(2026, 1, 1), timezone="Europe/Paris")
    first = datetime(2026, 3, 28, tzinfo=UTC)
    assert count_slots(paris, first, first + 2 * DAY) == 49


# -- through the tick -----------------------------------------------------------------

def test_the_tick_quarantines_unbounded_schedules_and_sends_the_others(app):
    client = get_redis(app)
    rules = {  # as written raw into Redis by another program
        "rrule-interval-0": {"__type__": "rrule", "freq": 6, "interval": 0,
                             "dtstart": 0, "dtstart_tz": 0},
        "interval-1e-7": {"__type__": "interval", "every": 1e-7, "relative": False},
        "february-30th": {"__type__": "rrule", "freq": 3, "interval": 1, "bymonth": [2],
                          "bymonthday": [30], "dtstart": 1767225600, "dtstart_tz": 0},
        "year-1-secondly": {"__type__": "rrule", "freq": 6, "interval": 1,
                            "dtstart": -62135596800, "dtstart_tz": 0},
    }
    for name, schedule_ in rules.items():
        client.hset(f"redbeat:{name}", "definition", json.dumps(
            {"name": name, "task": "tasks.raw", "schedule": schedule_}))
        client.zadd("redbeat::schedule", {f"redbeat:{name}": 0})
    RedBeatSchedulerEntry("fine", "tasks.x", 5.0, app=app, last_run_at=at(0)).save()
    scheduler = leader(app, Clock(T0 + 1e6))
    scheduler.tick()
    assert sorted(name for name, _ in scheduler.sent) == ["fine", "year-1-secondly"]
    reasons = {name: json.loads(client.hget(f"redbeat:{name}", "quarantine") or "{}")
               for name in rules}
    assert "rrule interval must be a positive integer, not 0" in (
        reasons["rrule-interval-0"]["reason"])
    assert f"interval 'every' must be at least {MIN_INTERVAL} seconds, not 1e-07" in (
        reasons["interval-1e-7"]["reason"])
    assert "rrule: no run found within 1200 months of calendar" in (
        reasons["february-30th"]["reason"])
    assert reasons["year-1-secondly"] == {}
    for name in ("rrule-interval-0", "interval-1e-7", "february-30th"):
        assert client.zscore("redbeat::schedule", f"redbeat:{name}") == -1  # parked
    # the year-1 rule runs every second from now on, resumed each time
    assert client.zscore("redbeat::schedule", "redbeat:year-1-secondly") == T0 + 1e6 + 1


def test_a_static_under_the_minimum_is_skipped_not_stored(redis_server):
    app = make_app(redis_server.url, beat_schedule={
        "too-fast": {"task": "tasks.fast", "schedule": 0.01},
        "fine": {"task": "tasks.fine", "schedule": 5.0},
    })
    leader(app, Clock())
    client = get_redis(app)
    assert client.exists("redbeat:fine") and not client.exists("redbeat:too-fast")

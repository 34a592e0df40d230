"""redbeat.run_buckets: an entry's runs in a window, counted per bucket. The arithmetic
for intervals is checked against walking the runs one by one; the rest against the
next-send rule itself (``upcoming_runs``) with a fixed "now"."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery.schedules import crontab, schedule

from redbeat.nextrun import following_run, next_run, to_score, upcoming_runs
from redbeat.policy import DEFAULT, EntryPolicy
from redbeat.run_buckets import (
    SCORE_SHIFT,
    SECOND,
    RunCounter,
    Tally,
    add_runs,
    micros,
    plain_step,
    runs_between,
)

MINUTE = 60 * SECOND
NOW = datetime(2026, 3, 10, 12, 0, 30, 250_000, tzinfo=timezone.utc)
START = micros(NOW) // MINUTE * MINUTE  # the window starts at 12:00


def walked(start: int, width: int, count: int, first: int, step: int, last: int) -> list[int]:
    counts = [0] * count
    for moment in range(first, last + 1, step):
        if start <= moment < start + width * count:
            counts[(moment - start) // width] += 1
    return counts


@pytest.mark.parametrize("seconds", [0.5, 1, 7, 10, 30, 45, 60, 90, 120, 3600, 86400])
def test_a_progression_counts_as_walking_it(seconds: float) -> None:
    generator = random.Random(seconds)
    step = int(seconds * SECOND)
    for _ in range(200):
        count = generator.randint(1, 40)
        first = START + generator.randint(-5 * MINUTE, count * MINUTE)
        last = first + generator.randint(-MINUTE, 2 * count * MINUTE)
        tally = Tally(START, MINUTE, count)
        added = tally.add_every(first, step, last)
        expected = walked(START, MINUTE, count, first, step, min(last, tally.end - 1))
        assert tally.totals() == expected and added == sum(expected)


def expand(every: object, policy: EntryPolicy = DEFAULT, name: str = "job",
           minutes: int = 24 * 60, ran: float = 15) -> tuple[list[int], Any]:
    """An entry that last ran ``ran`` seconds before NOW (12:00:30.25), expanded over
    the day from 12:00."""
    last_run = NOW - timedelta(seconds=ran)
    first = next_run(every, policy, name, last_run, NOW)
    assert first is not None
    tally = Tally(START, MINUTE, minutes)
    result = add_runs(tally, first, first.score, every, policy, name)
    return tally.totals(), result


def by_the_rule(every: object, policy: EntryPolicy = DEFAULT, name: str = "job",
                minutes: int = 24 * 60) -> list[int]:
    """The same counts from upcoming_runs, one run at a time."""
    first = next_run(every, policy, name, NOW - timedelta(seconds=15), NOW)
    counts = [0] * minutes
    while first is not None:
        runs = upcoming_runs(first, every, policy, name, 100)
        for run in runs:
            at = (micros(run.send_at) + SCORE_SHIFT - START) // MINUTE
            if at >= minutes:
                return counts
            counts[at] += 1
        first = following_run(every, policy, name, runs[-1].due)
    return counts


def test_every_minute_is_in_every_bar() -> None:
    counts, result = expand(schedule(timedelta(minutes=1)), ran=50)  # next at 12:00:40
    assert counts == [1] * 1440 and result.runs == 1440 and not result.capped
    counts, _ = expand(schedule(timedelta(minutes=1)))  # 12:00:15 has been sent
    assert counts == [0] + [1] * 1439


def test_every_ten_seconds_counts_six_a_minute() -> None:
    every = schedule(timedelta(seconds=10))
    counts, _ = expand(every)
    assert counts[1:-1] == [6] * 1438 and counts == by_the_rule(every)


@pytest.mark.parametrize("every", [
    schedule(timedelta(seconds=45)), schedule(timedelta(hours=1)),
    crontab(minute="*/5"), crontab(minute=0, hour=0), crontab(minute="*"),
])
def test_counts_match_the_next_send_rule(every: object) -> None:
    assert expand(every)[0] == by_the_rule(every)


def test_jitter_is_the_slots_own_and_keeps_every_run() -> None:
    every, policy = schedule(timedelta(seconds=20)), EntryPolicy(jitter=30)
    assert plain_step(every, policy) is None  # walked, each slot with its own delay
    counts, _ = expand(every, policy, minutes=60)
    assert counts == by_the_rule(every, policy, minutes=60)
    # slots due from 12:00:35 to 12:59:55, the last few sent after the hour or not
    assert 176 <= sum(counts) <= 179


def test_end_time_stops_the_runs() -> None:
    policy = EntryPolicy(end_time=NOW + timedelta(hours=2))
    for every in (schedule(timedelta(minutes=1)), crontab(minute="*")):
        counts, _ = expand(every, policy)
        # 12:01:15 to 14:00:15, the last before the end at 14:00:30.25
        assert counts[1:121] == [1] * 120 and sum(counts) == 120
        assert counts == by_the_rule(every, policy)


def test_a_walked_entry_stops_at_the_cap() -> None:
    every = crontab(minute="*")
    first = next_run(every, EntryPolicy(), "job", NOW - timedelta(seconds=15), NOW)
    assert first is not None
    tally = Tally(START, MINUTE, 1440)
    result = add_runs(tally, first, first.score, every, EntryPolicy(), "job", cap=100)
    assert result.capped and sum(tally.totals()) == 100


@pytest.mark.parametrize(("every", "policy", "minute", "expected"), [
    (schedule(timedelta(minutes=1)), EntryPolicy(), 600, True),
    (schedule(timedelta(hours=1)), EntryPolicy(), 60, True),   # 13:00:15
    (schedule(timedelta(hours=1)), EntryPolicy(), 61, False),
    (crontab(minute=0, hour=0), EntryPolicy(), 720, True),     # midnight
    (crontab(minute=0, hour=0), EntryPolicy(), 721, False),
    (crontab(minute="*"), EntryPolicy(end_time=NOW + timedelta(hours=2)), 119, True),
    (crontab(minute="*"), EntryPolicy(end_time=NOW + timedelta(hours=2)), 121, False),
    (schedule(timedelta(minutes=1)), EntryPolicy(end_time=NOW + timedelta(hours=2)), 121,
     False),
])
def test_runs_between(every: object, policy: EntryPolicy, minute: int,
                      expected: bool) -> None:
    first = next_run(every, policy, "job", NOW - timedelta(seconds=15), NOW)
    assert first is not None
    low = (START + minute * MINUTE) / SECOND
    assert runs_between(first, to_score(first.send_at), every, policy, "job", low,
                        low + 60) is expected


def test_identical_walked_entries_are_walked_once() -> None:
    every, policy = crontab(minute="*"), EntryPolicy()
    first = next_run(every, policy, "job", NOW - timedelta(seconds=15), NOW)
    assert first is not None
    counter = RunCounter(Tally(START, MINUTE, 1440))
    for at in range(1000):
        counter.add(first, first.score, every, policy, f"job-{at}")
    counts = counter.totals()
    assert counts[1:] == [1000] * 1439 and counter.walked == 1438 and not counter.capped


def test_walking_stops_at_the_budget() -> None:
    every, policy = crontab(minute="*"), EntryPolicy(jitter=1)  # walked one by one
    counter = RunCounter(Tally(START, MINUTE, 1440), walk_budget=2000)
    for at in range(3):
        first = next_run(every, policy, f"job-{at}", NOW - timedelta(seconds=15), NOW)
        assert first is not None
        counter.add(first, first.score, every, policy, f"job-{at}")
    assert sum(counter.totals()) == 3 + 2000 and counter.capped == 2

"""schedules.rrule equality: equal rules run at the same moments (their zones too), and
an ``until`` that ``count`` makes redundant does not count."""

from __future__ import annotations

import time
import warnings
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from redbeat.schedules import rrule

#: dateutil's warning for a rule with both count and until, which these tests are about.
BOTH = "Using both 'count' and 'until'"
pytestmark = pytest.mark.filterwarnings(f"ignore:{BOTH}:DeprecationWarning")

UTC = timezone.utc
PARIS = ZoneInfo("Europe/Paris")
PLUS_ONE = timezone(timedelta(hours=1))
START = datetime(2015, 12, 30, 12, 59, 22, tzinfo=UTC)
#: The third run of a minutely rule from START.
THIRD = START + timedelta(minutes=2)
#: Daily at 09:00 in Paris from the Friday before DST starts (Sunday 2026-03-29): the
#: third run is at 07:00 UTC, not at 08:00 as the first two.
PARIS_START = datetime(2026, 3, 27, 9, tzinfo=PARIS)
PARIS_THIRD = datetime(2026, 3, 29, 7, tzinfo=UTC)


def minutely(**fields):
    return rrule("MINUTELY", dtstart=fields.pop("dtstart", START), **fields)


def paris_daily(**fields):
    return rrule("DAILY", dtstart=PARIS_START, **fields)


def monday_wednesday(**fields):
    """Weekly on two days: more than one run per period (counted by walking)."""
    return rrule("WEEKLY", dtstart=datetime(2026, 1, 5, 9, tzinfo=UTC), byweekday=(0, 2),
                 **fields)


with warnings.catch_warnings():  # the table is built when the module is collected
    warnings.filterwarnings("ignore", BOTH, DeprecationWarning)
    CASES = [
        # an until after the count-th run changes nothing (2.4.2's tests/test_json.py)
        (minutely(count=1, until=START + timedelta(days=1)), minutely(count=1), True),
        (minutely(count=3, until=THIRD), minutely(count=3), True),  # at the count-th run
        (minutely(count=3, until=THIRD), minutely(count=3, until=THIRD + timedelta(days=9)),
         True),
        (minutely(count=3, until=THIRD.astimezone(PARIS)), minutely(count=3), True),
        (monday_wednesday(count=4, until=datetime(2026, 1, 14, 9, tzinfo=UTC)),
         monday_wednesday(count=4), True),
        (paris_daily(count=3, until=PARIS_THIRD), paris_daily(count=3), True),
        # an until before it cuts the runs short
        (minutely(count=3, until=THIRD - timedelta(seconds=1)), minutely(count=3), False),
        (minutely(count=3, until=THIRD - timedelta(seconds=1)), minutely(count=3, until=THIRD),
         False),
        (monday_wednesday(count=4, until=datetime(2026, 1, 14, 8, tzinfo=UTC)),
         monday_wednesday(count=4), False),
        # 08:00 UTC would be redundant at the offset of dtstart; in Paris the third run is
        # an hour earlier than that, so 06:59:59 UTC cuts it and 07:30 does not
        (paris_daily(count=3, until=PARIS_THIRD - timedelta(seconds=1)), paris_daily(count=3),
         False),
        (paris_daily(count=3, until=PARIS_THIRD + timedelta(minutes=30)), paris_daily(count=3),
         True),
        # without count, until is the end
        (minutely(until=THIRD), minutely(), False),
        (minutely(until=THIRD), minutely(until=THIRD + timedelta(days=1)), False),
        (minutely(until=THIRD), minutely(until=THIRD.astimezone(PARIS)), True),
        # the zone: the same start in another zone runs at other instants
        (paris_daily(), rrule("DAILY", dtstart=PARIS_START.astimezone(UTC)), False),
        (rrule("MONTHLY", dtstart=datetime(2026, 1, 1, 0, 30, tzinfo=PLUS_ONE)),
         rrule("MONTHLY", dtstart=datetime(2025, 12, 31, 23, 30, tzinfo=UTC)), False),
        (paris_daily(), rrule("DAILY", dtstart=datetime(2026, 3, 27, 9), timezone="Europe/Paris"),
         True),
        (minutely(), minutely(dtstart=START.astimezone(ZoneInfo("UTC"))), True),
        (minutely(), minutely(dtstart=START.astimezone(timezone(timedelta(0)))), True),
        # the other fields
        (minutely(count=1), minutely(count=2), False),
        (minutely(count=1, until=START + timedelta(days=1)), minutely(count=2), False),
        (minutely(count=1), minutely(), False),
        (minutely(), rrule("HOURLY", dtstart=START), False),
        (minutely(), minutely(interval=2), False),
        (minutely(), minutely(dtstart=START + timedelta(seconds=1)), False),
        (minutely(), minutely(bysecond=22), False),
        (minutely(), minutely(), True),
    ]


@pytest.mark.parametrize(("left", "right", "equal"), CASES)
def test_equality(left, right, equal):
    assert (left == right) is equal and (right == left) is equal
    assert (left != right) is not equal


def test_an_rrule_is_not_equal_to_other_schedules():
    assert minutely() != "MINUTELY" and minutely() != START


def test_a_huge_count_is_worked_out_by_arithmetic_and_once():
    rule = rrule("SECONDLY", dtstart=START, count=10**12, until=START + timedelta(days=365))
    began = time.perf_counter()
    assert rule.effective_until == START + timedelta(days=365)  # the count ends later
    assert time.perf_counter() - began < 30  # by arithmetic: walking it takes hours
    assert "effective_until" in vars(rule)  # kept: equality asks for it each time


def test_has_no_hash_like_celerys_schedules():
    with pytest.raises(TypeError):
        hash(minutely())

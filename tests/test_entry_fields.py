"""An entry's meta text both ways on the tick's fast path (entry_fields): kept by text
and by moment, a burst's entries share one read and one write of their meta, and what
is shared is exactly what each would get alone."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from redbeat.entry_fields import InvalidEntry, parse_meta, utc_meta_text

META = (
    '{"last_run_at": {"__type__": "datetime", "year": 2027, "month": 6, "day": 1, '
    '"hour": 12, "minute": 0, "second": 0, "microsecond": 4000, "timezone": "UTC"}, '
    '"total_run_count": 7}'
)


def test_entries_read_from_one_meta_text_share_one_last_run() -> None:
    first = parse_meta("redbeat:a", META)
    again = parse_meta("redbeat:b", "".join(META))  # another str object, equal text
    assert first == (datetime(2027, 6, 1, 12, 0, 0, 4000, tzinfo=timezone.utc), 7)
    assert again[0] is first[0]


def test_a_meta_that_makes_no_date_is_refused_for_each_entry_that_holds_it() -> None:
    bad = META.replace('"month": 6', '"month": 13')
    for key in ("redbeat:a", "redbeat:b"):
        with pytest.raises(InvalidEntry) as refused:
            parse_meta(key, bad)
        assert refused.value.key == key and "month must be in 1..12" in refused.value.reason


def test_one_instant_in_two_zones_writes_the_same_utc_meta() -> None:
    utc = datetime(2027, 6, 1, 12, 0, 0, 4000, tzinfo=timezone.utc)
    kolkata = utc.astimezone(ZoneInfo("Asia/Kolkata"))
    assert utc_meta_text(kolkata, 7) == utc_meta_text(utc, 7) == META
    assert utc_meta_text(utc, None) == META.replace(', "total_run_count": 7', "")

"""The JSON codec: every tagged type round-trips, and 2.4.2's exact shapes are kept."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab, schedule, solar
from dateutil.rrule import FR, MO, weekday
from hypothesis import given
from hypothesis import strategies as st

from redbeat import decoder, schedules
from redbeat.decoder import RedBeatJSONDecoder, RedBeatJSONEncoder, dumps, loads


def roundtrip(value):
    return json.loads(json.dumps(value, cls=RedBeatJSONEncoder), cls=RedBeatJSONDecoder)


@pytest.mark.parametrize(
    ("moment", "zone_json"),
    [
        (datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=ZoneInfo("UTC")), "UTC"),
        (datetime(2026, 1, 2, 3, 4, 5, tzinfo=ZoneInfo("America/New_York")), "America/New_York"),
        (datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(seconds=19800))), 19800.0),
        (datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), 0.0),
    ],
)
def test_datetime_shape_and_roundtrip(moment, zone_json):
    encoded = json.loads(dumps(moment))
    assert encoded["__type__"] == "datetime"
    assert encoded["timezone"] == zone_json
    decoded = loads(dumps(moment))
    assert decoded == moment
    assert decoded.utcoffset() == moment.utcoffset()


def test_naive_datetime_is_written_as_utc():
    assert json.loads(dumps(datetime(2026, 1, 2)))["timezone"] == "UTC"
    assert loads(dumps(datetime(2026, 1, 2))) == datetime(2026, 1, 2, tzinfo=timezone.utc)


def test_missing_timezone_means_utc():
    text = '{"__type__": "datetime", "year": 2026, "month": 1, "day": 2, "hour": 3, ' \
           '"minute": 4, "second": 5, "microsecond": 0}'
    assert loads(text) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_interval_shape():
    assert json.loads(dumps(schedule(30, relative=True))) == {
        "__type__": "interval", "every": 30.0, "relative": True,
    }
    assert roundtrip(schedule(timedelta(minutes=5))).run_every == timedelta(minutes=5)


def test_crontab_keeps_the_values_as_given():
    value = crontab(minute="*/2", hour=3, day_of_week="mon-fri")
    encoded = json.loads(dumps(value))
    assert list(encoded) == ["__type__", "minute", "hour", "day_of_week", "day_of_month",
                             "month_of_year"]
    assert encoded["minute"] == "*/2" and encoded["hour"] == 3
    assert roundtrip(value) == value


def test_crontab_with_zone_adds_only_timezone():
    value = schedules.crontab(minute=30, hour=2, timezone="Europe/London")
    encoded = json.loads(dumps(value))
    assert encoded["timezone"] == "Europe/London"
    decoded = roundtrip(value)
    assert decoded.timezone == "Europe/London" and decoded == value


def test_crontab_missing_fields_default_to_star():
    decoded = loads('{"__type__": "crontab", "minute": "0", "hour": "3"}')
    assert decoded == crontab(minute="0", hour="3")


def test_solar_roundtrip():
    value = solar("sunrise", 48.85, 2.35)
    decoded = roundtrip(value)
    assert (decoded.event, decoded.lat, decoded.lon) == ("sunrise", 48.85, 2.35)


def test_rrule_shape_is_242_compatible_for_fixed_offsets():
    value = schedules.rrule("WEEKLY", dtstart=datetime(2026, 11, 23, 9, tzinfo=timezone.utc),
                            byweekday=[weekday(0), weekday(2)])
    encoded = json.loads(dumps(value))
    assert "timezone" not in encoded
    assert encoded["freq"] == 2 and encoded["dtstart"] == 1795424400 and encoded["dtstart_tz"] == 0
    assert encoded["byweekday"] == [{"__type__": "weekday", "wkday": 0},
                                    {"__type__": "weekday", "wkday": 2}]
    assert roundtrip(value) == value


def test_rrule_keeps_named_zone_and_weekday_n():
    paris = ZoneInfo("Europe/Paris")
    value = schedules.rrule("MONTHLY", dtstart=datetime(2026, 3, 1, 9, tzinfo=paris),
                            byweekday=[MO(+1)], count=3)
    encoded = json.loads(dumps(value))
    assert encoded["timezone"] == "Europe/Paris"
    assert encoded["byweekday"] == [{"__type__": "weekday", "wkday": 0, "n": 1}]
    decoded = roundtrip(value)
    assert decoded == value
    assert [d.hour for d in decoded.rrule] == [9, 9, 9]


def test_unknown_type_stays_a_dict():
    assert loads('{"__type__": "lunar", "phase": "full"}') == {"__type__": "lunar", "phase": "full"}


def test_bad_interval_is_an_error():
    with pytest.raises(ValueError):
        loads('{"__type__": "interval", "every": "soon", "relative": false}')


@given(
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                 timezones=st.sampled_from([ZoneInfo("UTC"), ZoneInfo("Europe/Paris"),
                                            ZoneInfo("Australia/Lord_Howe"),
                                            timezone(timedelta(hours=5, minutes=30))]))
)
def test_datetime_roundtrip_property(moment):
    decoded = loads(dumps(moment))
    assert decoded == moment and decoded.utcoffset() == moment.utcoffset()


@given(st.floats(min_value=0.1, max_value=10**7, allow_nan=False), st.booleans())  # MIN_INTERVAL
def test_interval_roundtrip_property(every, relative):
    decoded = roundtrip(schedule(every, relative=relative))
    assert decoded.run_every == timedelta(seconds=every) and decoded.relative == relative


def test_shared_schedules_decode_like_loads_and_build_each_schedule_once():
    shared = decoder.SharedSchedules(limit=2)
    hourly = '{"__type__": "crontab", "minute": "0", "hour": "*", "day_of_week": "*", ' \
             '"day_of_month": "*", "month_of_year": "*"}'
    first = shared.loads(f'{{"schedule": {hourly}, "args": [1]}}')
    second = shared.loads(f'{{"schedule": {hourly}, "args": [2]}}')
    assert first["schedule"] is second["schedule"]
    assert first["schedule"] == decoder.loads(hourly) and second["args"] == [2]
    solar = '{"__type__": "solar", "event": "sunrise", "lat": 51.5, "lon": 0.0}'
    assert shared.loads(solar) is not shared.loads(solar)  # Celery moves its observer
    every = [shared.loads(f'{{"__type__": "interval", "every": {n}, "relative": false}}')
             for n in (1, 2, 3, 1)]
    assert [s.run_every.total_seconds() for s in every] == [1, 2, 3, 1]  # bounded, still right


def test_equal_rrules_are_shared_lists_and_all():
    """Issue 29: an rrule's BY-parts are lists, which made its signature unhashable, so
    no rrule was shared and a burst of equal ones resumed each of them."""
    shared = decoder.SharedSchedules()
    text = decoder.dumps(schedules.rrule("MINUTELY", byhour=[9, 17], byweekday=[MO(+1), FR],
                               dtstart=datetime(2027, 1, 1), timezone="Europe/London"))
    first, second = shared.loads(text), shared.loads(text)
    assert first is second and first == decoder.loads(text)
    other = shared.loads(text.replace("17", "18"))
    assert other is not first and other.rules["byhour"] != first.rules["byhour"]

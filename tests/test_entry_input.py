"""redbeat.entry_input: what the CLI's options and the web form's fields read, and
which field each mistake is charged to."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from redbeat.entry_input import (
    FieldError,
    json_field,
    options_from,
    parse_solar,
    policy_from,
    schedule_from,
)
from redbeat.policy import EntryPolicy


@pytest.mark.parametrize(("values", "field", "words"), [
    ({"every": "5 parsecs"}, "every", "--every wants a duration"),
    ({"cron": "61 * *"}, "cron", "--cron wants 5 fields"),
    ({"rrule_text": "FREQ=FORTNIGHTLY"}, "rrule_text", "--rrule: FREQ='FORTNIGHTLY'"),
    ({"run_at": "tomorrow"}, "run_at", "--at wants an ISO 8601 time"),
    ({"solar": "sunrise north"}, "solar", "--solar wants EVENT LAT,LON"),
    ({"solar": "sunrise 91,0"}, "solar", "latitude -90..90"),
    ({"every": "1m", "cron": "* * * * *"}, "cron", "give only one of --every, --cron"),
    ({"every": "1m", "zone": "Europe/Pariss"}, "zone", "--tz: unknown time zone"),
])
def test_a_bad_schedule_names_its_field(values, field, words):
    with pytest.raises(FieldError) as raised:
        schedule_from(values)
    assert raised.value.field == field and words in str(raised.value)


def test_empty_fields_are_not_given_and_a_label_names_fields_as_the_caller_does():
    assert schedule_from({"every": " ", "cron": ""}) is None
    assert schedule_from({"solar": "sunset -33.9,18.4"}).event == "sunset"
    with pytest.raises(FieldError, match="^Interval wants a duration"):
        schedule_from({"every": "x"}, lambda field: "Interval")


@pytest.mark.parametrize(("values", "field", "words"), [
    ({"start": "2030-01-02T00:00:00", "end": "2030-01-01T00:00:00"}, "end",
     "--end must be after --start"),
    ({"start": "soon"}, "start", "--start wants an ISO 8601 time"),
    ({"jitter": "-5"}, "jitter", "--jitter must be a number of seconds >= 0"),
    ({"ttl": "forever"}, "ttl", "--ttl wants a duration"),
    ({"misfire_grace": "-1"}, "misfire_grace", "--misfire-grace must be"),
])
def test_a_bad_policy_field_is_charged_to_that_field(values, field, words):
    with pytest.raises(FieldError) as raised:
        policy_from(values, EntryPolicy())
    assert raised.value.field == field and words in str(raised.value)


def test_a_policy_reads_times_in_the_zone_and_limits_as_durations():
    policy = policy_from({"start": "2030-01-01T09:00:00", "zone": "Europe/Paris",
                          "misfire_grace": "5m", "ttl": "none", "jitter": "1m",
                          "coalesce": False}, EntryPolicy(ttl=60))
    assert policy.start_time == datetime(2030, 1, 1, 8, tzinfo=timezone.utc)
    assert (policy.misfire_grace_time, policy.ttl, policy.jitter, policy.coalesce) == (
        300, None, 60, False)


@pytest.mark.parametrize(("values", "field"), [
    ({"options_json": "[1]"}, "options_json"), ({"priority": "high"}, "priority"),
    ({"priority": "256"}, "priority"), ({"expires": "later"}, "expires"),
])
def test_bad_options_name_their_field(values, field):
    with pytest.raises(FieldError) as raised:
        options_from(values, None)
    assert raised.value.field == field


def test_options_merge_their_own_fields_over_the_json():
    assert options_from({"options_json": '{"queue": "a", "retry": false}', "queue": "b",
                         "priority": "3", "expires": "90"}, {"old": 1}) == {
        "queue": "b", "retry": False, "priority": 3, "expires": 90.0}
    assert options_from({}, None) is None


def test_json_fields_want_their_kind():
    assert json_field({"args_json": "[1, 2]"}, "args_json", list) == [1, 2]
    with pytest.raises(FieldError, match="--kwargs must be a JSON dict"):
        json_field({"kwargs_json": "[]"}, "kwargs_json", dict)
    assert json_field({}, "args_json", list) is None


def test_solar_text_round_trips_through_as_options():
    from redbeat.schedule_text import as_options

    value = parse_solar("dusk_civil 51.5,-0.12")
    assert as_options(value) == ["--solar", "dusk_civil 51.5,-0.12"]
    assert parse_solar(as_options(value)[1]) == value

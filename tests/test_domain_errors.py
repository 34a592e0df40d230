"""The domain errors: a missing entry is EntryNotFound (still a KeyError, as 2.4.2
raised), and only that error reads as "no entry named ..." (exit 3) in the CLI; a
KeyError from a bug or from the input is invalid input, whatever its text."""

from __future__ import annotations

import pytest

from redbeat import RedBeatSchedulerEntry
from redbeat.cli import EXIT_INVALID, EXIT_NOT_FOUND, command
from redbeat.entry import EntryNotFound
from redbeat.manage import get_entry


def exit_code(error: BaseException) -> int:
    @command
    def run(name: str) -> None:
        raise error

    with pytest.raises(SystemExit) as stopped:
        run(name="daily")
    return int(stopped.value.code)


def test_only_entry_not_found_exits_3():
    assert exit_code(EntryNotFound("daily")) == EXIT_NOT_FOUND
    assert exit_code(KeyError("daily")) == EXIT_INVALID  # a bug naming the same text


def test_a_missing_entry_raises_entry_not_found_which_is_a_key_error(app):
    with pytest.raises(EntryNotFound) as missing:
        get_entry(app, "nope")
    assert isinstance(missing.value, KeyError) and missing.value.name == "nope"
    with pytest.raises(KeyError):
        RedBeatSchedulerEntry.from_key("redbeat:nope", app=app)

"""RedBeatConfig is read once from one table of settings and then frozen: an override is
a checked copy (``dataclasses.replace``), never a change to the object others hold."""

from __future__ import annotations

import dataclasses

import pytest

from redbeat import RedBeatScheduler
from redbeat.settings import (
    DEFAULT_BATCH_SIZE,
    SETTINGS,
    RedBeatConfig,
    SettingError,
    ensure_conf,
)


def test_the_config_cannot_be_changed(fake_app):
    config = ensure_conf(fake_app)
    for attribute in ("lock_key", "lock_timeout", "redis_options_from_redbeat", "app"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(config, attribute, None)


def test_2_4_2s_schedule_assignment_still_writes_the_apps_beat_schedule(fake_app):
    config = ensure_conf(fake_app)
    config.schedule = {"x": {"task": "tasks.x", "schedule": 5.0}}
    assert fake_app.conf.beat_schedule == {"x": {"task": "tasks.x", "schedule": 5.0}}


def test_a_copy_keeps_its_overrides_and_reads_nothing_again(fake_app):
    fake_app.conf.update(redbeat_key_prefix="app:", redbeat_batch_size=7)
    config = ensure_conf(fake_app)
    copy = dataclasses.replace(config, key_prefix="cli:", redis_options={"socket_timeout": 1})
    assert (copy.key_prefix, copy.batch_size, copy.app) == ("cli:", 7, fake_app)
    assert copy.redis_options == {"socket_timeout": 1}
    assert (config.key_prefix, ensure_conf(fake_app)) == ("app:", config)


@pytest.mark.parametrize("change, problem", [
    ({"batch_size": 0}, "redbeat_batch_size=0 must be at least 1"),
    ({"delivery": "twice"}, "redbeat_delivery='twice' must be"),
    ({"lock_timeout": "soon"}, "redbeat_lock_timeout='soon' is not a number"),
    ({"redis_options": ["x"]}, "redbeat_redis_options=['x'] must be a dict of options"),
])
def test_a_copy_goes_through_the_same_checks(fake_app, change, problem):
    with pytest.raises(SettingError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        dataclasses.replace(ensure_conf(fake_app), **change)


def test_every_table_row_names_an_attribute_and_its_default_holds_without_an_app():
    config = RedBeatConfig()
    for setting in SETTINGS:
        assert getattr(config, setting.attribute) == setting.default, setting.attribute
    assert config.batch_size == DEFAULT_BATCH_SIZE and config.lock_key == "redbeat::lock"


def test_an_explicit_zero_history_is_kept_not_replaced_by_the_default(fake_app):
    fake_app.conf.redbeat_history_length = 0
    assert RedBeatConfig(fake_app).history_length == 0


def test_the_schedulers_overrides_are_its_own_checked_copy(app):
    scheduler = RedBeatScheduler(app, lock_key="custom-lock", lock_timeout=30)
    try:
        assert (scheduler.config.lock_key, scheduler.lock_timeout) == ("custom-lock", 30.0)
        assert (app.redbeat_conf.lock_key, app.redbeat_conf.lock_timeout) == (
            "redbeat::lock", None)  # the app's config, shared, is untouched
        scheduler.lock_timeout = None  # the setting's again: five polls
        assert scheduler.lock_timeout == 5.0 and scheduler.lock.timeout == 5.0
    finally:
        scheduler.close()
    with pytest.raises(SystemExit, match="redbeat_lock_timeout='soon' is not a number"):
        RedBeatScheduler(app, lock_timeout="soon")

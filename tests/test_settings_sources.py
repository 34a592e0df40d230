"""Settings reach redbeat however the app is configured, at first use, in a fresh app.

Every case builds a new Celery app whose configuration Celery has not read yet: that is
the state a fresh process (``celery -A proj redbeat list``, a script saving an entry) is
in, and the one where a membership test on ``app.conf`` sees nothing. The real-process
tests at the end run exactly those processes against a private redis-server.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import ImproperlyConfigured

from redbeat.keys import KeyLayout
from redbeat.settings import RedBeatConfig, conf_has, conf_lookup, ensure_conf
from support import forked

WriteModule = Callable[[str], str]


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteModule]:
    """Writes a config module into tmp_path and returns its (unique) importable name;
    sys.path and sys.modules are put back afterwards so no case sees another's module."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(source: str) -> str:
        name = f"redbeat_settings_{uuid.uuid4().hex}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def fresh_app(**kwargs: Any) -> Celery:
    return Celery("sources", set_as_current=False, **kwargs)


SCHEDULE = {"tick": {"task": "tasks.tick", "schedule": 60.0}}

NEW_STYLE = f"""
    broker_url = "redis://broker.example:6379/1"
    redbeat_redis_url = "redis://schedule.example:6379/2"
    redbeat_key_prefix = "new:"
    beat_schedule = {SCHEDULE!r}
    beat_max_loop_interval = 42
    timezone = "Asia/Tokyo"
"""

CELERY3 = f"""
    BROKER_URL = "redis://broker.example:6379/1"
    BROKER_TRANSPORT_OPTIONS = {{"visibility_timeout": 99}}
    BROKER_USE_SSL = {{"ssl_cert_reqs": "required"}}
    CELERYBEAT_SCHEDULE = {SCHEDULE!r}
    CELERYBEAT_MAX_LOOP_INTERVAL = 17
    CELERY_TIMEZONE = "Europe/Paris"
    REDBEAT_REDIS_URL = "redis://schedule.example:6379/3"
    REDBEAT_KEY_PREFIX = "old:"
    REDBEAT_LOCK_KEY = "old-lock"
"""

#: A Celery 3 module naming no redbeat Redis: the schedule falls back to the broker.
CELERY3_BROKER_ONLY = f"""
    BROKER_URL = "redis://broker.example:6379/4"
    BROKER_USE_SSL = {{"ssl_cert_reqs": "none"}}
    CELERYBEAT_SCHEDULE = {SCHEDULE!r}
"""

#: Django-style names (the settings of ``config_from_object(..., namespace="CELERY")``).
NAMESPACED = {
    "CELERY_BROKER_URL": "redis://broker.example:6379/1",
    "CELERY_REDBEAT_REDIS_URL": "redis://schedule.example:6379/5",
    "CELERY_REDBEAT_KEY_PREFIX": "dj:",
    "CELERY_BEAT_SCHEDULE": SCHEDULE,
    "TIME_ZONE": "America/New_York",
}


class ObjectConfig:
    broker_url = "redis://broker.example:6379/1"
    redbeat_redis_url = "redis://schedule.example:6379/6"
    redbeat_key_prefix = "obj:"
    redbeat_lock_key = None
    beat_schedule = SCHEDULE


def from_module(source: str, **options: Any) -> Callable[[WriteModule], Celery]:
    def configure(write: WriteModule) -> Celery:
        app = fresh_app()
        app.config_from_object(write(source), **options)
        return app
    return configure


def from_object(obj: Any, **options: Any) -> Callable[[WriteModule], Celery]:
    def configure(write: WriteModule) -> Celery:
        app = fresh_app()
        app.config_from_object(obj, **options)
        return app
    return configure


def set_after_config(write: WriteModule) -> Celery:
    """A project that loads a module, then sets more on ``app.conf`` at import."""
    app = fresh_app()
    app.config_from_object(write('broker_url = "redis://broker.example:6379/1"\n'))
    app.conf.redbeat_redis_url = "redis://schedule.example:6379/7"
    app.conf.REDBEAT_KEY_PREFIX = "late:"
    app.conf.beat_schedule = SCHEDULE
    return app


def set_before_config(write: WriteModule) -> Celery:
    """Values set on ``app.conf`` before ``config_from_object`` survive the load."""
    app = fresh_app()
    app.conf.redbeat_key_prefix = "early:"
    app.config_from_object(write(NEW_STYLE.replace('redbeat_key_prefix = "new:"', "")))
    return app


def namespace_on_app(write: WriteModule) -> Celery:
    """``Celery(namespace=...)`` then ``config_from_object`` without one."""
    app = fresh_app(namespace="CELERY")
    app.config_from_object(dict(NAMESPACED))
    return app


@dataclass
class Source:
    id: str
    configure: Callable[[WriteModule], Celery]
    redis_url: str
    key_prefix: str
    lock_key: str | None
    #: Other RedBeatConfig attributes, and ``either_or`` reads (2.4.2's API) as "conf:NAME".
    more: dict[str, Any] = field(default_factory=dict)


SOURCES = [
    Source("module", from_module(NEW_STYLE), "redis://schedule.example:6379/2", "new:",
           "new::lock", {"conf:beat_max_loop_interval": 42, "conf:timezone": "Asia/Tokyo",
                         "redis_url_is_fallback": False}),
    Source("module-celery3", from_module(CELERY3), "redis://schedule.example:6379/3", "old:",
           "old:old-lock", {
               "redis_options": {"visibility_timeout": 99},
               "redis_options_from_redbeat": False,
               "redis_use_ssl": {"ssl_cert_reqs": "required"},
               "conf:beat_max_loop_interval": 17,
               "conf:timezone": "Europe/Paris",
               "conf:broker_url": "redis://broker.example:6379/1",
           }),
    Source("module-celery3-broker-only", from_module(CELERY3_BROKER_ONLY),
           "redis://broker.example:6379/4", "redbeat:", "redbeat::lock",
           {"redis_url_is_fallback": True, "redis_use_ssl": {"ssl_cert_reqs": "none"}}),
    Source("module-new-celery-names-celery3-redbeat-names",
           from_module(NEW_STYLE.replace("redbeat_redis_url", "REDBEAT_REDIS_URL")),
           "redis://schedule.example:6379/2", "new:", "new::lock"),
    Source("object", from_object(ObjectConfig), "redis://schedule.example:6379/6", "obj:", None),
    Source("dict", from_object({"redbeat_redis_url": "redis://schedule.example:6379/8",
                                "REDBEAT_KEY_PREFIX": "dict:", "beat_schedule": SCHEDULE}),
           "redis://schedule.example:6379/8", "dict:", "dict::lock"),
    Source("dict-namespace", from_object(NAMESPACED, namespace="CELERY"),
           "redis://schedule.example:6379/5", "dj:", "dj::lock",
           {"conf:timezone": "America/New_York",
            "conf:broker_url": "redis://broker.example:6379/1"}),
    Source("module-namespace",
           from_module("\n".join(f"{k} = {v!r}" for k, v in NAMESPACED.items()),
                       namespace="CELERY"),
           "redis://schedule.example:6379/5", "dj:", "dj::lock"),
    Source("app-namespace", namespace_on_app, "redis://schedule.example:6379/5", "dj:",
           "dj::lock"),
    Source("set-after-config", set_after_config, "redis://schedule.example:6379/7", "late:",
           "late::lock"),
    Source("set-before-config", set_before_config, "redis://schedule.example:6379/2", "early:",
           "early::lock"),
]


@pytest.mark.parametrize("source", SOURCES, ids=[source.id for source in SOURCES])
def test_every_configuration_source_is_read(
    source: Source, write_module: WriteModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    app = source.configure(write_module)
    config = ensure_conf(app)
    assert (config.redis_url, config.key_prefix, config.lock_key) == (
        source.redis_url, source.key_prefix, source.lock_key)
    assert config.schedule_key == KeyLayout(source.key_prefix).schedule
    assert config.schedule == SCHEDULE
    for name, expected in source.more.items():
        if name.startswith("conf:"):
            assert config.either_or(name[5:]) == expected, name
        else:
            assert getattr(config, name) == expected, name
    assert config.is_key_in_conf("redbeat_redis_url") is not config.redis_url_is_fallback


def test_a_fresh_conf_answers_membership_and_lookups(write_module: WriteModule) -> None:
    """The first thing to touch ``app.conf`` may be a membership test (2.4.2's
    ``is_key_in_conf``): it must load the module, not answer from the empty preconf."""
    app = fresh_app()
    app.config_from_object(write_module(CELERY3))
    assert conf_has(app.conf, "redbeat_key_prefix")
    assert not conf_has(app.conf, "redbeat_history_length")
    assert conf_lookup(app.conf, "redbeat_history_length", 7) == 7
    assert conf_lookup(app.conf, "beat_schedule") == SCHEDULE


def test_celery_refuses_a_module_mixing_celery3_and_new_celery_names(
    write_module: WriteModule,
) -> None:
    """Celery maps Celery 3 names only in an all-old (or mostly-old) module; a mix is
    Celery's own configuration error, which redbeat reports instead of using defaults."""
    app = fresh_app()
    app.config_from_object(write_module(
        'broker_url = "redis://b:6379/0"\ntimezone = "UTC"\nresult_backend = "redis://r"\n'
        f"CELERYBEAT_SCHEDULE = {SCHEDULE!r}\n"
    ))
    with pytest.raises(ImproperlyConfigured, match="CELERYBEAT_SCHEDULE"):
        ensure_conf(app)


def test_schedule_falls_back_to_the_broker_celery_uses(
    write_module: WriteModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CELERY_BROKER_URL`` in the environment overrides the configured broker for
    Celery; with no ``redbeat_redis_url`` the schedule follows that same broker."""
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://from-environment:6379/9")
    app = fresh_app()
    app.config_from_object(write_module('broker_url = "redis://configured:6379/0"\n'))
    config = RedBeatConfig(app)
    assert config.redis_url == app.conf.broker_url == "redis://from-environment:6379/9"
    assert config.redis_url_is_fallback


# -- real processes ---------------------------------------------------------------------

PLAIN_PROJECT = {
    "settings.py": """
        redbeat_redis_url = {url!r}
        redbeat_key_prefix = "proj:"
        beat_schedule = {{"tick": {{"task": "tasks.tick", "schedule": 60.0}}}}
        timezone = "UTC"
    """,
    "proj.py": """
        from celery import Celery

        app = Celery("proj")
        app.config_from_object("settings")
    """,
}

CELERY3_PROJECT = {
    "settings.py": """
        BROKER_URL = {url!r}
        REDBEAT_KEY_PREFIX = "proj:"
        CELERYBEAT_SCHEDULE = {{"tick": {{"task": "tasks.tick", "schedule": 60.0}}}}
        CELERY_TIMEZONE = "UTC"
    """,
    "proj.py": PLAIN_PROJECT["proj.py"],
}

DJANGO_PROJECT = {
    "settings.py": """
        SECRET_KEY = "not-secret"
        INSTALLED_APPS = []
        USE_TZ = True
        TIME_ZONE = "UTC"
        CELERY_REDBEAT_REDIS_URL = {url!r}
        CELERY_REDBEAT_KEY_PREFIX = "proj:"
        CELERY_BEAT_SCHEDULE = {{"tick": {{"task": "tasks.tick", "schedule": 60.0}}}}
    """,
    "proj.py": """
        import os

        from celery import Celery

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
        app = Celery("proj")
        app.config_from_object("django.conf:settings", namespace="CELERY")
    """,
}

SAVE = """
import json
from celery.schedules import crontab
from proj import app
from redbeat import RedBeatSchedulerEntry
from redbeat.settings import ensure_conf

entry = RedBeatSchedulerEntry("nightly", "tasks.report", crontab(minute=0, hour=3), app=app)
entry.save()
config = ensure_conf(app)
print(json.dumps({"key": entry.key, "url": config.redis_url, "prefix": config.key_prefix,
                  "schedule": sorted(config.schedule)}))
"""

GET = """
from proj import app
from redbeat import manage

print(manage.get_entry(app, "nightly").name)
"""


@pytest.mark.e2e
@pytest.mark.parametrize("project", [
    pytest.param(PLAIN_PROJECT, id="module"),
    pytest.param(CELERY3_PROJECT, id="celery3-module"),
    pytest.param(DJANGO_PROJECT, id="django-namespace"),
])
def test_fresh_processes_read_the_project_settings(
    project: dict[str, str], redis_server: Any, tmp_path: Path
) -> None:
    """A script saving an entry, a ``redbeat.manage`` call and ``celery -A proj redbeat
    list``, each a new process whose app only called ``config_from_object`` (forked
    from the session's forker, which has imported Celery but no project: the app is as
    new as in an interpreter started for it)."""
    if project is DJANGO_PROJECT:
        pytest.importorskip("django")
    for name, text in project.items():
        (tmp_path / name).write_text(textwrap.dedent(text.format(url=redis_server.url)))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CELERY_", "REDBEAT_", "DJANGO_"))}
    env["PYTHONPATH"] = str(tmp_path)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        done = forked.run(list(argv), str(tmp_path), env, timeout=60)
        assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
        return done

    saved = json.loads(run("-c", SAVE).stdout.splitlines()[-1])
    assert saved == {"key": "proj:nightly", "url": redis_server.url, "prefix": "proj:",
                     "schedule": ["tick"]}
    assert redis_server.client().zscore(KeyLayout("proj:").schedule, "proj:nightly") is not None
    assert run("-c", GET).stdout.strip() == "nightly"
    listing = run("-m", "celery", "-A", "proj", "redbeat", "list").stdout
    assert "nightly" in listing and "tasks.report" in listing


@pytest.mark.redis_server
def test_the_broker_url_fallback_is_logged_by_beat_and_the_cli(tmp_path, redis_server):
    """README and configuration.md: with no redbeat_redis_url the schedule goes to the
    broker's Redis, and that is logged (beat's log, the CLI's standard error), with the
    password masked."""
    from support.processes import Cluster
    from support.redis_server import RedisServer

    class PasswordRedis(RedisServer):
        def client(self, **kwargs: object):  # type: ignore[no-untyped-def]
            return super().client(password="s3cret", **kwargs)

    with PasswordRedis(extra_args=["--requirepass", "s3cret"]) as broker_redis:
        broker = f"redis://:s3cret@127.0.0.1:{broker_redis.port}/0"
        cluster = Cluster(tmp_path, broker, broker, redbeat_redis_url=None)
        beat = cluster.beat("fallback")
        try:
            beat.wait_for("Leading as", timeout=120)
            beat.wait_for("redbeat_redis_url is not set")
        finally:
            cluster.stop()
        line = next(line for line in beat.log().splitlines()
                    if "redbeat_redis_url is not set" in line)
        assert "WARNING" in line and "s3cret" not in line
        assert (f"the schedule is kept in the broker's Redis (broker_url redis://:***@"
                f"127.0.0.1:{broker_redis.port}/0); set redbeat_redis_url") in line
        env = {**os.environ, "BEATAPP_CONF": json.dumps(cluster.conf),
               "BEATAPP_RESULTS_URL": broker,
               "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
        listed = forked.run(["-m", "celery", "-A", "beatapp", "redbeat", "list"],
                            str(tmp_path), env, timeout=120)
        assert listed.returncode == 0, listed.stderr
        assert "warning: redbeat_redis_url is not set: the schedule is kept in the " \
               "broker's Redis" in listed.stderr and "s3cret" not in listed.stderr

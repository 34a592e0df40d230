"""Celery settings of the app that would make entries unrunnable, checked before beat or
the CLI touches the schedule.

A fault of the app (a misspelled ``timezone``, a serializer that is not installed) is
every entry's fault at once: left to the tick, it would quarantine each entry that
follows the app's zone, or record a refused dispatch on every one, and leave them so
after the fix. celery-redbeat 2.4.2 refused to start on an unknown zone; so does this
package, with one line naming the setting, and it changes no data.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu import compression, serialization
from kombu.exceptions import SerializerNotInstalled

from .connection import url_problem
from .settings import SettingError, conf_lookup, ensure_conf


class UnrunnableApp(SettingError):
    """The app's own settings (not redbeat's) make entries unrunnable."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems, what="Celery setting")


class BadRedisUrl(SettingError):
    """The schedule's Redis URL holds what redis-py refuses (found before connecting:
    redis-py fails only at the first command, with a traceback per retry)."""

    def __init__(self, problem: str) -> None:
        super().__init__([problem], what="Redis URL")


def _zone_problem(app: Celery) -> str | None:
    try:
        app.timezone  # noqa: B018 - Celery resolves (and caches) the zone on first read
    except Exception as exc:  # ZoneInfoNotFoundError, or a zone backend's own error
        value = conf_lookup(app.conf, "timezone", None)
        return (f"timezone={value!r} is not a time zone ({type(exc).__name__}); give an "
                "IANA name such as 'Europe/Paris' (every entry without a zone of its own "
                "runs in it)")
    return None


def _serializer_problem(app: Celery) -> str | None:
    name = conf_lookup(app.conf, "task_serializer", None)
    if not name:
        return None
    try:
        serialization.dumps({}, serializer=name)
    except (SerializerNotInstalled, KeyError, TypeError, ValueError) as exc:
        return (f"task_serializer={name!r} cannot encode a message ({exc}); every dispatch "
                "would be refused")
    return None


def _compression_problem(app: Celery) -> str | None:
    name = conf_lookup(app.conf, "task_compression", None)
    if not name:
        return None
    try:
        compression.compress(b"", name)
    except (KeyError, TypeError, ValueError, ImportError) as exc:
        return (f"task_compression={name!r} is not a compression kombu knows ({exc!r}); "
                "every dispatch would be refused")
    return None


def app_problems(app: Celery) -> list[str]:
    """What in the app's own settings no entry can run with (empty when nothing)."""
    checks: list[Any] = [_zone_problem, _serializer_problem, _compression_problem]
    return [problem for check in checks if (problem := check(app)) is not None]


def check_redis_url(app: Celery) -> None:
    """Raise :class:`BadRedisUrl` when the URL the app's schedule is read from (the
    setting, or the CLI's ``--url``) has a parameter redis-py refuses."""
    problem = url_problem(ensure_conf(app).redis_url)
    if problem:
        raise BadRedisUrl(problem)


def check_app(app: Celery) -> None:
    """Raise :class:`UnrunnableApp` (a ``SettingError``, so a ``ValueError``) naming each
    setting of the app that makes entries unrunnable."""
    problems = app_problems(app)
    if problems:
        raise UnrunnableApp(problems)


__all__ = ["BadRedisUrl", "UnrunnableApp", "app_problems", "check_app", "check_redis_url"]

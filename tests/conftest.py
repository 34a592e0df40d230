"""Fixtures: a private redis-server per test worker, Celery apps wired to it, fakeredis.

Tests that need Redis semantics (Lua, expiry, locking, restarts) use ``redis_server``,
a real server this suite started on a free loopback port; it is flushed before each
test. Without ``redis-server`` on PATH those tests skip, except when
REDBEAT_REQUIRE_REDIS=1 (set by .ci/run), where they fail.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

from support import recording, senders  # noqa: E402
from support.redis_server import (  # noqa: E402
    RedisServer,
    cache_client_version,
    require_redis_server,
)
from support.warm import compile_ahead  # noqa: E402

senders.install()
cache_client_version()

# The property tests prove what is computed, not how fast: hypothesis's 200-ms deadline per
# example and its check that inputs are generated quickly fail them on a loaded machine.
settings.register_profile("redbeat", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("redbeat")


def pytest_configure(config: pytest.Config) -> None:
    """The session's first process compiles the modules once before any worker starts
    (support/warm.py); the workers find them compiled."""
    if not hasattr(config, "workerinput"):
        compile_ahead(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that run real processes (marked ``e2e``) go first, each file's order kept:
    they are the long ones, and with ``-n 2`` (and ``--dist worksteal``, pyproject.toml) a
    long test begun last would leave one worker running it alone while the other idles;
    begun first, the many short tests fill in around them.

    Every test of a module that uses the in-process scheduler kit (support/recording.py:
    its clock, its T0, its recording scheduler) is marked ``test_clock``: .ci/run runs
    those again with the host's clock moved a year ahead, across 04:00 UTC and across a
    DST change, where a test that mixes the kit's clock with the real one fails."""
    kit = {id(value) for name, value in vars(recording).items() if not name.startswith("_")
           and getattr(value, "__module__", recording.__name__) == recording.__name__}
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and kit & {id(value) for value in vars(module).values()}:
            item.add_marker("test_clock")
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


@pytest.fixture(autouse=True)
def only_the_store_talks_to_redis() -> Iterator[None]:
    """Fails the test during which a redbeat module other than the store sent a Redis
    command (support/senders.py): docs/design.md's "store.py holds every round trip"."""
    senders.take()  # whatever a background thread of an earlier test sent late
    yield
    found = sorted(set(senders.take()))
    if found:
        pytest.fail("Redis commands sent outside redbeat.store: "
                    + "; ".join(str(violation) for violation in found), pytrace=False)


def make_app(url: str, **conf: object) -> Celery:
    app = Celery("tests", broker="memory://", set_as_current=False)
    app.conf.redbeat_redis_url = url
    app.conf.timezone = "UTC"
    app.conf.update(conf)
    return app


@pytest.fixture(scope="session")
def redis_server_session() -> Iterator[RedisServer]:
    require_redis_server()
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_server(redis_server_session: RedisServer) -> RedisServer:
    if redis_server_session.process is None or redis_server_session.process.poll() is not None:
        redis_server_session.start()
    redis_server_session.client().flushall()
    return redis_server_session


@pytest.fixture
def app(redis_server: RedisServer) -> Celery:
    """An app on the private real Redis."""
    return make_app(redis_server.url)


@pytest.fixture
def fake_app() -> Celery:
    """An app whose Redis is fakeredis: for codec and entry units that need no Lua."""
    import fakeredis

    app = make_app("redis://fake:6379/0")
    app.redbeat_redis = fakeredis.FakeRedis(decode_responses=True)
    return app


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium per test worker, for every test that drives one: each opens
    its own context in it (its own cookies, viewport and colour scheme, closed after
    it), as isolated as a browser of its own, while a launch costs a second or two of
    CPU more than a context."""
    from support.web import browser_available, chromium

    browser_available()
    with chromium() as launched:
        yield launched

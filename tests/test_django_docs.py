"""docs/django.md, built and run: its files make a Django project whose views create and
delete entries on a real Redis, which `celery -A proj redbeat` (reading the same Django
settings through namespace="CELERY") lists, and whose task names it checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).parent.parent / "docs" / "django.md"
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```", re.S)

CLIENT = """
import json, django
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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "REDBEAT_"))}
    env.update(DJANGO_SETTINGS_MODULE="proj.settings", SCHEDULE_URL=redis_server.url,
               BROKER_URL="memory://", PYTHONPATH=f"{tmp_path}{os.pathsep}"
               f"{env.get('PYTHONPATH', '')}")
    return tmp_path, env


def test_the_django_page_works(project, redis_server):
    directory, env = project

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                              cwd=directory, env=env, timeout=60)

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
           "redbeat_redis_url?" in warned.stderr, warned.stderr

"""A django-celery-beat database made by django-celery-beat itself, for the importer's
tests: run as a script, in its own process (Django's set-up is process-wide).

    python tests/support/dcb.py DATABASE_URL

applies django-celery-beat's migrations to DATABASE_URL (``sqlite:///path`` or
``postgresql://user@host:port/db``), creates periodic tasks of every schedule type
with every option it has, then prints, as JSON, when django-celery-beat's own
``DatabaseScheduler`` entries (``ModelEntry``) would next run each enabled task:
``{"now": epoch, "next": {name: epoch}}``, from ``is_due()`` at ``now``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlsplit

SETTINGS = """
SECRET_KEY = "tests"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_celery_beat"]
DATABASES = {"default": %r}
"""


def database_settings(url: str) -> dict[str, object]:
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parts.path[1:]}
    return {"ENGINE": "django.db.backends.postgresql", "NAME": parts.path[1:],
            "USER": parts.username or "postgres", "HOST": parts.hostname,
            "PORT": str(parts.port)}


def fill() -> dict[str, float]:
    """Every schedule type and option; returns what DatabaseScheduler would do."""
    from celery import Celery
    from django_celery_beat import models as m
    from django_celery_beat.schedulers import ModelEntry

    now = datetime.now(timezone.utc)
    hourly = m.IntervalSchedule.objects.create(every=1, period="hours")
    seconds = m.IntervalSchedule.objects.create(every=90, period="seconds")
    days = m.IntervalSchedule.objects.create(every=2, period="days")
    morning = m.CrontabSchedule.objects.create(minute="30", hour="9", timezone="Europe/Paris")
    weekdays = m.CrontabSchedule.objects.create(minute="*/15", hour="8-17",
                                                day_of_week="mon-fri",
                                                timezone="America/New_York")
    monthly = m.CrontabSchedule.objects.create(minute="0", hour="0", day_of_month="1",
                                               month_of_year="*", timezone="UTC")
    sunrise = m.SolarSchedule.objects.create(event="sunrise", latitude="48.8566",
                                             longitude="2.3522")
    later = m.ClockedSchedule.objects.create(clocked_time=now + timedelta(days=3))
    task = m.PeriodicTask.objects.create
    task(name="hourly report", task="proj.tasks.report", interval=hourly,
         args=json.dumps([1, "two"]), kwargs=json.dumps({"three": 3}), queue="reports",
         exchange="reports", routing_key="reports.hourly", priority=7,
         headers=json.dumps({"tenant": "acme"}), description="the hourly report")
    task(name="poll", task="proj.tasks.poll", interval=seconds, expire_seconds=30,
         last_run_at=now - timedelta(seconds=40), total_run_count=12)
    task(name="every two days", task="proj.tasks.compact", interval=days,
         start_time=now + timedelta(days=1, hours=5))
    task(name="paris morning", task="proj.tasks.mail", crontab=morning,
         expires=now + timedelta(days=30))
    task(name="office hours", task="proj.tasks.sync", crontab=weekdays)
    task(name="monthly", task="proj.tasks.invoice", crontab=monthly,
         last_run_at=now - timedelta(days=3), total_run_count=40)
    task(name="sunrise", task="proj.tasks.lights", solar=sunrise)
    task(name="launch", task="proj.tasks.launch", clocked=later, one_off=True)
    task(name="once hourly", task="proj.tasks.once", interval=hourly, one_off=True)
    task(name="paused", task="proj.tasks.paused", interval=hourly, enabled=False)
    app = Celery("dcb", set_as_current=True)
    app.conf.timezone = "UTC"
    found: dict[str, float] = {}
    for model in m.PeriodicTask.objects.filter(enabled=True):
        entry = ModelEntry(model, app=app)
        state = entry.is_due()
        if not state.is_due:
            found[model.name] = datetime.now(timezone.utc).timestamp() + state.next
    return found


def main(url: str) -> None:
    directory = tempfile.mkdtemp(prefix="dcb-settings-")
    Path(directory, "dcbsettings.py").write_text(SETTINGS % (database_settings(url),))
    sys.path.insert(0, directory)
    os.environ["DJANGO_SETTINGS_MODULE"] = "dcbsettings"
    import django
    from django.core.management import call_command
    django.setup()
    call_command("migrate", verbosity=0)
    found = fill()
    print(json.dumps({"next": found}))


if __name__ == "__main__":
    main(sys.argv[1])

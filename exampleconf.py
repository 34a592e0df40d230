"""A runnable example: three entries (an interval, a crontab and an rrule).

    celery -A exampleconf beat -S redbeat.RedBeatScheduler -l info

Uses REDBEAT_REDIS_URL when set; otherwise starts an embedded redis-server for a first
try (logged as a development default) and uses it as the broker too.
"""

import logging
import os

from celery import Celery
from celery.schedules import crontab

from redbeat.embedded import embedded_redis_url
from redbeat.schedules import rrule

logging.basicConfig(level=logging.INFO)

redis_url = os.environ.get("REDBEAT_REDIS_URL") or embedded_redis_url()

app = Celery("exampleconf", broker=os.environ.get("CELERY_BROKER_URL", redis_url))
app.conf.update(
    redbeat_redis_url=redis_url,
    redbeat_lock_timeout=10,
    beat_max_loop_interval=5,
    timezone="UTC",
    beat_schedule={
        "add-every-5-seconds": {"task": "exampleconf.add", "schedule": 5.0, "args": (16, 16)},
        "report-every-minute": {"task": "exampleconf.report", "schedule": crontab(minute="*")},
        "ping-every-10-seconds": {
            "task": "exampleconf.ping",
            "schedule": rrule("SECONDLY", interval=10),
        },
    },
)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def report() -> str:
    return "report"


@app.task
def ping() -> str:
    return "pong"

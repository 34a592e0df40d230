"""A runnable example: three entries (an interval, a crontab and an rrule).

    celery -A exampleconf beat -S redbeat.RedBeatScheduler -l info
    celery -A exampleconf worker -l info      # runs what beat sends
    celery -A exampleconf redbeat list        # the schedule beat keeps

Uses REDBEAT_REDIS_URL when set; otherwise an embedded redis-server for a first try
(logged as a development default), also the broker: the first of these processes
starts it, the others share it, and it stops when the last of them exits.
"""

import logging
import os

from celery import Celery
from celery.schedules import crontab

from redbeat.embedded import embedded_redis
from redbeat.schedules import rrule

logging.basicConfig(level=logging.INFO)

redis_url = os.environ.get("REDBEAT_REDIS_URL")
broker_url = os.environ.get("CELERY_BROKER_URL", redis_url)
if not redis_url:
    embedded = embedded_redis(__file__)  # one server for this project's processes
    redis_url, broker_url = embedded.url, broker_url or embedded.broker_url

app = Celery("exampleconf", broker=broker_url)
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

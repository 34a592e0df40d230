"""The minute burst, run in the interpreter being measured: ours, celery-redbeat 2.4.2's,
or django-celery-beat's (its own venv).

Usage:
    python minute_worker.py redbeat REDIS_URL BROKER_URL QUEUE DUE BURSTS
    python minute_worker.py django-setup DATABASE N DUE
    python minute_worker.py django DATABASE BROKER_URL QUEUE DUE BURSTS

``DUE`` entries on the crontab ``* * * * *`` are among N; at each minute boundary all of
them fall due, and the package's own, unchanged scheduler runs the real beat loop (tick,
sleep what it returns), publishing for real to a Redis broker (queue ``QUEUE``). The
figure per burst is the time from the minute boundary until the broker holds all DUE
messages; the first burst is not measured (a beat that has run before). Prints one JSON
object.

For the redbeat packages the N - DUE other entries are already in Redis (written raw
by the driver, monthly); the crontabs are saved here through the package's own
``RedBeatSchedulerEntry.save()``. For django-celery-beat, ``django-setup`` makes its
tables on SQLite with its own migrations and fills them through its models (N - DUE
monthly intervals, DUE tasks on one ``* * * * *`` crontab); ``django`` runs its
``DatabaseScheduler`` on them.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import redis
from celery import Celery

CRON_TASK = "tasks.minutely"


def make_app(broker_url: str, queue: str, **conf: Any) -> Celery:
    app = Celery("minute", broker=broker_url, set_as_current=False)
    app.conf.update(timezone="UTC", task_default_queue=queue, broker_connection_timeout=10,
                    beat_max_loop_interval=5, **conf)
    return app


def holds(broker: redis.Redis, queue: str, count: int, within: float) -> bool:
    """Whether the queue holds ``count`` messages, waiting up to ``within`` seconds."""
    deadline = time.time() + within
    while broker.llen(queue) < count:
        if time.time() > deadline:
            return False
        time.sleep(0.001)
    return True


def redis_cpu(client: redis.Redis) -> float:
    """The Redis server's CPU seconds so far (user and system, all its threads)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def beat_loop(scheduler: Any, broker: redis.Redis, queue: str, due: int,
              bursts: int) -> dict[str, Any]:
    """The real beat loop (tick, sleep what it returns) across ``bursts + 1`` minute
    boundaries; per measured burst, boundary -> the broker holds all ``due`` messages,
    and the CPU it took: this process's (every thread) and the Redis server's (the
    schedule's and the broker's, when they share it). On a loaded machine the wall time
    waits for the CPU; the CPU time does not."""
    lags, cpu, server_cpu = [], [], []
    for burst in range(bursts + 1):
        boundary = (int(time.time()) // 60 + 1) * 60.0
        ended = None
        started: tuple[float, float] | None = None
        while time.time() < boundary + 600:
            if started is None and time.time() >= boundary - 0.5:
                started = time.process_time(), redis_cpu(broker)  # nothing due yet
            interval = scheduler.tick()
            now = time.time()
            if now < boundary:
                time.sleep(max(0.0, min(interval or 0.0, boundary - now,
                                        max(0.0, boundary - 0.5 - now) or 1.0)))
                continue
            if interval and holds(broker, queue, due, within=min(interval, 5.0)):
                # the loop sleeps now (the sleep spent watching the broker): the burst
                # has been sent, and the broker holds all of it
                ended = time.time()
                break
        if ended is None:
            raise RuntimeError(f"burst {burst}: {broker.llen(queue)} of {due} in the broker")
        if burst and started is not None:
            lags.append(ended - boundary)
            cpu.append(time.process_time() - started[0])
            server_cpu.append(redis_cpu(broker) - started[1])
        broker.delete(queue)
    lags.sort()
    return {"due": due, "bursts": len(lags), "lags_ms": [lag * 1000 for lag in lags],
            "seconds": lags[len(lags) // 2], "cpu_ms": [c * 1000 for c in cpu],
            "redis_cpu_ms": [c * 1000 for c in server_cpu]}


def run_redbeat(url: str, broker_url: str, queue: str, due: int, bursts: int) -> dict[str, Any]:
    from celery.schedules import crontab
    from celery.signals import beat_init

    from redbeat import RedBeatScheduler, RedBeatSchedulerEntry

    app = make_app(broker_url, queue, redbeat_redis_url=url, redbeat_lock_timeout=300)
    for i in range(due):
        RedBeatSchedulerEntry(f"minutely{i}", CRON_TASK, crontab(), app=app).save()
    scheduler = RedBeatScheduler(app=app)
    scheduler.producer  # noqa: B018 - connected before measuring, as beat is

    class Service:
        def __init__(self, scheduler: Any) -> None:
            self.scheduler = scheduler

    beat_init.send(sender=Service(scheduler))  # celery-redbeat's lock; ours: its tick
    scheduler.tick()
    broker = redis.Redis.from_url(broker_url)
    try:
        return beat_loop(scheduler, broker, queue, due, bursts)
    finally:
        scheduler.close()
        client = redis.Redis.from_url(url)
        keys = [f"redbeat:minutely{i}" for i in range(due)]
        client.delete(*keys)
        client.zrem("redbeat::schedule", *keys)


def setup_django(database: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django_celery_beat"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": database}},
        USE_TZ=True, TIME_ZONE="UTC", DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    )
    django.setup()


def django_tables(database: str, size: int, due: int) -> dict[str, Any]:
    """django-celery-beat's tables made by its own migrations, filled through its models."""
    setup_django(database)
    from django.core.management import call_command
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

    began = time.perf_counter()
    call_command("migrate", verbosity=0)
    monthly, _ = IntervalSchedule.objects.get_or_create(every=30, period=IntervalSchedule.DAYS)
    minutely, _ = CrontabSchedule.objects.get_or_create(
        minute="*", hour="*", day_of_week="*", day_of_month="*", month_of_year="*",
        timezone="UTC")
    PeriodicTask.objects.bulk_create(
        [PeriodicTask(name=f"n{i}", task="tasks.idle", interval=monthly)
         for i in range(size - due)], batch_size=1000)
    PeriodicTask.objects.bulk_create(
        [PeriodicTask(name=f"minutely{i}", task=CRON_TASK, crontab=minutely)
         for i in range(due)], batch_size=1000)
    PeriodicTask.objects.all().update(last_run_at=None)
    from django_celery_beat.models import PeriodicTasks

    PeriodicTasks.update_changed()
    return {"tasks": PeriodicTask.objects.count(), "seconds": time.perf_counter() - began}


def run_django(database: str, broker_url: str, queue: str, due: int,
               bursts: int) -> dict[str, Any]:
    setup_django(database)
    from django_celery_beat.schedulers import DatabaseScheduler

    app = make_app(broker_url, queue)
    scheduler = DatabaseScheduler(app=app)
    scheduler.producer  # noqa: B018
    broker = redis.Redis.from_url(broker_url)
    try:
        return beat_loop(scheduler, broker, queue, due, bursts)
    finally:
        scheduler.close()


def main() -> None:
    kind, *rest = sys.argv[1:]
    if kind == "redbeat":
        url, broker_url, queue, due, bursts = rest
        result = run_redbeat(url, broker_url, queue, int(due), int(bursts))
    elif kind == "django-setup":
        database, size, due = rest
        result = django_tables(database, int(size), int(due))
    elif kind == "django":
        database, broker_url, queue, due, bursts = rest
        result = run_django(database, broker_url, queue, int(due), int(bursts))
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

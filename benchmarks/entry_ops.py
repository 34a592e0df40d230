"""Single-entry calls, timed in the interpreter being measured (ours or celery-redbeat's).

Usage: python entry_ops.py KIND REDIS_URL COUNT; prints one JSON object: for each call,
microseconds per call (the mean over COUNT calls) and round trips per call.

KIND is ``interval`` (every 60 s) or ``crontab`` (``*/5``). The calls, each COUNT times on
COUNT entries of this run's own names: ``save`` of a new entry, ``resave`` of the same
entries built afresh (what an application that saves its entries at every start does),
``from_key`` and ``delete``. Each entry is built with a schedule object and arguments
of its own, as an application builds them. Only the public API both packages share is
used. Round trips
are counted as worker.py counts them: each request redis-py writes is one.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

import redis.connection
from celery import Celery
from celery.schedules import crontab, schedule

from redbeat import RedBeatSchedulerEntry

WARM_UP = 200


class Trips:
    count = 0

    @classmethod
    def install(cls) -> None:
        send = redis.connection.AbstractConnection.send_packed_command

        def counted(conn, command, check_health=True):  # type: ignore[no-untyped-def]
            cls.count += 1
            return send(conn, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


def main() -> None:
    kind, url, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    app = Celery("bench", broker="memory://", set_as_current=False)
    app.conf.update(redbeat_redis_url=url, timezone="UTC")
    Trips.install()
    run = uuid.uuid4().hex[:8]

    def build(name: str) -> Any:
        """As an application builds its entries: a schedule object of its own and
        arguments of its own for each (nothing a package could keep from the last one)."""
        every = schedule(60.0) if kind == "interval" else crontab(minute="*/5")
        return RedBeatSchedulerEntry(name, "tasks.report", every, args=[name, 2],
                                     kwargs={"to": "ops"}, app=app)

    def timed(names: list[str], call: Any) -> dict[str, float]:
        trips = Trips.count
        started = time.perf_counter()
        for name in names:
            call(name)
        elapsed = time.perf_counter() - started
        return {"us": elapsed / len(names) * 1e6, "round_trips": (Trips.count - trips) / len(names)}

    def key(name: str) -> str:
        return build(name).key

    warm = [f"warm-{run}-{i}" for i in range(WARM_UP)]  # connection, scripts, imports
    for name in warm:
        build(name).save()
        RedBeatSchedulerEntry.from_key(key(name), app=app).delete()
    names = [f"ops-{run}-{i}" for i in range(count)]
    keys = {name: key(name) for name in names}
    result = {
        "save": timed(names, lambda name: build(name).save()),
        "resave": timed(names, lambda name: build(name).save()),
        "from_key": timed(names, lambda name: RedBeatSchedulerEntry.from_key(keys[name], app=app)),
    }
    loaded = {name: RedBeatSchedulerEntry.from_key(keys[name], app=app) for name in names}
    result["delete"] = timed(names, lambda name: loaded[name].delete())
    print(json.dumps(result))


if __name__ == "__main__":
    main()

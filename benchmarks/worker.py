"""One measurement, run in the interpreter being measured (ours or celery-redbeat's).

Usage: python worker.py SCENARIO REDIS_URL [K]; prints one JSON object.

Only the public API is used (``RedBeatScheduler``, ``RedBeatSchedulerEntry``, Celery's
``beat_init`` signal), so the same file measures both implementations. Sends go to a
counting stand-in for ``apply_async``: the broker is not what is measured.

Round trips are counted client side: every request redis-py writes goes through
``Connection.send_packed_command`` once (a pipeline or a script call is one request),
so the patched method counts round trips exactly; the connection handshake redis-py
sends on each new connection is counted separately. The largest reply is the largest
number of elements (flattened) in one parsed reply: one of our tick replies carries
five elements per due entry (key, score, definition, meta, history).
"""

from __future__ import annotations

import json
import resource
import sys
import time

import redis
import redis.connection
from celery import Celery
from celery.signals import beat_init

from redbeat import RedBeatScheduler

COUNTS = {"round_trips": 0, "largest_reply": 0, "handshake_round_trips": 0}
_IN_HANDSHAKE = [False]


def _elements(reply: object) -> int:
    if isinstance(reply, (list, tuple)):
        return sum(_elements(item) for item in reply) or 1
    return 1


def _install_counters() -> None:
    send = redis.connection.AbstractConnection.send_packed_command
    read = redis.connection.AbstractConnection.read_response
    on_connect = redis.connection.AbstractConnection.on_connect_check_health

    def counted_send(self, command, check_health=True):  # type: ignore[no-untyped-def]
        # redis-py's connection handshake (HELLO, CLIENT SETINFO...) is counted apart:
        # it is paid once per connection, by any client, not per scheduler operation.
        COUNTS["handshake_round_trips" if _IN_HANDSHAKE[0] else "round_trips"] += 1
        return send(self, command, check_health)

    def counted_on_connect(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _IN_HANDSHAKE[0] = True
        try:
            return on_connect(self, *args, **kwargs)
        finally:
            _IN_HANDSHAKE[0] = False

    def measured_read(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        reply = read(self, *args, **kwargs)
        COUNTS["largest_reply"] = max(COUNTS["largest_reply"], _elements(reply))
        return reply

    redis.connection.AbstractConnection.send_packed_command = counted_send
    redis.connection.AbstractConnection.on_connect_check_health = counted_on_connect
    redis.connection.AbstractConnection.read_response = measured_read


def reset() -> None:
    for name in COUNTS:
        COUNTS[name] = 0


class Counting(RedBeatScheduler):
    """The real scheduler with a counting stand-in for the broker publish."""

    sent: list[tuple[str, float]] = []

    def apply_async(self, entry, producer=None, advance=True, **kwargs):  # type: ignore[no-untyped-def]
        Counting.sent.append((entry.name, time.time()))
        return None


class Service:
    def __init__(self, scheduler: RedBeatScheduler) -> None:
        self.scheduler = scheduler


def make_app(url: str, statics: int = 0) -> Celery:
    app = Celery("bench", broker="memory://", set_as_current=False)
    app.conf.update(
        redbeat_redis_url=url,
        timezone="UTC",
        beat_max_loop_interval=5,
        redbeat_lock_timeout=30,
        beat_schedule={
            f"static{i}": {"task": "tasks.s", "schedule": 3600.0} for i in range(statics)
        },
    )
    return app


def start(app: Celery) -> RedBeatScheduler:
    """Construct and take the lock, the way `celery beat` does for either package."""
    scheduler = Counting(app=app)
    beat_init.send(sender=Service(scheduler))  # celery-redbeat takes its lock here
    scheduler.tick()  # ours takes the lock (and syncs statics) in its first tick
    return scheduler


def add_due(url: str, count: int, tag: str) -> list[str]:
    """``count`` entries due now, written raw in the shared format (not measured)."""
    client = redis.Redis.from_url(url)
    now = time.time()
    last = time.gmtime(now - 7200)
    meta = json.dumps(
        {
            "last_run_at": {
                "__type__": "datetime",
                "year": last.tm_year,
                "month": last.tm_mon,
                "day": last.tm_mday,
                "hour": last.tm_hour,
                "minute": last.tm_min,
                "second": last.tm_sec,
                "microsecond": 0,
                "timezone": "UTC",
            },
            "total_run_count": 1,
        }
    )
    names = [f"{tag}{i}" for i in range(count)]
    for first in range(0, count, 5000):
        with client.pipeline(transaction=False) as pipe:
            for name in names[first : first + 5000]:
                pipe.hset(
                    f"redbeat:{name}",
                    mapping={
                        "definition": json.dumps(
                            {
                                "name": name,
                                "task": "tasks.due",
                                "args": None,
                                "kwargs": {},
                                "options": {},
                                "schedule": {
                                    "__type__": "interval",
                                    "every": 3600.0,
                                    "relative": False,
                                },
                                "enabled": True,
                            }
                        ),
                        "meta": meta,
                    },
                )
                pipe.zadd("redbeat::schedule", {f"redbeat:{name}": int(now) - 1})
            pipe.execute()
    return names


def scenario_startup(url: str, statics: int) -> dict:
    app = make_app(url, statics)
    reset()
    began = time.perf_counter()
    scheduler = start(app)
    elapsed = time.perf_counter() - began
    result = {"seconds": elapsed, **COUNTS}
    scheduler.close()
    return result


def scenario_idle(url: str, _: int) -> dict:
    scheduler = start(make_app(url))
    scheduler.tick()
    timings, trips = [], []
    for _ in range(20):
        reset()
        began = time.perf_counter()
        scheduler.tick()
        timings.append(time.perf_counter() - began)
        trips.append(COUNTS["round_trips"])
    scheduler.close()
    timings.sort()
    return {"seconds": timings[len(timings) // 2], "round_trips": max(trips)}


def scenario_busy(url: str, due: int) -> dict:
    scheduler = start(make_app(url))
    scheduler.tick()
    add_due(url, due, "due")
    Counting.sent.clear()
    reset()
    began = time.perf_counter()
    ticks = 0
    while len(Counting.sent) < due and ticks < 10_000:
        scheduler.tick()
        ticks += 1
    elapsed = time.perf_counter() - began
    result = {
        "seconds": elapsed,
        "sent": len(Counting.sent),
        "ticks": ticks,
        "per_second": len(Counting.sent) / elapsed,
        **COUNTS,
        "round_trips_per_tick": COUNTS["round_trips"] / max(ticks, 1),
    }
    scheduler.close()
    return result


def scenario_lag(url: str, count: int) -> dict:
    """``count`` entries due at staggered times over ~10 s, run through the real loop."""
    client = redis.Redis.from_url(url)
    scheduler = start(make_app(url))
    base = time.time() + 2.0
    due_at = {}
    with client.pipeline(transaction=False) as pipe:
        for i in range(count):
            name = f"lag{i}"
            due = base + i * (10.0 / count)
            due_at[name] = due
            last = due - 3600
            moment = time.gmtime(last)
            micro = int(round((last % 1) * 1_000_000)) % 1_000_000
            pipe.hset(
                f"redbeat:{name}",
                mapping={
                    "definition": json.dumps(
                        {
                            "name": name,
                            "task": "tasks.lag",
                            "args": None,
                            "kwargs": {},
                            "options": {},
                            "schedule": {
                                "__type__": "interval",
                                "every": 3600.0,
                                "relative": False,
                            },
                            "enabled": True,
                        }
                    ),
                    "meta": json.dumps(
                        {
                            "last_run_at": {
                                "__type__": "datetime",
                                "year": moment.tm_year,
                                "month": moment.tm_mon,
                                "day": moment.tm_mday,
                                "hour": moment.tm_hour,
                                "minute": moment.tm_min,
                                "second": moment.tm_sec,
                                "microsecond": micro,
                                "timezone": "UTC",
                            }
                        }
                    ),
                },
            )
            pipe.zadd("redbeat::schedule", {f"redbeat:{name}": due})
        pipe.execute()
    Counting.sent.clear()
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    end = base + 11.0
    while time.time() < end:
        interval = scheduler.tick()
        time.sleep(max(0.0, min(interval or 0.0, end - time.time())))
    lags = sorted(max(0.0, sent - due_at[name]) for name, sent in Counting.sent if name in due_at)
    # idle: nothing due for 5 s through the same loop
    idle_began = time.time()
    cpu_idle_before = resource.getrusage(resource.RUSAGE_SELF)
    while time.time() < idle_began + 5:
        interval = scheduler.tick()
        time.sleep(max(0.0, min(interval or 0.0, idle_began + 5 - time.time())))
    cpu_idle_after = resource.getrusage(resource.RUSAGE_SELF)
    scheduler.close()

    def cpu(a, b):  # type: ignore[no-untyped-def]
        return (b.ru_utime - a.ru_utime) + (b.ru_stime - a.ru_stime)

    def pct(p: float) -> float:
        return lags[min(len(lags) - 1, int(p * len(lags)))] if lags else float("nan")

    return {
        "sent": len(lags),
        "p50_ms": pct(0.5) * 1000,
        "p99_ms": pct(0.99) * 1000,
        "max_ms": (lags[-1] if lags else float("nan")) * 1000,
        "loop_cpu_s": cpu(cpu_before, cpu_idle_before),
        "idle_cpu_percent": cpu(cpu_idle_before, cpu_idle_after) / 5 * 100,
    }


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Not ru_maxrss: Linux carries that over
    from the parent across fork and exec, so it would report the driver's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


SCENARIOS = {
    "startup": scenario_startup,
    "idle": scenario_idle,
    "busy": scenario_busy,
    "lag": scenario_lag,
}


def main() -> None:
    scenario, url = sys.argv[1], sys.argv[2]
    argument = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    _install_counters()
    result = SCENARIOS[scenario](url, argument)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""One measurement, run in the interpreter being measured (ours or celery-redbeat's).

Usage: python worker.py SCENARIO REDIS_URL [ARGUMENT...]; prints one JSON object.

Only the public API is used (``RedBeatScheduler``, ``RedBeatSchedulerEntry``'s data
format, Celery's ``beat_init`` signal and ``Scheduler.send_task``), so the same file
measures both implementations.

Dispatch is a counting stand-in: ``send_task`` (what Celery's ``Scheduler.apply_async``
calls to publish a task that is not registered in the app) records the entry and the
time and publishes nothing. Everything before it runs for real in both packages,
``apply_async`` included, so celery-redbeat still advances each entry there (its
``reserve`` writes the new ``last_run_at`` to Redis) and ours sends its claimed slots
through it. The broker is not what is measured.

Round trips are counted client side: every request redis-py writes passes once through
``AbstractConnection.send_packed_command`` (a pipeline or a script call is one request),
so counting those calls counts round trips exactly; the handshake redis-py sends when it
opens a connection (HELLO, CLIENT SETINFO) is counted apart. As a cross-check the
server's own counters are read before and after (``INFO commandstats`` and
``INFO stats``): they count commands executed, where a pipeline of n commands is n and
a script is 1 plus the commands it calls. The largest reply is the largest parsed reply
to one command: its number of elements (flattened) and its payload bytes.
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import redis
import redis.connection
from celery import Celery
from celery.schedules import schedule as celery_schedule
from celery.signals import beat_init

from redbeat import RedBeatScheduler, RedBeatSchedulerEntry

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dataset  # noqa: E402  (benchmarks/dataset.py)


class Meter:
    """Client-side counters, patched into redis-py's connection class."""

    def __init__(self) -> None:
        self.paused = False
        self.in_handshake = False
        self.reset()

    def reset(self) -> None:
        self.round_trips = 0
        self.handshake_round_trips = 0
        self.largest_reply_elements = 0
        self.largest_reply_bytes = 0

    def figures(self) -> dict[str, int]:
        return {
            "round_trips": self.round_trips,
            "handshake_round_trips": self.handshake_round_trips,
            "largest_reply_elements": self.largest_reply_elements,
            "largest_reply_bytes": self.largest_reply_bytes,
        }

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        self.paused = True
        try:
            yield
        finally:
            self.paused = False

    def install(self) -> None:
        cls = redis.connection.AbstractConnection
        original_send = cls.send_packed_command
        original_read = cls.read_response
        original_handshake = cls.on_connect_check_health
        meter = self

        def send_packed_command(conn, command, check_health=True):  # type: ignore[no-untyped-def]
            if not meter.paused:
                if meter.in_handshake:
                    meter.handshake_round_trips += 1
                else:
                    meter.round_trips += 1
            return original_send(conn, command, check_health)

        def on_connect_check_health(conn, *args, **kwargs):  # type: ignore[no-untyped-def]
            meter.in_handshake = True
            try:
                return original_handshake(conn, *args, **kwargs)
            finally:
                meter.in_handshake = False

        def read_response(conn, *args, **kwargs):  # type: ignore[no-untyped-def]
            reply = original_read(conn, *args, **kwargs)
            if not meter.paused:
                elements, size = reply_size(reply)
                if elements > meter.largest_reply_elements:
                    meter.largest_reply_elements = elements
                if size > meter.largest_reply_bytes:
                    meter.largest_reply_bytes = size
            return reply

        cls.send_packed_command = send_packed_command  # type: ignore[method-assign]
        cls.read_response = read_response  # type: ignore[method-assign]
        cls.on_connect_check_health = on_connect_check_health  # type: ignore[method-assign]


METER = Meter()


def reply_size(reply: object) -> tuple[int, int]:
    """(elements, payload bytes) of a parsed reply; nested arrays are flattened."""
    if isinstance(reply, (bytes, str)):
        return 1, len(reply)
    if isinstance(reply, (list, tuple)):
        elements = size = 0
        for item in reply:
            e, s = reply_size(item)
            elements += e
            size += s
        return max(elements, 1), size
    if isinstance(reply, dict):
        e1, s1 = reply_size(list(reply.keys()))
        e2, s2 = reply_size(list(reply.values()))
        return e1 + e2, s1 + s2
    return 1, 8


class ServerCounters:
    """Commands the server executed between two snapshots, from its own counters."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.before: tuple[dict[str, int], int] = ({}, 0)

    def _snapshot(self) -> tuple[dict[str, int], int]:
        with METER.pause():
            info = self.client.execute_command("INFO", "commandstats", "stats")
        calls = {
            name[len("cmdstat_"):]: stats["calls"]
            for name, stats in info.items()
            if name.startswith("cmdstat_")
        }
        return calls, int(info["total_commands_processed"])

    def start(self) -> None:
        self.before = self._snapshot()

    def stop(self) -> dict[str, Any]:
        calls, total = self._snapshot()
        delta = {name: n - self.before[0].get(name, 0) for name, n in calls.items()}
        delta["info"] = delta.get("info", 0) - 1  # the first snapshot's own INFO
        delta = {name: n for name, n in delta.items() if n}
        return {
            "server_commands": sum(delta.values()),
            "server_total_commands_processed": total - self.before[1] - 1,
            "server_commands_by_name": dict(sorted(delta.items(), key=lambda kv: -kv[1])),
        }


class Counting(RedBeatScheduler):
    """The real scheduler; only the broker publish is replaced by a counter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sent: list[tuple[str, float]] = []
        self._sending: str | None = None
        super().__init__(*args, **kwargs)

    def apply_async(self, entry, producer=None, advance=True, **kwargs):  # type: ignore[no-untyped-def]
        self._sending = entry.name  # remembered for send_task, which gets no entry
        return super().apply_async(entry, producer, advance, **kwargs)

    def send_task(self, *args: Any, **kwargs: Any) -> None:
        self.sent.append((self._sending or "?", time.time()))
        return None


class Service:
    """What ``beat_init`` receivers look at: the beat service holding the scheduler."""

    def __init__(self, scheduler: RedBeatScheduler) -> None:
        self.scheduler = scheduler


def make_app(url: str, statics: int = 0) -> Celery:
    app = Celery("bench", broker="memory://", set_as_current=False)
    app.conf.update(
        redbeat_redis_url=url,
        timezone="UTC",
        beat_max_loop_interval=5,
        # long enough for either package's slowest tick (celery-redbeat renews the lock
        # only between ticks: a 10,000 burst on a slow machine outlasted 30 s, and its
        # tick raised LockNotOwnedError): dispatch is measured here, not failover
        redbeat_lock_timeout=300,
        beat_schedule={
            f"static{i}": {"task": "tasks.static", "schedule": 3600.0} for i in range(statics)
        },
    )
    return app


def take_lock(scheduler: RedBeatScheduler) -> float:
    """Take the lock the way ``celery beat`` does for either package: celery-redbeat in
    its ``beat_init`` receiver, ours in its first tick (which returns after acquiring)."""
    beat_init.send(sender=Service(scheduler))
    return scheduler.tick()


def start(app: Celery) -> Counting:
    scheduler = Counting(app=app)
    scheduler.producer  # noqa: B018 - connect the (in-memory) broker before measuring
    take_lock(scheduler)
    scheduler.tick()
    return scheduler


def add_due(url: str, count: int) -> None:
    """``count`` entries due a second ago, written raw in the shared format (unmeasured)."""
    client = redis.Redis.from_url(url)
    with METER.pause():
        dataset.add_due(client, count)
    client.close()


def scenario_startup(url: str, statics: int) -> dict[str, Any]:
    """Construct the scheduler and sync ``statics`` entries from beat_schedule, then take
    the lock and run the first tick: what ``celery beat`` does before it schedules."""
    app = make_app(url, statics)
    server = ServerCounters(url)
    METER.reset()
    server.start()
    began = time.perf_counter()
    scheduler = Counting(app=app)
    constructed = time.perf_counter()
    with METER.pause():
        scheduler.producer  # noqa: B018 - the broker connection is not what we measure
    resumed = time.perf_counter()
    take_lock(scheduler)
    ended = time.perf_counter()
    result = {
        "seconds": (constructed - began) + (ended - resumed),
        "construct_seconds": constructed - began,
        "lock_and_first_tick_seconds": ended - resumed,
        **METER.figures(),
        **server.stop(),
    }
    scheduler.close()
    return result


def idle_ticks(scheduler: Counting, url: str, ticks: int) -> dict[str, Any]:
    """``ticks`` ticks with nothing due: median latency, most round trips in any one
    tick, server commands per tick, the shortest sleep the ticks returned."""
    timings, trips, largest, sleeps = [], [], [], []
    server = ServerCounters(url)
    server.start()
    for _ in range(ticks):
        METER.reset()
        began = time.perf_counter()
        sleeps.append(scheduler.tick())
        timings.append(time.perf_counter() - began)
        trips.append(METER.round_trips)
        largest.append(METER.largest_reply_elements)
    counted = server.stop()
    scheduler.close()
    timings.sort()
    return {
        "seconds": timings[len(timings) // 2],
        "round_trips": max(trips),
        "round_trips_min": min(trips),
        "largest_reply_elements": max(largest),
        "server_commands_per_tick": counted["server_commands"] / ticks,
        "server_commands_by_name": counted["server_commands_by_name"],
        "sleep_min_s": min(sleeps),
        "sent": len(scheduler.sent),
    }


def scenario_idle(url: str, _: int) -> dict[str, Any]:
    return idle_ticks(start(make_app(url)), url, 50)


#: Entries of the unmeasured busy tick that precedes a measured one.
WARM_UP = 1_000


def warm_up(scheduler: Counting, url: str) -> None:
    """One unmeasured busy tick on other entries, removed afterwards. A beat process that
    has been up a while has been through its dispatch path before: the first call's
    costs (Celery's, kombu's, either package's) are not what a tick costs. The measured
    entries are still new to the process (nothing about them is cached)."""
    client = redis.Redis.from_url(url)
    with METER.pause():
        keys = dataset.add_due(client, WARM_UP, tag="warm")
    scheduler.sent.clear()
    for _ in range(1_000):
        if len(scheduler.sent) >= WARM_UP:
            break
        scheduler.tick()
    with METER.pause():
        client.delete(*keys)
        client.zrem(dataset.SCHEDULE_KEY, *keys)
    client.close()


def scenario_busy(url: str, due: int) -> dict[str, Any]:
    """``due`` entries due at once, after a warm-up (see :func:`warm_up`); tick until all
    are sent (a backlog when large)."""
    scheduler = start(make_app(url))
    warm_up(scheduler, url)
    add_due(url, due)
    scheduler.sent.clear()
    server = ServerCounters(url)
    METER.reset()
    server.start()
    per_tick: list[int] = []
    began = time.perf_counter()
    ticks = 0
    while len(scheduler.sent) < due and ticks < 100_000:
        before = METER.round_trips
        scheduler.tick()
        per_tick.append(METER.round_trips - before)
        ticks += 1
    elapsed = time.perf_counter() - began
    counted = server.stop()
    with METER.pause():
        entry_bytes = server.client.memory_usage("redbeat:due0", samples=0)
    names = [name for name, _ in scheduler.sent]
    result = {
        "entry_bytes_after_run": entry_bytes,
        "seconds": elapsed,
        "due": due,
        "sent": len(names),
        "distinct_sent": len(set(names)),
        "ticks": ticks,
        "per_second": len(names) / elapsed if elapsed else float("nan"),
        **METER.figures(),
        "round_trips_per_tick": METER.round_trips / max(ticks, 1),
        "round_trips_max_tick": max(per_tick, default=0),
        **counted,
    }
    scheduler.close()
    return result


def scenario_stale(url: str, count: int) -> dict[str, Any]:
    """``count`` entries scored as due that must not run (half disabled, half scored
    early): after one tick, what an idle tick costs with them in the schedule."""
    scheduler = start(make_app(url))
    client = redis.Redis.from_url(url)
    with METER.pause():
        dataset.add_stale(client, count)
    client.close()
    scheduler.tick()  # the first look at them (ours parks or corrects them here)
    return idle_ticks(scheduler, url, 20)


def scenario_lag(
    url: str, count: int, window: float = 10.0, celery_redbeat_format: int = 0
) -> dict[str, Any]:
    """``count`` entries due at staggered times over ``window`` seconds, run through the
    real beat loop (tick, sleep what it returns); then 5 s with nothing due for the idle
    CPU (half the window when shorter). The entries are saved through the package's own
    entry API, or with ``celery_redbeat_format`` written raw the way celery-redbeat 2.4.2
    stores them (scores truncated to the second), as a celery-redbeat client sharing the
    schedule would."""
    scheduler = start(make_app(url))
    base = time.time() + 2.0
    plan = [(f"lag{i}", base + i * (window / count)) for i in range(count)]
    due_at = dict(plan)
    # Saved through the package's own entry API, so each implementation stores the due
    # time its own way (celery-redbeat's scores are whole seconds, ours milliseconds).
    hourly = celery_schedule(timedelta(hours=1), app=scheduler.app)
    if celery_redbeat_format:
        client = redis.Redis.from_url(url)
        with METER.pause():
            dataset.write_entries(client, plan, 3600.0, "tasks.lag", whole_seconds=True)
        client.close()
    for name, due in plan if not celery_redbeat_format else ():
        RedBeatSchedulerEntry(
            name,
            "tasks.lag",
            hourly,
            app=scheduler.app,
            last_run_at=datetime.fromtimestamp(due - 3600, tz=timezone.utc),
        ).save()
    scheduler.sent.clear()
    end = base + window + 1.0
    ticks = 0
    while time.time() < end:
        interval = scheduler.tick()
        ticks += 1
        time.sleep(max(0.0, min(interval or 0.0, end - time.time())))
    lags = sorted(sent - due_at[name] for name, sent in scheduler.sent if name in due_at)
    names = [name for name, _ in scheduler.sent]
    idle_for = min(5.0, window / 2)
    idle_began = time.time()
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    idle_ticks = 0
    while time.time() < idle_began + idle_for:
        interval = scheduler.tick()
        idle_ticks += 1
        time.sleep(max(0.0, min(interval or 0.0, idle_began + idle_for - time.time())))
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    idle_wall = time.time() - idle_began
    scheduler.close()
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)

    def pct(p: float) -> float:
        return lags[min(len(lags) - 1, int(p * len(lags)))] * 1000 if lags else float("nan")

    return {
        "expected": count,
        "sent": len(names),
        "distinct_sent": len(set(names)),
        "early": sum(1 for lag in lags if lag < 0),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "max_ms": lags[-1] * 1000 if lags else float("nan"),
        "loop_ticks": ticks,
        "idle_ticks": idle_ticks,
        "idle_cpu_percent": cpu / idle_wall * 100,
        "window_s": window,
        "idle_s": idle_wall,
    }


def scenario_dispatch_cost(url: str, count: int) -> dict[str, Any]:
    """Celery's own ``Scheduler.apply_async`` path with the counting stand-in, no Redis:
    the per-dispatch cost both packages pay on top of their Redis work (informational)."""
    from celery.beat import ScheduleEntry, Scheduler

    class Plain(Scheduler):
        def send_task(self, *args: Any, **kwargs: Any) -> None:
            return None

    app = Celery("bench", broker="memory://", set_as_current=False)
    app.conf.beat_schedule = {}
    scheduler = Plain(app=app, lazy=True)
    scheduler.producer  # noqa: B018
    entry = ScheduleEntry(name="x", task="tasks.x", schedule=3600.0, app=app)
    began = time.perf_counter()
    for _ in range(count):
        scheduler.apply_async(entry, producer=scheduler.producer, advance=False)
    return {"seconds_per_dispatch": (time.perf_counter() - began) / count}


class BrokerQueue:
    """The benchmark's queue on the broker: how many messages it holds, one of them, and
    emptying it. A Redis broker is read raw (the list kombu writes); RabbitMQ through a
    passive declare on a connection of its own."""

    def __init__(self, broker_url: str, queue: str) -> None:
        self.queue = queue
        self.redis = redis.Redis.from_url(broker_url) if broker_url.startswith("redis") else None
        if self.redis is None:
            from kombu import Connection

            self.connection = Connection(broker_url)
            self.channel = self.connection.channel()

    def count(self) -> int:
        with METER.pause():
            if self.redis is not None:
                return int(self.redis.llen(self.queue))
            try:
                return int(self.channel.queue_declare(self.queue, passive=True).message_count)
            except Exception:  # not declared yet: nothing published
                self.channel = self.connection.channel()
                return 0

    def holds(self, count: int, within: float) -> bool:
        """Whether the queue holds ``count`` messages, waiting up to ``within`` seconds
        for those still on their way (a publish RabbitMQ has not counted yet)."""
        deadline = time.time() + within
        while self.count() < count:
            if time.time() > deadline:
                return False
            time.sleep(0.001)
        return True

    def sample(self) -> str:
        """One message as the broker holds it (Redis: kombu's JSON), for the floor."""
        with METER.pause():
            if self.redis is not None:
                return (self.redis.lindex(self.queue, 0) or b"").decode()
            message = self.channel.basic_get(self.queue, no_ack=True)
            return json.dumps({"body_bytes": len(message.body) if message else 0})

    def empty(self) -> None:
        with METER.pause():
            if self.redis is not None:
                self.redis.delete(self.queue)
            else:
                self.channel.queue_purge(self.queue)

    def remove(self) -> None:
        if self.redis is None:
            with METER.pause():
                self.channel.queue_delete(self.queue)
                self.connection.close()


def scenario_e2e(url: str, due: int, bursts: int, broker_url: str,
                 queue: str) -> dict[str, Any]:
    """Dispatch end to end: ``due`` entries fall due at once, ``bursts`` times (after one
    unmeasured burst), and the real beat loop (tick, sleep what it returns) publishes
    them for real to the broker at ``broker_url`` (queue ``queue``). Measured per burst:
    from the due time until the broker holds all ``due`` messages (the last message's
    lag). The scheduler is the package's own, unchanged: nothing is stubbed."""
    app = make_app(url)
    app.conf.update(broker_url=broker_url, task_default_queue=queue,
                    broker_connection_timeout=10)
    scheduler = RedBeatScheduler(app=app)
    scheduler.producer  # noqa: B018 - connected before measuring, as beat is
    take_lock(scheduler)
    scheduler.tick()
    broker = BrokerQueue(broker_url, queue)
    client = redis.Redis.from_url(url)
    lags, ticks, sample = [], [], ""
    cpu: list[float] = []
    server_cpu: list[float] = []
    for burst in range(bursts + 1):
        # a whole second, as celery-redbeat's own save() scores it: with a fraction, its
        # tick at the due time finds all but one entry not due yet (a microsecond
        # rounding) and sends them a max_interval later
        due_at = float(math.ceil(time.time() + 1.0))
        names = [(f"due{i}", due_at) for i in range(due)]
        with METER.pause():
            dataset.write_entries(client, names, 3600.0, "tasks.e2e")
        ended, count, started = None, 0, None
        while time.time() < due_at + 600:
            if started is None and time.time() >= due_at - 0.3:
                started = time.process_time(), redis_cpu(client)  # nothing due yet
            interval = scheduler.tick()
            count += 1
            now = time.time()
            if now < due_at:
                # (woken 0.3 s before the due time, to note the CPU spent so far)
                time.sleep(max(0.0, min(interval or 0.0, due_at - now,
                                        max(0.0, due_at - 0.3 - now) or 1.0)))
            elif interval and broker.holds(due, within=min(interval, 5.0)):
                # the loop sleeps now (the sleep spent watching the broker): the burst
                # has been sent, and the broker holds all of it
                ended = time.time()
                break
        if ended is None:
            raise RuntimeError(f"burst {burst}: {broker.count()} of {due} in the broker")
        if burst and started is not None:  # the first warms the path up, as on a beat
            lags.append(ended - due_at)  # that has run
            ticks.append(count)
            cpu.append(time.process_time() - started[0])
            server_cpu.append(redis_cpu(client) - started[1])
        sample = sample or broker.sample()
        broker.empty()
        with METER.pause():
            keys = [f"redbeat:{name}" for name, _ in names]
            client.delete(*keys)
            client.zrem(dataset.SCHEDULE_KEY, *keys)
    scheduler.close()
    broker.remove()
    lags.sort()
    return {
        "due": due,
        "bursts": len(lags),
        "lags_ms": [lag * 1000 for lag in lags],
        "seconds": lags[len(lags) // 2],
        "per_second": due / lags[len(lags) // 2],
        "p50_ms": lags[len(lags) // 2] * 1000,
        "p99_ms": lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000,
        "ticks_max": max(ticks),
        "sample": sample,
        # this process's CPU (every thread) and the Redis server's (the schedule's, and
        # the broker's when it is a database of the same server), per measured burst,
        # from 0.3 s before the due time: what the burst cost, whatever the machine's load
        "cpu_ms": [c * 1000 for c in cpu],
        "redis_cpu_ms": [c * 1000 for c in server_cpu],
    }


def redis_cpu(client: redis.Redis) -> float:
    """The Redis server's CPU seconds so far (user and system), not counted as a round
    trip of the package measured."""
    with METER.pause():
        info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM). Not ru_maxrss: Linux carries that over
    from the parent across fork and exec, so it could report the driver's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


SCENARIOS = {
    "startup": scenario_startup,
    "idle": scenario_idle,
    "busy": scenario_busy,
    "stale": scenario_stale,
    "lag": scenario_lag,
    "dispatch_cost": scenario_dispatch_cost,
    "e2e": scenario_e2e,
}


def argument(text: str) -> Any:
    """A number when it reads as one (a float with a dot), else the text (a URL)."""
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        return text


def main() -> None:
    scenario, url = sys.argv[1], sys.argv[2]
    arguments = [argument(a) for a in sys.argv[3:]] or [0]
    METER.install()
    result = SCENARIOS[scenario](url, *arguments)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


if __name__ == "__main__":
    main()

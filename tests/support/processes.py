"""Real ``celery beat`` and ``celery worker`` processes for end-to-end tests.

Each test gets a small Celery project written into a temp dir (``beatapp.py``): its
settings come from a JSON environment variable, and its one task records every
execution (task id, tag, time) in a Redis list, so tests count what really ran. Sends
can also be counted without a worker, from the messages waiting in the Redis broker.
Processes are stopped by their own pid, never by name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from . import forked

#: Seconds a test waits for a process to reach a line of its log before failing: for
#: liveness only, so generous (the suite must pass with both cores busy elsewhere).
LIVENESS = 120.0

EXECUTIONS = "e2e:executions"
PUBLISHED = "e2e:published"
#: start and end of each run of beatapp.sleep; while HANG exists, sleep(-1) runs on
SPANS = "e2e:spans"
HANG = "e2e:hang"
#: Seconds between the workers' event-loop wake-ups (beatapp's _LookAgain step)
LOOK_AGAIN = 0.5

APP_SOURCE = f'''
import json, os, time
import redis
from celery import Celery, bootsteps

conf = json.loads(os.environ["BEATAPP_CONF"])
record_signals = conf.pop("beatapp_signals", False)
remote_task = conf.pop("beatapp_remote_task", False)
app = Celery("beatapp")
app.conf.update(conf)
_results = redis.Redis.from_url(os.environ["BEATAPP_RESULTS_URL"])


def _record(request, tag, args, kwargs):
    delivery = request.delivery_info or {{}}
    run = {{"id": request.id, "tag": tag, "at": time.time(), "args": [tag, *args],
           "kwargs": kwargs, "exchange": delivery.get("exchange"),
           "routing_key": delivery.get("routing_key"), "priority": delivery.get("priority")}}
    _results.rpush("{EXECUTIONS}", json.dumps(run))


@app.task(bind=True)
def record(self, tag="", *args, **kwargs):
    _record(self.request, tag, args, kwargs)


@app.task(bind=True, name="beatapp.routed")  # for task_routes to route on its own
def routed(self, tag="", *args, **kwargs):
    _record(self.request, tag, args, kwargs)


@app.task(bind=True, name="beatapp.fail")
def fail(self, tag="", *args, **kwargs):
    _record(self.request, tag, args, kwargs)
    raise ValueError(f"boom {{tag}}")


@app.task(bind=True, name="beatapp.flaky", max_retries=3)
def flaky(self, tag="", *args, **kwargs):  # fails its first attempt, then succeeds
    _record(self.request, tag, args, kwargs)
    if not self.request.retries:
        raise self.retry(exc=RuntimeError("not yet"), countdown=0)


@app.task(bind=True, name="beatapp.sleep")
def sleep(self, tag="", seconds=1.0, *args, **kwargs):
    """Runs ``seconds``, or while the key ``{HANG}`` exists (at most two minutes) when
    ``seconds`` is negative; its start and end go to the ``{SPANS}`` list."""
    started = time.time()
    _record(self.request, tag, (seconds, *args), kwargs)
    deadline = started + (seconds if seconds >= 0 else 120)
    while time.time() < deadline and (seconds >= 0 or _results.exists("{HANG}")):
        time.sleep(0.05)
    _results.rpush("{SPANS}", json.dumps({{"id": self.request.id, "tag": tag,
                                           "start": started, "end": time.time()}}))


class _LookAgain(bootsteps.StartStopStep):
    """Celery's worker event loop at times sleeps out its timer's longest wait (10 s)
    with RabbitMQ deliveries ready to read (a solo worker idle 10 s in the middle of a
    burst, a 1-s entry run every 10 s); a no-op timer every {LOOK_AGAIN} s wakes it."""

    requires = ("celery.worker.components:Hub",)

    def start(self, worker):
        if worker.hub is not None:
            worker.hub.call_repeatedly({LOOK_AGAIN}, lambda: None)


app.steps["worker"].add(_LookAgain)


if remote_task:  # a task the worker knows and beat does not: beat calls send_task for it
    @app.task(bind=True, name="beatapp.remote")
    def remote(self, tag="", *args, **kwargs):
        _record(self.request, tag, args, kwargs)


if record_signals:  # beat records what the publish signals report
    from celery.signals import after_task_publish, before_task_publish

    def _published(when):
        def receiver(sender=None, headers=None, **kwargs):
            _results.rpush("{PUBLISHED}", json.dumps([when, headers["id"]]))
        return receiver

    before_task_publish.connect(_published("before"), weak=False)
    after_task_publish.connect(_published("after"), weak=False)
'''


def write_app(directory: Path) -> Path:
    path = directory / "beatapp.py"
    path.write_text(APP_SOURCE)
    return path


class CeleryProcess:
    """One celery process (beat or worker) with its log in a file."""

    def __init__(self, directory: Path, name: str, args: list[str], conf: dict[str, Any],
                 results_url: str, python: str | None = None,
                 more_env: dict[str, str] | None = None) -> None:
        """``python``: another interpreter (celery-redbeat 2.4.2's), which then sees only
        its own packages and the project dir, never this checkout's ``redbeat``.
        ``more_env``: more environment (libfaketime's, for a host clock that is off).
        The process is forked from the session's forker of that interpreter
        (support/forked.py: Celery imported once, not in every process), except with
        ``more_env``, which may hold what only a new program reads (LD_PRELOAD)."""
        self.name = name
        self.log_path = directory / f"{name}.log"
        env = dict(os.environ)
        inherited = env.get("PYTHONPATH", "") if python is None else ""
        env.update({
            "PYTHONPATH": os.pathsep.join([str(directory), inherited]),
            "BEATAPP_CONF": json.dumps(conf),
            "BEATAPP_RESULTS_URL": results_url,
            "PYTHONUNBUFFERED": "1",
            **(more_env or {}),
        })
        argv = ["-m", "celery", "-A", "beatapp", *args]
        self.process: subprocess.Popen[bytes] | forked.Forked
        if more_env:
            with open(self.log_path, "w") as log:
                self.process = subprocess.Popen([python or sys.executable, *argv],
                                                cwd=directory, env=env, stdout=log,
                                                stderr=subprocess.STDOUT)
        else:
            self.log_path.write_text("")
            self.process = forked.start(python or sys.executable, inherited, argv,
                                        str(directory), env, str(self.log_path),
                                        str(self.log_path))
        self.paused = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = LIVENESS, count: int = 1) -> float:
        """Wait until ``text`` appears ``count`` times in the log; returns when it did.
        The deadline is for liveness only (a process that never gets there): a loaded
        2-core machine takes many seconds to start a Celery process."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log().count(text) >= count:
                return time.monotonic()
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: {text!r} not seen x{count}\n--- log ---\n{self.log()}")

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            os.kill(self.pid, signum)

    def freeze(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def terminate(self, timeout: float = 15.0) -> int:
        self.ask_to_stop()
        return self.reap(timeout)

    def ask_to_stop(self) -> None:
        """SIGTERM (a frozen process is thawed first, or it could not act on it)."""
        if self.paused:
            self.thaw()
        self.signal(signal.SIGTERM)

    def reap(self, timeout: float = 15.0) -> int:
        """Wait for the exit, SIGKILL after ``timeout``; the exit code."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int:
        self.signal(signal.SIGKILL)
        return self.process.wait(10)


class Cluster:
    """The beat and worker processes of one test, all stopped at the end."""

    def __init__(self, directory: Path, redis_url: str, broker_url: str,
                 **settings: Any) -> None:
        self.directory = directory
        write_app(directory)
        self.redis_url = redis_url
        self.broker_url = broker_url
        self.conf = {
            "broker_url": broker_url,
            "redbeat_redis_url": redis_url,
            "timezone": "UTC",
            "beat_max_loop_interval": 5,
            "worker_hijack_root_logger": False,
            **settings,
        }
        self.processes: list[CeleryProcess] = []
        self._results: redis.Redis | None = None
        self._broker: redis.Redis | None = None

    def beat(self, name: str, python: str | None = None,
             scheduler: str = "redbeat.RedBeatScheduler", env: dict[str, str] | None = None,
             **settings: Any) -> CeleryProcess:
        args = ["beat", "-S", scheduler, "-l", "info",
                "-s", str(self.directory / f"{name}-schedule")]
        return self._start(name, args, settings, python, env)

    def worker(self, name: str = "worker", queues: str | None = None,
               concurrency: int = 1, pool: str | None = None,
               **settings: Any) -> CeleryProcess:
        """A worker of the solo pool, or with ``concurrency`` > 1 of the threads pool
        (several runs at once, in one process), or of the ``pool`` given."""
        pool = pool or ("solo" if concurrency == 1 else "threads")
        args = ["worker", "-P", pool, "-c", str(concurrency), "-l", "info", "-n", f"{name}@%h",
                "--without-heartbeat", "--without-gossip", "--without-mingle",
                *(["-Q", queues] if queues else [])]
        return self._start(name, args, settings)

    def command(self, name: str, *args: str, **settings: Any) -> CeleryProcess:
        """Any other ``celery -A beatapp ...`` command of the project (``redbeat web``)."""
        return self._start(name, list(args), settings)

    def _start(self, name: str, args: list[str], settings: dict[str, Any],
               python: str | None = None, env: dict[str, str] | None = None) -> CeleryProcess:
        process = CeleryProcess(self.directory, name, args, {**self.conf, **settings},
                                self.redis_url, python, env)
        self.processes.append(process)
        return process

    def executions(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.results().lrange(EXECUTIONS, 0, -1)]

    def execution_count(self) -> int:
        """``len(self.executions())`` without reading them: what a wait polls."""
        return int(self.results().llen(EXECUTIONS))

    def results(self) -> redis.Redis:
        """A client of the Redis the task records its runs in (one per cluster)."""
        if self._results is None:
            self._results = redis.Redis.from_url(self.redis_url)
        return self._results

    def queued_task_ids(self, queue: str = "celery") -> list[str]:
        """Ids of the messages waiting in the Redis broker (sent, not yet consumed)."""
        if self._broker is None:
            self._broker = redis.Redis.from_url(self.broker_url)
        return [json.loads(raw)["headers"]["id"] for raw in self._broker.lrange(queue, 0, -1)]

    def stop(self) -> None:
        """SIGTERM every process still running, then wait for each: they shut down
        together (a beat's farewell takes a moment, most of it waiting on Redis)."""
        running = [process for process in self.processes if process.process.poll() is None]
        for process in running:
            process.ask_to_stop()
        for process in running:
            process.reap()

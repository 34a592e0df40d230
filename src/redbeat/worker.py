"""The workers' side: what became of each run beat dispatched, recorded in Redis.

Beat knows what it dispatched, not what happened next. A worker whose app sets
``redbeat_worker_outcomes = True`` reports, for every task it runs whose id names a
beat slot (``<entry name>:<due epoch ms>``, see planning.slot_task_id), when it started,
when it ended and how (success, failure, retry, revoked, lost) and its runtime: into
the entry's ``run`` field, the ``<prefix>:outcomes`` stream and the failed-runs count
(lua/outcome.lua, one round trip per report, two per run). Task code is unchanged; a
task that is not one of beat's runs costs nothing but a string split.

How it is loaded: importing redbeat connects :func:`worker_starting` to Celery's
``worker_init`` signal, and the ``celery`` command imports redbeat whenever it is
installed (its ``celery redbeat`` sub-command is an entry point of ``celery.commands``),
so ``celery -A proj worker`` needs the setting alone. A worker started another way
(``app.Worker(...).start()`` in a program) gets it by importing redbeat in the app's
module, or ``imports = ["redbeat.worker"]``. When the worker starts and its app has the
setting, the task signals are connected: ``task_prerun`` (started), ``task_postrun``
(ended, with Celery's state), ``task_failure`` and ``task_retry`` (the error line;
in a prefork pool's main process, ``task_failure`` is the only word about a child that
died: lost), ``task_revoked``. A report that cannot reach Redis is logged once and
dropped: the task itself never waits on a retry or fails for it. While a process runs
beat's tasks, a thread of its own says every third of ``redbeat_lost_after`` that they
still run (one round trip per running task), so only a run whose worker is gone falls
silent long enough to count as lost.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from functools import cached_property
from typing import TYPE_CHECKING, Any

from celery import signals

from .runs import slot_of_task
from .settings import SettingError, ensure_conf

if TYPE_CHECKING:
    from celery import Celery

    from .store import RunReport, ScheduleStore

logger = logging.getLogger("redbeat.worker")

#: Celery's end states (task_postrun's ``state``) as outcomes; others are not recorded.
END_STATES = {"SUCCESS": "success", "FAILURE": "failure", "RETRY": "retry",
              "REVOKED": "revoked", "IGNORED": "success"}
#: The longest error line kept (a traceback is the worker log's business).
ERROR_LINE = 200
#: Seconds between the keep-alive thread's looks at the running tasks.
ALIVE_CHECK = 0.5


def error_line(error: Any) -> str:
    """One line naming an exception (or a retry's reason), at most ERROR_LINE long."""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
    else:
        text = str(error)
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= ERROR_LINE else line[:ERROR_LINE - 1] + "…"


class Outcomes:
    """One worker's reports, made from its task signals (see the module docstring)."""

    def __init__(self, app: Celery, worker: str) -> None:
        self.app = app
        self.worker = worker
        config = ensure_conf(app)
        self.keys = config.keys
        self.keep = config.history_stream_length
        self.lost_after = config.lost_after
        #: task id -> time.monotonic() at task_prerun, in the process that runs it
        self._started: dict[str, float] = {}
        #: task id -> the error line task_failure or task_retry gave before task_postrun
        self._errors: dict[str, str] = {}
        self._problem: str | None = None
        #: the process whose keep-alive thread runs (a pool child starts its own), and
        #: for each running task when it last said so and how often it must
        self._alive_pid: int | None = None
        self._alive: dict[str, tuple[float, float]] = {}

    @cached_property
    def store(self) -> ScheduleStore:
        """The app's schedule without the retry policy: a report to a Redis that is away
        is dropped at once rather than holding the task for the retry period. Built in
        the process that first reports (each pool child has its own connections)."""
        from .retry import RetryPolicy
        from .runtime import store_for
        from .store import ScheduleStore

        shared = store_for(self.app)
        return ScheduleStore(shared.client, shared.keys, RetryPolicy(retry_period=0))

    def _report(self, kind: str, task_id: str | None, state: str,
                **details: Any) -> RunReport | None:
        slot = slot_of_task(task_id) if isinstance(task_id, str) else None
        if slot is None:
            return None
        name, due_ms = slot
        report = {"task_id": task_id, "due_ms": due_ms, "state": state, "worker": self.worker,
                  **{field: value for field, value in details.items() if value is not None}}
        try:
            written = self.store.report_run(self.keys.entry(name), kind, report, self.keep,
                                            self.lost_after)
        except Exception as exc:  # a report must never fail the task
            problem = f"{type(exc).__name__}: {exc}"
            if problem != self._problem:
                logger.warning("redbeat: cannot record the outcome of %s: %s (runs go on; "
                               "their outcomes are not recorded meanwhile)", task_id, problem)
                self._problem = problem
            return None
        if self._problem is not None:
            logger.info("redbeat: recording run outcomes again")
            self._problem = None
        return written

    # -- receivers ------------------------------------------------------------------------

    def prerun(self, task_id: str | None = None, **_: Any) -> None:
        if task_id is None or slot_of_task(task_id) is None:
            return
        self._started[task_id] = time.monotonic()
        written = self._report("start", task_id, "running")
        if written is not None and written.lost_after is not None:
            self._alive[task_id] = (time.monotonic(), written.lost_after / 3)
        if self._alive_pid != os.getpid():
            self._alive_pid = os.getpid()
            threading.Thread(target=self._keep_alive, name="redbeat-outcomes-alive",
                             daemon=True).start()

    def _keep_alive(self) -> None:
        """While this process runs beat's tasks, tell Redis every third of each run's
        bound that it still runs: a run counts as lost after its bound of silence, so
        a long run on a live worker never does, and one whose worker died does."""
        while True:
            time.sleep(ALIVE_CHECK)
            now = time.monotonic()
            for task_id, (said, every) in list(self._alive.items()):
                if now - said >= every and task_id in self._started:
                    self._alive[task_id] = (now, every)
                    self._report("alive", task_id, "running")

    def postrun(self, task_id: str | None = None, state: str | None = None,
                retval: Any = None, **_: Any) -> None:
        started = self._started.pop(task_id, None) if task_id else None
        self._alive.pop(task_id or "", None)
        error = self._errors.pop(task_id, None) if task_id else None
        outcome = END_STATES.get(state or "")
        if started is None or outcome is None:
            return
        if outcome == "failure" and error is None:
            error = error_line(retval)
        self._report("finish", task_id, outcome, runtime=time.monotonic() - started,
                     error=error if outcome in ("failure", "retry") else None)

    def failure(self, task_id: str | None = None, exception: Any = None, **_: Any) -> None:
        if task_id is None:
            return
        if task_id in self._started:  # task_postrun follows, in this process
            self._errors[task_id] = error_line(exception)
            return
        # Sent by a prefork pool's main process: the child running it died (lost), or
        # was killed at its hard time limit (failure); no task_postrun will come.
        from billiard.exceptions import WorkerLostError

        outcome = "lost" if isinstance(exception, WorkerLostError) else "failure"
        self._report("finish", task_id, outcome, error=error_line(exception))

    def retry(self, request: Any = None, reason: Any = None, **_: Any) -> None:
        task_id = getattr(request, "id", None)
        if task_id in self._started:
            self._errors[task_id] = error_line(reason)

    def revoked(self, request: Any = None, terminated: bool = False, signum: Any = None,
                expired: bool = False, **_: Any) -> None:
        why = ("expired" if expired else f"terminated (signal {signum})" if terminated
               else "revoked")
        self._report("finish", getattr(request, "id", None), "revoked", error=why)

    def connect(self) -> None:
        """Connect the receivers (kept alive: Celery holds weak references by default)."""
        uid = f"redbeat-outcomes-{id(self)}"
        for signal, receiver in ((signals.task_prerun, self.prerun),
                                 (signals.task_postrun, self.postrun),
                                 (signals.task_failure, self.failure),
                                 (signals.task_retry, self.retry),
                                 (signals.task_revoked, self.revoked)):
            signal.connect(receiver, weak=False, dispatch_uid=uid)


#: The app whose worker this process runs, once connected (one worker per process).
INSTALLED: dict[int, Outcomes] = {}


def install(app: Celery, worker: str) -> Outcomes:
    """Report this worker's runs of beat's slots (what the setting switches on)."""
    outcomes = INSTALLED.get(id(app))
    if outcomes is None:
        outcomes = INSTALLED[id(app)] = Outcomes(app, worker)
        outcomes.connect()
        logger.info("redbeat: recording the outcomes of beat's runs in %s",
                    outcomes.keys.outcomes)
    return outcomes


def worker_starting(sender: Any = None, **_: Any) -> None:
    """``worker_init``: install the reports when the worker's app asks for them."""
    app = getattr(sender, "app", None)
    if app is None:
        return
    try:
        wanted = ensure_conf(app).worker_outcomes
    except SettingError as exc:
        logger.error("redbeat: worker outcomes not recorded: %s", exc)
        return
    if wanted:
        install(app, str(getattr(sender, "hostname", "") or "worker"))


signals.worker_init.connect(worker_starting, weak=False, dispatch_uid="redbeat-worker-outcomes")

"""Start Python processes without paying an interpreter's start-up for each.

The suite runs real processes: ``celery beat`` and ``celery worker`` of a test's project,
and small scripts under this package and under celery-redbeat 2.4.2. Starting an
interpreter that imports Celery costs about a second of CPU, and the suite starts over a
hundred. A :class:`Forker` is one long-lived process of an interpreter that has imported
Celery, kombu and redis-py once; it forks a child for each process asked of it, which
then becomes what ``python <argv>`` would have been (its own pid, working directory,
environment, arguments and log), with those imports already done.

The forker has imported this package too (Celery's command line loads its plugins): a
forker is replaced when a file of the package changed since it started (a tree edited
while tests run), so a child never runs code older than its package's files.

Each child is the forker's, not the test's: :class:`Forked` answers what tests ask of a
``subprocess.Popen`` (``pid``, ``poll``, ``wait``, ``returncode``) from the exit code the
forker writes when it reaps the child. Signals go to the child's own pid, as before.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redbeat

#: The forker, run with ``python -c``; its one argument is the folder for exit codes.
#: A request is a line of JSON on stdin; the reply, the child's pid on stdout. The child
#: leaves the loop and ends as an interpreter does (SystemExit, threads joined, atexit).
#: Once stdin closes the forker takes no more requests and ends when its last child has
#: ended and its exit code is written (a replaced forker's children keep theirs).
#: FROZEN: before each fork the forker's objects are moved out of the collector's reach
#: (gc.freeze), so a child's collections, and the one at its exit, do not walk the tens of
#: thousands of objects of its inherited imports, each walk writing to (and so copying)
#: every page they are on: about 0.25 s of CPU per child at its exit alone, 0.07 s with
#: them frozen. The child's own objects are collected as in any interpreter.
SERVER = r"""
import gc, io, json, os, runpy, select, sys
import celery, celery.beat, celery.bin.celery, kombu, redis  # the start-up children are spared

exits = sys.argv[1]


def reap():  # writes the exit code of each child that ended; whether any still runs
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        path = os.path.join(exits, str(pid))
        with open(path + ".part", "w") as out:
            out.write(str(os.waitstatus_to_exitcode(status)))
        os.rename(path + ".part", path)


def stdio():  # sys.stdin, stdout and stderr made again on the new 0, 1 and 2 as an
    # interpreter starting with the request's environment makes them (buffered unless
    # PYTHONUNBUFFERED, line by line on a terminal): the forker's are unbuffered pipes
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for name, fd in (("stdin", 0), ("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
        if fd == 0:
            binary = io.BufferedReader(raw)
        else:
            binary = raw if unbuffered else io.BufferedWriter(raw)
        line_buffering = fd > 0 and not unbuffered and (fd == 2 or raw.isatty())
        stream = io.TextIOWrapper(binary, old.encoding, old.errors, "\n", line_buffering,
                                  fd > 0 and unbuffered)
        stream.mode = "r" if fd == 0 else "w"
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def become(request):
    if request["session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    stdio()
    sys.path[:0] = [request["cwd"], *request["path"]]
    option, target, *rest = request["argv"]
    sys.argv = ["-c" if option == "-c" else target, *rest]
    if option == "-c":
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)


accepting = True
while True:
    ready = select.select([sys.stdin] if accepting else [], [], [], 0.05)[0]
    if not reap() and not accepting:
        break
    if not ready:
        continue
    line = sys.stdin.readline()
    if not line:
        accepting = False
        continue
    request = json.loads(line)
    gc.freeze()  # see FROZEN
    pid = os.fork()
    if pid == 0:
        become(request)
        sys.exit(0)
    sys.stdout.write(f"{pid}\n")
    sys.stdout.flush()
"""


#: Where a child writes: a file's path, or a descriptor of this process (see Forker.start).
Output = str | int

#: This package's files, as the tests import it.
PACKAGE = Path(redbeat.__file__).resolve().parent


def package_stamp() -> float:
    """The newest modification time among the package's files (Lua scripts included;
    not the bytecode Python writes there)."""
    return max(path.stat().st_mtime for path in PACKAGE.rglob("*")
               if path.is_file() and "__pycache__" not in path.parts)


class Forker:
    """One forker process of ``python``, started with ``pythonpath``."""

    def __init__(self, python: str, pythonpath: str) -> None:
        self.stamp = package_stamp()
        self.exits = Path(tempfile.mkdtemp(prefix="forker-"))
        env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([python, "-c", SERVER, str(self.exits)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=env, cwd="/", text=True)
        self.lock = threading.Lock()

    def start(self, argv: list[str], cwd: str, env: dict[str, str], path: list[str],
              stdout: Output, stderr: Output, session: bool = False) -> Forked:
        """A child running ``python <argv>`` in ``cwd`` with ``env``, ``path`` before the
        forker's own import path, its output appended to the files ``stdout``/``stderr``
        or written to this process's open descriptors (a pipe, a terminal): the child
        opens them by their /proc path, and this returns once it has, so the caller may
        close its own copy. ``session``: the child leads a new session (setsid), as
        ``Popen(start_new_session=True)``."""
        outputs = {1: stdout, 2: stderr}
        paths = {fd: f"/proc/{os.getpid()}/fd/{given}" if isinstance(given, int) else given
                 for fd, given in outputs.items()}
        request = {"argv": argv, "cwd": cwd, "env": env, "path": path, "stdout": paths[1],
                   "stderr": paths[2], "session": session}
        assert self.process.stdin is not None and self.process.stdout is not None
        with self.lock:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError(f"the forker of {self.process.args[0]} ended")
        child = Forked(int(reply), argv, self)
        for fd, given in outputs.items():
            if isinstance(given, int):
                child.wait_opened(fd, given)
        return child

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Take no more requests: the forker ends once its running children have."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()


class Forked:
    """A forker's child, with the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, pid: int, args: list[str], forker: Forker) -> None:
        self.pid = pid
        self.args = args
        self.forker = forker
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            exit_file = self.forker.exits / str(self.pid)
            if exit_file.exists():
                self.returncode = int(exit_file.read_text())
            elif not self.forker.alive() and not _exists(self.pid):
                self.returncode = -9  # reaped by init once its forker was gone: unknown
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait_opened(self, fd: int, given: int) -> None:
        """Wait until the child's ``fd`` is what this process's ``given`` is (or it ended)."""
        wanted = os.fstat(given)
        deadline = time.monotonic() + 60
        while self.poll() is None:
            try:
                found = os.stat(f"/proc/{self.pid}/fd/{fd}")
            except OSError:  # not yet there, or exiting
                found = None
            if found is not None and (found.st_dev, found.st_ino) == (wanted.st_dev,
                                                                    wanted.st_ino):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.args}: its fd {fd} never became our fd {given}")
            time.sleep(0.002)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_FORKERS: dict[tuple[str, str], Forker] = {}
_STARTED: list[Forker] = []  # replaced ones too: their folders of exit codes go at exit
_FORKERS_LOCK = threading.Lock()


def forker(python: str, pythonpath: str) -> Forker:
    """The session's forker of ``python`` with ``pythonpath`` (started when first asked)."""
    with _FORKERS_LOCK:
        found = _FORKERS.get((python, pythonpath))
        if found is not None and found.stamp != package_stamp():
            found.stop()
        if found is None or not found.alive():
            found = _FORKERS[(python, pythonpath)] = Forker(python, pythonpath)
            _STARTED.append(found)
        return found


def start(python: str, base: str, argv: list[str], cwd: str, env: dict[str, str],
          stdout: Output, stderr: Output, session: bool = False) -> Forked:
    """``python <argv>`` as a fork of the session's forker of ``python`` started with
    PYTHONPATH ``base`` (where what it imports ahead comes from); the entries of
    ``env``'s PYTHONPATH come first on the child's import path, as they would.
    ``stdout``, ``stderr`` and ``session`` as :meth:`Forker.start` takes them."""
    path = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    return forker(python, base).start(argv, cwd, env, path, stdout, stderr, session)


def run(argv: list[str], cwd: str = "/", env: dict[str, str] | None = None,
        timeout: float = 120, python: str = sys.executable, base: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    """``python <argv>`` in ``cwd`` with ``env`` (this process's by default) in a fork, to
    the end: as ``subprocess.run(..., capture_output=True, text=True)``; killed after
    ``timeout``. ``base``: the forker's PYTHONPATH, this process's by default (the one
    the celery processes of support/processes.py are forked from)."""
    env = dict(os.environ) if env is None else env
    base = os.environ.get("PYTHONPATH", "") if base is None else base
    outputs = Path(tempfile.mkdtemp(prefix="forked-"))
    stdout, stderr = outputs / "stdout", outputs / "stderr"
    stdout.touch()
    stderr.touch()
    child = start(python, base, argv, cwd, env, str(stdout), str(stderr))
    try:
        code = child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        raise
    finally:
        out, err = stdout.read_text(), stderr.read_text()
        shutil.rmtree(outputs, ignore_errors=True)
    return subprocess.CompletedProcess([python, *argv], code, out, err)


def run_script(python: str, pythonpath: str, source: str, timeout: float = 120
               ) -> subprocess.CompletedProcess[str]:
    """``python -c source`` with PYTHONPATH ``pythonpath`` in a fork, to the end: as
    ``subprocess.run(..., capture_output=True, text=True)``; killed after ``timeout``."""
    return run(["-c", source], "/", {**os.environ, "PYTHONPATH": pythonpath}, timeout,
               python, pythonpath)


@atexit.register
def _stop_forkers() -> None:
    for found in _STARTED:
        found.stop()
        shutil.rmtree(found.exits, ignore_errors=True)

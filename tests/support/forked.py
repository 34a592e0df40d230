"""Run a script in a fresh process of another interpreter, without paying its start-up.

Tests that compare this package with celery-redbeat 2.4.2 run small scripts under each
interpreter, each script in a process of its own (nothing one leaves behind, such as a
Celery app or a client, can reach the next). Starting an interpreter that imports Celery
costs about half a second of CPU, and the suite starts dozens of them. An
:class:`Interpreter` is one long-lived process of that interpreter that has imported
Celery, kombu and redis-py once; each script runs in a child it forks, so each still has
its own process, while the imports are the parent's, already done.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: The server, run with ``python -c``: one request per line on stdin (the script, its
#: working directory, the files for its output); on stdout, the child's pid once forked,
#: then its exit code, a line each.
SERVER = r"""
import json, os, sys, traceback
import celery, celery.beat, kombu, redis  # the start-up the children are spared

for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(request["cwd"])
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                target = os.open(path, os.O_WRONLY | os.O_TRUNC)
                os.dup2(target, fd)
                os.close(target)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            sys.argv = ["-c"]
            exec(compile(request["source"], "<script>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
            if not isinstance(exit.code, int) and exit.code is not None:
                print(exit.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    sys.stdout.write(json.dumps(pid) + "\n")
    sys.stdout.flush()
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps(os.waitstatus_to_exitcode(status)) + "\n")
    sys.stdout.flush()
"""


@dataclass(frozen=True)
class Finished:
    """What a script left: its exit code and its two outputs (as ``subprocess.run``)."""

    returncode: int
    stdout: str
    stderr: str


class Interpreter:
    """One server process of ``python`` with ``pythonpath``; see the module docstring."""

    def __init__(self, python: str, pythonpath: str) -> None:
        env = {**os.environ, "PYTHONPATH": pythonpath}
        self.process = subprocess.Popen([python, "-c", SERVER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env, cwd="/", text=True)
        self.outputs = Path(tempfile.mkdtemp(prefix="forked-"))

    def run(self, source: str, timeout: float = 120, cwd: str = "/") -> Finished:
        """Run ``source`` as ``python -c`` would, in a child of the server; a script still
        running after ``timeout`` seconds is killed, and the server stopped (the next call
        starts another)."""
        stdout, stderr = self.outputs / "stdout", self.outputs / "stderr"
        stdout.write_text("")
        stderr.write_text("")
        request = {"source": source, "cwd": cwd, "stdout": str(stdout), "stderr": str(stderr)}
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        child = json.loads(self._line(deadline, stderr))
        try:
            code = json.loads(self._line(deadline, stderr))
        except TimeoutError:
            os.kill(child, signal.SIGKILL)
            self.stop()
            raise
        return Finished(code, stdout.read_text(), stderr.read_text())

    def _line(self, deadline: float, stderr: Path) -> str:
        """The server's next line, by ``deadline``."""
        assert self.process.stdout is not None
        while not select.select([self.process.stdout], [], [], 0.5)[0]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no exit in time:\n{stderr.read_text()[-3000:]}")
            if self.process.poll() is not None:
                break
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the interpreter server ended:\n{stderr.read_text()[-3000:]}")
        return line

    def stop(self) -> None:
        """End the server."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        for path in self.outputs.iterdir():
            path.unlink()
        self.outputs.rmdir()


_SERVERS: dict[tuple[str, str], Interpreter] = {}


def run_script(python: str, pythonpath: str, source: str, timeout: float = 120) -> Finished:
    """Run ``source`` under ``python`` (with ``pythonpath``) in a process of its own, forked
    from a server kept for the session."""
    key = (python, pythonpath)
    server = _SERVERS.get(key)
    if server is None or server.process.poll() is not None:
        server = _SERVERS[key] = Interpreter(python, pythonpath)
    try:
        return server.run(source, timeout)
    except (TimeoutError, RuntimeError):
        del _SERVERS[key]
        raise


@atexit.register
def _stop_servers() -> None:
    for server in _SERVERS.values():
        server.stop()

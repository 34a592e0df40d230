"""A PostgreSQL server of the test's own, from Debian's packages (``.ci/run`` installs
them when missing): initdb in a temporary directory, listening on a free loopback port,
stopped and removed afterwards. As root, the server runs as the ``postgres`` user, which
is the only way PostgreSQL agrees to run.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from .redis_server import free_port, redis_required


def _binaries() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yields ``postgresql://postgres@127.0.0.1:PORT/postgres``."""
    binaries = _binaries()
    if binaries is None:
        if redis_required():  # CI: the real-server tests must run
            pytest.fail("PostgreSQL's initdb is not installed (Debian package postgresql)")
        pytest.skip("PostgreSQL's initdb is not installed (Debian package postgresql)")
    directory = tempfile.mkdtemp(prefix="redbeat-pg-")
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(directory, "postgres")
    data, port = os.path.join(directory, "data"), free_port()
    run = [*as_user, f"{binaries}/pg_ctl", "-D", data]
    subprocess.run([*as_user, f"{binaries}/initdb", "-D", data, "-A", "trust", "-U", "postgres"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*run, "-o", f"-p {port} -k {directory} -c listen_addresses=127.0.0.1",
                    "-l", os.path.join(directory, "log"), "-w", "-t", "120", "start"],
                   check=True, stdout=subprocess.DEVNULL)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run, "-m", "immediate", "stop"], stdout=subprocess.DEVNULL)
        shutil.rmtree(directory, ignore_errors=True)

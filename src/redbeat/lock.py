"""The leader lock's value: who holds it, readable by operators.

The lock is a plain string key with a PX expiry (the 2.4.2 layout). Its value is
``<host>:<pid>:<random hex>``: unique per scheduler process, and enough for an operator
(or ``redbeat status``) to see which node leads. celery-redbeat 2.4.2 stores a bare
random hex token; both implementations only ever compare their own token before
extending or deleting, so they can share the key. Taking, extending and checking the
lock happen inside tick.lua and commit.lua, atomically with the work they guard;
releasing is release.lua.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass


def new_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class Holder:
    token: str
    host: str | None = None
    pid: int | None = None

    @classmethod
    def parse(cls, token: str) -> Holder:
        parts = token.rsplit(":", 2)
        if len(parts) == 3 and parts[1].isdigit():
            return cls(token, parts[0], int(parts[1]))
        return cls(token)  # a token written by celery-redbeat 2.4.2: no host, no pid

    def __str__(self) -> str:
        if self.host is None:
            return f"token {self.token}"
        return f"{self.host} pid {self.pid}"

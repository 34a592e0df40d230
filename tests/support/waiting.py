"""The one polling helper of the tests: wait for a condition, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout: float, what: str, *,
               interval: float = 0.02,
               ignoring: tuple[type[BaseException], ...] = ()) -> None:
    """Poll ``condition`` every ``interval`` seconds until it is true; fail the test
    (AssertionError naming ``what``) after ``timeout``. Errors of the ``ignoring``
    types count as "not yet" (a server still starting refuses connections)."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            if condition():
                return
        except ignoring as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)

"""The interpreter that has the real celery-redbeat 2.4.2 installed, for tests that run it.

REDBEAT_REFERENCE_PYTHON names it (.ci/run builds ``.venv-ref`` and sets it). Without the
variable, the checkout's own ``.venv-ref`` is used when there is one, so a developer who
built it runs these tests too; otherwise they skip, except in CI (REDBEAT_REQUIRE_REDIS),
where they fail, so the compatibility claims are always checked there.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from .forked import run_script
from .redis_server import redis_required

ENV = "REDBEAT_REFERENCE_PYTHON"
LOCAL = Path(__file__).resolve().parents[2] / ".venv-ref" / "bin" / "python"


def reference_python() -> str | None:
    return os.environ.get(ENV) or (str(LOCAL) if LOCAL.exists() else None)


def needs_reference() -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        reference_python() is None and not redis_required(),
        reason=f"{ENV} (a Python with celery-redbeat 2.4.2) is not set",
    )


def run_reference(script: str, timeout: float = 60) -> str:
    """Run ``script`` under 2.4.2's interpreter; its standard output (fails on exit != 0).
    PYTHONPATH is cleared so it can only import 2.4.2's ``redbeat``."""
    python = reference_python()
    if python is None:
        pytest.fail(f"{ENV} must be set in CI")
    result = run_script(python, "", textwrap.dedent(script), timeout)
    assert result.returncode == 0, result.stderr
    return result.stdout

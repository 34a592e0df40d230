"""Compile the project's modules once, before the test workers start.

Every xdist worker imports every test module to collect it, and pytest rewrites each
one's asserts and compiles it (about 5 s of CPU per worker for this suite). Each worker
and each Python process a test starts (``python -m redbeat``, the forkers) also
compiles redbeat's own modules. Where bytecode may be written, the first of them
to finish caches the result, but in a clean clone the workers all start at once and
each does the whole work; and where ``PYTHONDONTWRITEBYTECODE`` is set (CI machines
often set it) nothing is ever cached, so every process repeats it.

The session's first process does it once instead, before it starts the workers:
ordinary ``.pyc`` files for the package and the test helpers, and pytest's own cached
rewrite for each test module, in the ``__pycache__`` folders git ignores. Readers need
no setting: Python and pytest read a valid cache even when they may not write one.
"""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

import pytest

import redbeat

TESTS = Path(__file__).resolve().parents[1]


def compile_ahead(config: pytest.Config) -> None:
    """Cache bytecode for redbeat, tests/support, tests/sim and the rewritten test
    modules: only what is missing or stale is compiled."""
    for folder in (Path(redbeat.__file__).parent, TESTS / "support", TESTS / "sim"):
        compileall.compile_dir(folder, quiet=1)
    if config.getoption("assertmode") == "rewrite":
        _cache_rewritten(config, [TESTS / "conftest.py", *sorted(TESTS.glob("test_*.py"))])


def _cache_rewritten(config: pytest.Config, modules: list[Path]) -> None:
    """Write pytest's rewritten-module cache for ``modules``, as its import hook would
    when it may write bytecode. This uses pytest's private helpers (their shape has
    held from pytest 7 to 9); if they change, the workers rewrite the modules
    themselves as before, which only costs time."""
    try:
        from _pytest.assertion import rewrite
        state = config.stash[rewrite.assertstate_key]
        for module in modules:
            cache = rewrite.get_cache_dir(module) / (module.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(module, cache) is not None:
                continue
            cache.parent.mkdir(parents=True, exist_ok=True)
            stamp, code = rewrite._rewrite_test(module, config)
            rewrite._write_pyc(state, code, stamp, cache)
    except (ImportError, AttributeError, KeyError, TypeError) as exc:
        print(f"tests/support/warm.py: pytest's rewrite cache not written ({exc!r})",
              file=sys.stderr)

"""celery-redbeat 2.4.2's own test suite, unmodified, run against this package.

REDBEAT_REFERENCE_SDIST names the 2.4.2 sdist (.ci/run downloads it with
``pip download --no-deps --no-binary :all: celery-redbeat==2.4.2``). Its ``tests/`` folder
is copied alone into a temporary directory (so its own ``redbeat`` package cannot be
imported) and run with this interpreter. Every test it has must pass, except exactly the
ones docs/compatibility.md lists as deliberate differences: a newly failing test, or a
listed one that starts passing (the list would then be stale), fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

import redbeat
from support.redis_server import redis_required

SDIST = os.environ.get("REDBEAT_REFERENCE_SDIST")
#: The source tree of the ``redbeat`` this process imports: the suite must run against it,
#: not against whichever copy the interpreter's editable install points at (another
#: checkout, for a git worktree).
SOURCE = Path(redbeat.__file__).resolve().parents[1]
DOC = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"
#: How docs/compatibility.md names a 2.4.2 test: `tests/test_x.py::Class::test_name`.
TEST_ID = re.compile(r"`(tests/test_\w+\.py::\w+::\w+)`")

pytestmark = pytest.mark.skipif(
    not SDIST and not redis_required(),
    reason="REDBEAT_REFERENCE_SDIST (celery-redbeat 2.4.2's sdist) is not set",
)


def documented_differences() -> set[str]:
    return set(TEST_ID.findall(DOC.read_text()))


def extract_tests(sdist: str, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/tests/" in f"/{m.name}"]
        archive.extractall(into, members=members, filter="data")
    (found,) = into.glob("*/tests")
    return found.parent


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed, failed or skipped, from pytest's JUnit XML."""
    results = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)
        test_id = f"{module[0].replace('.', '/')}.py::{module[1]}::{case.get('name')}"
        kinds = {child.tag for child in case}
        results[test_id] = ("failed" if kinds & {"failure", "error"}
                            else "skipped" if "skipped" in kinds else "passed")
    return results


def test_the_242_suite_passes_but_for_the_documented_differences(tmp_path):
    if not SDIST:
        pytest.fail("REDBEAT_REFERENCE_SDIST must be set in CI")
    root = extract_tests(SDIST, tmp_path)
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "PYTHONPATH": str(SOURCE)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         f"--junitxml={junit}", "tests"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )
    assert junit.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    results = outcomes(junit)
    failed = {test_id for test_id, outcome in results.items() if outcome == "failed"}
    expected = documented_differences()
    assert failed == expected, (
        f"newly failing: {sorted(failed - expected)}; "
        f"listed in docs/compatibility.md but passing: {sorted(expected - failed)}\n"
        + run.stdout[-4000:]
    )
    # every module collected: 2.4.2's suite has 85 tests, 2 of them skipped by itself
    assert len(results) == 85, sorted(results)

"""RESULTS.md's sections written by one benchmark each, at the top of the file.

Each sits between ``<!-- NAME: written by benchmarks/NAME.py -->`` and ``<!-- /NAME -->``;
a benchmark replaces its own and keeps the others (bench.py, which rewrites the rest of
the file, keeps all of them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: The repository's own virtualenv, where ours is measured unless ``--ours`` says otherwise.
REPO_VENV_PYTHON = HERE.parent / ".venv" / "bin" / "python"

#: In the order they appear, after the title and its list of the machine and versions.
NAMES = ("e2e", "minute", "saves", "labels")


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: written by benchmarks/{name}.py -->", f"<!-- /{name} -->"


def section_of(text: str, name: str) -> str:
    """The section ``name`` of ``text`` ('' when it has none)."""
    start, end = markers(name)
    if start in text and end in text:
        return text.split(start, 1)[1].split(end, 1)[0]
    return ""


def splice(text: str, name: str, section: str) -> str:
    """``text`` with the section ``name`` replaced by ``section``, or put after the
    sections before it in :data:`NAMES` (after the title block when there are none)."""
    start, end = markers(name)
    block = f"{start}\n{section.strip()}\n{end}\n\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        return head + block + rest.split(end, 1)[1].lstrip("\n")
    for before in reversed(NAMES[:NAMES.index(name)]):
        previous = markers(before)[1]
        if previous in text:
            head, rest = text.split(previous, 1)
            return head + previous + "\n\n" + block + rest.lstrip("\n")
    lines = text.splitlines(keepends=True)
    at = 1
    while at < len(lines) and (lines[at].startswith("- ") or not lines[at].strip()):
        at += 1
    return "".join(lines[:at]) + "\n" + block + "".join(lines[at:])


def keep(old: str, new: str) -> str:
    """``new`` (a rewritten RESULTS.md) with every section ``old`` had."""
    for name in NAMES:
        section = section_of(old, name)
        if section.strip():
            new = splice(new, name, section)
    return new


def add_ours_option(parser: argparse.ArgumentParser) -> None:
    """``--ours``: the interpreter ours runs under (the repository's .venv by default)."""
    parser.add_argument("--ours", metavar="PYTHON", default=str(
        REPO_VENV_PYTHON if REPO_VENV_PYTHON.exists() else sys.executable))


def add_no_write_option(parser: argparse.ArgumentParser) -> None:
    """``--no-write``: print the section only, so that figures from a loaded machine or
    from a tree in progress stay out of RESULTS.md."""
    parser.add_argument("--no-write", action="store_true",
                        help="print the section; leave RESULTS.md and the JSON unwritten")


def tables(targets: list[str], rows: list[str]) -> str:
    """A section's closing tables: the targets met or not, then the figures."""
    return ("| target | measured | |\n|---|---|---|\n" + "\n".join(targets) + "\n\n"
            + "\n".join(rows) + "\n")


def publish(name: str, results: dict[str, Any], section: str, write: bool = True) -> None:
    """Print ``section``; unless told not to, keep ``results`` as ``NAME.json`` and put
    the section in its place in RESULTS.md (the other sections kept)."""
    if write:
        (HERE / f"{name}.json").write_text(json.dumps(results, indent=1, default=str))
        target = HERE / "RESULTS.md"
        old = target.read_text() if target.exists() else "# Benchmark results\n"
        target.write_text(splice(old, name, section))
    print(section)

"""The import direction of docs/design.md: the pure core never imports an edge.

The pure core decides (what is due, what a slot is, how a definition reads); the edges
do I/O (Redis, the broker, processes, the command line). A core module importing an
edge would let I/O into code that is tested as tables with a fixed "now". Read from the
source (every import statement, at any depth, except those only for type checkers), so
a violation fails here whether or not the import runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "redbeat"

PURE_CORE = {"keys", "decoder", "schedules", "nexttime", "nextrun", "policy", "planning",
             "batch", "failures", "schedule_text", "guards"}
EDGES = {"store", "connection", "schedulers", "manage", "browse", "cli", "embedded", "lock",
         "retry", "health", "metrics", "web", "__main__"}
#: Client libraries of the edges: the core talks to neither Redis nor a broker.
IO_LIBRARIES = {"redis", "kombu"}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(module: str) -> set[str]:
    return imports_in((PACKAGE / f"{module}.py").read_text())


def imports_in(source: str) -> set[str]:
    """Every module a module of the package imports: the package's by their short name,
    others by their top-level name."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                found.add(parts[1] if parts[0] == "redbeat" and len(parts) > 1 else parts[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x / from .x import y
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found.update(alias.name for alias in node.names)
            elif node.module:
                parts = node.module.split(".")
                if parts[0] == "redbeat":
                    found.update([parts[1]] if len(parts) > 1 else
                                 [alias.name for alias in node.names])
                else:
                    found.add(parts[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def test_the_module_lists_name_real_modules():
    present = {path.stem for path in PACKAGE.glob("*.py")} | {
        path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert PURE_CORE | EDGES <= present


@pytest.mark.parametrize("module", sorted(PURE_CORE))
def test_a_pure_core_module_imports_no_edge(module):
    imported = imports(module)
    assert not imported & EDGES, f"redbeat.{module} imports the edge(s) {imported & EDGES}"
    assert not imported & IO_LIBRARIES, f"redbeat.{module} imports {imported & IO_LIBRARIES}"


def test_the_reader_finds_imports_at_any_depth_but_not_type_checking_ones():
    source = ("from typing import TYPE_CHECKING\n"
              "import redbeat.connection\n"
              "from . import decoder\n"
              "if TYPE_CHECKING:\n    from .lock import Lease\n"
              "def f():\n    from .store import ScheduleStore\n    import redis.exceptions\n")
    assert imports_in(source) == {"typing", "connection", "decoder", "store", "redis"}

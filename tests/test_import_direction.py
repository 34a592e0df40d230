"""The import direction of docs/design.md: the pure core never imports an edge.

The pure core decides (what is due, what a slot is, how a definition reads); the edges
do I/O (Redis, the broker, processes, the command line). A core module importing an
edge, itself or through any module of the package it imports, would let I/O into code
that is tested as tables with a fixed "now". Read from the source (every import
statement, at any depth of a file, function bodies included, except those only for type
checkers) and followed from module to module, so a violation fails here whether or not
the import runs.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "redbeat"

PURE_CORE = {"compat", "keys", "decoder", "schedules", "nexttime", "nextrun", "policy",
             "planning", "batch", "failures", "schedule_text", "entry_input", "guards",
             "entry_fields", "legacy", "run_buckets", "heartbeat", "foreign", "runs", "redaction",
             "fleet_clock", "memory_policy", "labels", "audit", "replication"}
#: Between the two: the core may import these. ``settings`` reaches no edge; ``entry``
#: (2.4.2's entry class, which saves itself) reaches the store and what the store
#: imports, and the app's runtime that holds the store, and nothing else of the edges
#: (docs/design.md, "Layers").
BRIDGE = {"entry", "settings"}
BRIDGE_REACHES = {"settings": set(),
                  "entry": {"store", "lock", "connection", "retry", "runtime"}}
EDGES = {"store", "connection", "runtime", "schedulers", "dispatch", "broker_errors", "statics",
         "manage", "browse", "cli", "embedded", "lock", "retry", "health", "metrics", "publish",
         "web", "__main__", "preflight", "migrate", "worker", "groups", "export_file"}
#: Parts of beat the scheduler hands work to (the dispatcher publishes; statics.py writes
#: beat_schedule; compat decides which 2.4.2 hooks a class overrides): they get what
#: they need from it when built or called, and never import it (nor anything that
#: does), so each is tested on its own and the scheduler's size stays its own.
SCHEDULER_PARTS = {"dispatch", "compat", "statics"}
#: Client libraries of the edges: the core talks to neither Redis nor a broker.
IO_LIBRARIES = {"redis", "kombu"}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def source_of(module: str) -> str | None:
    """A module of the package by its short name (None for a name that is not one, such
    as ``__version__`` or a third-party package)."""
    for path in (PACKAGE / f"{module}.py", PACKAGE / module / "__init__.py"):
        if path.is_file():
            return path.read_text()
    return None


def reached(module: str, read: Callable[[str], str | None] = source_of) -> dict[str, list[str]]:
    """Every module ``module`` imports, directly or through modules of the package at
    any depth, each with the chain of imports that reaches it (``module`` first)."""
    chains = {module: [module]}
    queue = deque([module])
    while queue:
        importer = queue.popleft()
        source = read(importer)
        if source is None:
            continue
        for name in sorted(imports_in(source)):
            if name not in chains:
                chains[name] = [*chains[importer], name]
                queue.append(name)
    del chains[module]
    return chains


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


def test_every_module_has_its_layer():
    present = {path.stem for path in PACKAGE.glob("*.py")} | {
        path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert PURE_CORE | BRIDGE | EDGES == present - {"__init__"}


@pytest.mark.parametrize("module", sorted(PURE_CORE))
def test_a_pure_core_module_reaches_no_edge(module):
    chains = reached(module)
    for name in sorted(chains.keys() & (EDGES | IO_LIBRARIES)):
        pytest.fail(f"redbeat.{module} imports {name}: {' -> '.join(chains[name])}")


@pytest.mark.parametrize("module", sorted(BRIDGE))
def test_the_bridge_reaches_only_the_edges_the_design_names(module):
    chains = reached(module)
    for name in sorted(chains.keys() & EDGES - BRIDGE_REACHES[module]):
        pytest.fail(f"redbeat.{module} imports {name}: {' -> '.join(chains[name])}")


@pytest.mark.parametrize("module", sorted(SCHEDULER_PARTS))
def test_a_part_of_the_scheduler_never_imports_it(module):
    chains = reached(module)
    if "schedulers" in chains:
        pytest.fail(f"redbeat.{module} imports the scheduler: {' -> '.join(chains['schedulers'])}")


#: Issue 25: the scheduler hands the broker, the statics and 2.4.2's hooks to its parts;
#: a class growing past this is taking one of their jobs back (or a second one of its own).
SCHEDULER_CLASS_LINES = 550


def test_the_scheduler_class_stays_under_its_size():
    tree = ast.parse((PACKAGE / "schedulers.py").read_text())
    [scheduler] = [node for node in tree.body
                   if isinstance(node, ast.ClassDef) and node.name == "RedBeatScheduler"]
    lines = scheduler.end_lineno - scheduler.lineno + 1
    assert lines < SCHEDULER_CLASS_LINES, f"RedBeatScheduler is {lines} lines"


def test_the_reader_follows_imports_through_the_package():
    package = {
        "core": "from . import helper\nimport json\n",
        "helper": "def decode():\n    from .entry import Entry\n",
        "entry": "import redbeat.store\n",
        "store": "if True:\n    import redis\n",
    }
    chains = reached("core", package.get)
    assert chains == {"helper": ["core", "helper"], "json": ["core", "json"],
                      "entry": ["core", "helper", "entry"],
                      "store": ["core", "helper", "entry", "store"],
                      "redis": ["core", "helper", "entry", "store", "redis"]}


def test_the_reader_finds_imports_at_any_depth_but_not_type_checking_ones():
    source = ("from typing import TYPE_CHECKING\n"
              "import redbeat.connection\n"
              "from . import decoder\n"
              "if TYPE_CHECKING:\n    from .lock import Lease\n"
              "def f():\n    from .store import ScheduleStore\n    import redis.exceptions\n")
    assert imports_in(source) == {"typing", "connection", "decoder", "store", "redis"}

"""The project's own pyproject.toml, as the tests read it: ``[project]``, parsed by
tomllib (tomli on Python 3.10, which has no tomllib: the ``test`` extra brings it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

"""What a package index shows: pyproject's metadata is complete (classifiers for every
supported Python, project URLs), and the README, the long description, links only to
absolute addresses (a relative link breaks on the index's page)."""

from __future__ import annotations

import re

from support.pyproject import PROJECT, ROOT


def test_every_supported_python_has_its_classifier():
    low = int(re.fullmatch(r">=3\.(\d+)", PROJECT["requires-python"]).group(1))
    versions = {f"Programming Language :: Python :: 3.{minor}" for minor in range(low, 14)}
    assert versions <= set(PROJECT["classifiers"])
    assert "Programming Language :: Python :: 3.9" not in PROJECT["classifiers"]


def test_the_metadata_a_user_looks_for_is_there():
    classifiers = set(PROJECT["classifiers"])
    for wanted in ("Framework :: Celery", "Typing :: Typed", "Operating System :: OS Independent"):
        assert wanted in classifiers
    assert any(c.startswith("Development Status ::") for c in classifiers)
    assert PROJECT["license"] and PROJECT["readme"] == "README.md"
    urls = PROJECT["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())
    assert (ROOT / "src" / "redbeat" / "py.typed").exists()


def test_the_long_description_links_only_to_absolute_addresses():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", readme) + re.findall(r'src="([^"]+)"', readme)
    relative = [target for target in targets if not re.match(r"(https?:|mailto:|#)", target)]
    assert not relative, relative
    source = PROJECT["urls"]["Source"]
    for target in targets:
        if target.startswith(source + "/blob/main/"):  # a file of this repository
            assert (ROOT / target.removeprefix(source + "/blob/main/")).exists(), target

"""The web view's entries table at 100,000 entries, in a real headless Chromium against
the real ``redbeat web`` command and a real redis-server: paging, filters, sorts.

Page load times are written to test-artifacts/web/figures.json (a record, not an
assertion: speed targets belong to benchmarks/)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import make_app
from support.redis_server import RedisServer, require_redis_server
from support.web import (
    ARTIFACTS,
    WebServer,
    browser_available,
    screenshot,
    write_entries,
)

TOTAL = 100_000
GROUPS = 10


def dataset(now: float) -> list[tuple[str, str, float, dict[str, Any]]]:
    """job-000000 .. job-099999: every hundredth disabled (parked), every third has run
    (its last run i % 7 + 1 minutes ago), tasks spread over ten groups, next runs half a
    second apart from a minute from now."""
    rows = []
    for i in range(TOTAL):
        changes: dict[str, Any] = {}
        score = now + 60 + i * 0.5
        if i % 100 == 0:
            changes["enabled"], score = False, -1.0
        if i % 3 == 0:
            changes["runs"] = i % 7 + 1
        rows.append((f"job-{i:06d}", f"tasks.group{i % GROUPS}", score, changes))
    return rows


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    browser_available()
    require_redis_server()
    redis = RedisServer().start()
    try:
        started = time.perf_counter()
        write_entries(make_app(redis.url), dataset(time.time()))
        FIGURES["write 100,000 entries (s)"] = round(time.perf_counter() - started, 2)
        web = WebServer(redis.url, directory=tmp_path_factory.mktemp("web"))
        try:
            web.wait_ready()
            yield web
        finally:
            web.stop()
    finally:
        redis.cleanup()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "figures.json").write_text(json.dumps(FIGURES, indent=2))


FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="module")
def page(server: WebServer, browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    yield context.new_page()
    context.close()


def load(page: Any, url: str) -> float:
    started = time.perf_counter()
    response = page.goto(url)
    elapsed = time.perf_counter() - started
    assert response.status == 200, page.content()
    return elapsed


def column(page: Any, name: str) -> list[str]:
    return page.locator(f"#entries tbody td.{name}").all_inner_texts()


def test_pages_through_100000_entries(server: WebServer, page: Any) -> None:
    FIGURES["first page (s)"] = round(load(page, server.url + "/entries"), 3)
    assert page.inner_text("#summary").startswith(f"1–50 of {TOTAL}")
    names = column(page, "name")
    assert names[:3] == ["job-000001", "job-000002", "job-000003"]  # by next run
    screenshot(page, "entries")
    for _ in range(3):
        page.click("#next")
    assert page.inner_text("#summary").startswith(f"151–200 of {TOTAL}")
    page.click("#previous")
    assert page.inner_text("#summary").startswith(f"101–150 of {TOTAL}")
    # the last page: the parked (disabled) band comes after every scheduled entry
    FIGURES["last page, start=99950 (s)"] = round(
        load(page, server.url + f"/entries?start={TOTAL - 50}"), 3)
    assert page.inner_text("#summary").startswith(f"{TOTAL - 49}–{TOTAL} of {TOTAL}")
    assert set(column(page, "state")) == {"disabled"}
    assert column(page, "name")[-1] == "job-099900"
    assert page.locator("#next").count() == 0
    # the server's own measure of the read, shown on the page
    FIGURES["server read, last page (ms)"] = page.inner_text("#summary").rsplit(" in ", 1)[1]


def test_filters(server: WebServer, page: Any) -> None:
    load(page, server.url + "/entries?state=disabled")
    states = column(page, "state")
    assert len(states) == 50 and set(states) == {"disabled"}
    started = time.perf_counter()
    load(page, server.url + "/entries")
    page.fill("input[name=task]", "group7")
    page.select_option("select[name=state]", "enabled")
    page.click("button[type=submit]")
    FIGURES["task + state filter page (s)"] = round(time.perf_counter() - started, 3)
    tasks = column(page, "task")
    assert len(tasks) == 50 and set(tasks) == {"tasks.group7"}
    assert set(column(page, "state")) == {"enabled"}
    # a name found far down the order: a name-only filter reads members, not entries
    load(page, server.url + "/entries?name=job-04217")
    assert column(page, "name") == [f"job-04217{digit}" for digit in range(10)]
    screenshot(page, "entries-filtered")
    # past the budget, a page says so and offers to go on instead of reading everything
    load(page, server.url + "/entries?task=no-such-task")
    assert "stopped after 5000" in page.inner_text("#summary")
    page.click("#next")
    assert "from position 5000" in page.inner_text("#summary")


def test_sorts(server: WebServer, page: Any) -> None:
    FIGURES["sort by name, first request (s)"] = round(
        load(page, server.url + "/entries?order=name"), 3)
    names = column(page, "name")
    assert names == sorted(names) and names[0] == "job-000000"
    load(page, server.url + f"/entries?order=name&start={TOTAL - 50}")
    assert column(page, "name")[-1] == f"job-{TOTAL - 1:06d}"
    FIGURES["sort by last run, first request (builds the order) (s)"] = round(
        load(page, server.url + "/entries?order=last"), 3)
    FIGURES["sort by last run, next page (s)"] = round(
        load(page, server.url + "/entries?order=last&start=50"), 3)
    # by the absolute time (date and time): the relative part of two equal times may be
    # rendered either side of a second's boundary ("74 s ago", "75 s ago")
    lasts = [" ".join(text.split()[:2]) for text in column(page, "last")]
    assert "-" not in lasts and lasts == sorted(lasts, reverse=True)
    page.click("th a:text('Next run')")
    assert column(page, "name")[0] == "job-000001"


def test_the_timeline_of_100000_entries_is_partial_and_says_so(server: WebServer,
                                                                 page: Any) -> None:
    """Every entry here runs every minute: the first 20,000 by next run have all their
    runs counted, the rest once, and the page says so; a bar lists entries that run
    in its minute."""
    FIGURES["timeline, first request (computes it) (s)"] = round(
        load(page, server.url + "/timeline"), 3)
    FIGURES["timeline, computation (server)"] = page.inner_text("#figures").rsplit(
        " in ", 1)[1]
    partial = page.inner_text("#partial")
    assert "only the first 20000 entries by next run were expanded" in partial
    FIGURES["timeline, kept (s)"] = round(load(page, server.url + "/timeline"), 3)
    page.locator("#busiest tbody tr a").first.click()
    assert page.inner_text("#band").startswith("Entries with a run in the minute")
    assert page.inner_text("#summary").startswith("50 match(es)")

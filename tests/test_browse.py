"""redbeat.browse: where a query's entries are (a table), and what a page costs in Redis
commands, which must not grow with the schedule (a real redis-server, 5,000 entries
then 20,000)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from conftest import make_app
from redbeat import browse
from redbeat.browse import Query, Segment, locate, segments
from redbeat.keys import KeyLayout
from support.counting import counting_client, counting_commands
from support.web import write_entries

KEYS = KeyLayout()
SCHEDULE, FAILING = KEYS.schedule, KEYS.failing


@pytest.mark.parametrize(("query", "expected"), [
    (Query(), [Segment(SCHEDULE, 3, 10), Segment(SCHEDULE, 0, 3)]),  # parked last
    (Query(state="enabled"), [Segment(SCHEDULE, 3, 10)]),
    (Query(state="disabled"), [Segment(SCHEDULE, 0, 3), Segment(SCHEDULE, 3, 10)]),
    (Query(state="quarantined"), [Segment(SCHEDULE, 0, 3), Segment(SCHEDULE, 3, 10)]),
    (Query(state="finished", name="x"), [Segment(SCHEDULE, 0, 3)]),
    (Query(state="failing"), [Segment(FAILING, 0, 10, reverse=True)]),
    (Query(order="name"), [Segment(KEYS.view_by_name, 0, 10)]),
    (Query(order="last", task="t"), [Segment(KEYS.view_by_last_run, 0, 10, reverse=True)]),
])
def test_segments(query: Query, expected: list[Segment]) -> None:
    assert segments(query, KEYS, total=10, parked=3) == expected


def test_a_due_band_is_one_segment_of_the_schedule() -> None:
    assert segments(Query(due_from=5.0, due_to=65.0), KEYS, 0, 0, band=(4, 9)) == [
        Segment(SCHEDULE, 4, 9)]


@pytest.mark.parametrize(("position", "expected"), [
    (0, (Segment(SCHEDULE, 3, 10), 0)), (6, (Segment(SCHEDULE, 3, 10), 6)),
    (7, (Segment(SCHEDULE, 0, 3), 0)), (9, (Segment(SCHEDULE, 0, 3), 2)), (10, None)])
def test_locate(position: int, expected: Any) -> None:
    assert locate([Segment(SCHEDULE, 3, 10), Segment(SCHEDULE, 0, 3)], position) == expected


@pytest.mark.parametrize(("segment", "offset", "count", "ranks"), [
    (Segment(SCHEDULE, 3, 10), 0, 5, (3, 7)),
    (Segment(SCHEDULE, 3, 10), 5, 5, (8, 9)),  # cut at the segment's end
    (Segment(SCHEDULE, 0, 10, reverse=True), 0, 3, (7, 9)),
    (Segment(SCHEDULE, 0, 10, reverse=True), 8, 5, (0, 1)),
])
def test_ranks(segment: Segment, offset: int, count: int, ranks: tuple[int, int]) -> None:
    assert segment.ranks(offset, count) == ranks


def entries(count: int, now: float) -> list[tuple[str, str, float, dict[str, Any]]]:
    return [(f"job-{i:06d}", f"tasks.t{i % 5}", -1.0 if i % 10 == 0 else now + 60 + i,
             {"enabled": i % 10 != 0, "runs": i % 3}) for i in range(count)]


QUERIES = {
    "first page": Query(),
    "last page": "last",
    "by name": Query(order="name", start=100),
    "by last run": Query(order="last", start=100),
    "disabled": Query(state="disabled"),
    "task": Query(task="tasks.t3"),
}


def costs(app: Any, total: int) -> dict[str, tuple[int, int, int]]:
    """Commands, round trips and rows of each query's page."""
    found = {}
    for name, query in QUERIES.items():
        if query == "last":
            query = Query(start=total - browse.PAGE_SIZE)
        browse.read_page(app, query)  # builds the name and last-run orders once
        trips = app.redbeat_redis.counter.round_trips
        with counting_commands() as count:
            page = browse.read_page(app, query)
        found[name] = (count.total, app.redbeat_redis.counter.round_trips - trips,
                       len(page.rows))
    return found


def test_a_page_costs_the_same_commands_at_5000_and_20000_entries(redis_server: Any) -> None:
    app = make_app(redis_server.url)
    app.redbeat_redis = counting_client(redis_server.url)
    now = time.time()
    write_entries(app, entries(5_000, now))
    small = costs(app, 5_000)
    write_entries(app, entries(20_000, now))
    large = costs(app, 20_000)
    assert large == small, (small, large)
    assert all(rows == browse.PAGE_SIZE for _, _, rows in large.values())
    assert large["first page"][1] <= 3  # counts, the window, the rows


def test_a_name_search_is_matched_in_redis_in_every_order(redis_server: Any) -> None:
    app = make_app(redis_server.url)
    now = time.time()
    write_entries(app, entries(20_000, now))
    # a member that is no entry of this schedule never matches, whatever it contains
    redis_server.client().zadd("redbeat::schedule", {"other:job-012345": now + 5})
    wanted = [f"job-01234{digit}" for digit in range(10)]
    for order in browse.ORDERS:
        page = browse.read_page(app, Query(order=order, name="JOB-01234"))
        names = [info.name for info in page.rows]
        assert sorted(names) == wanted, order
        assert page.next_start is None and not page.budget_spent  # all read in one page
    by_name = browse.read_page(app, Query(order="name", name="job-01234"))
    assert [info.name for info in by_name.rows] == wanted


@pytest.mark.redis_server
def test_the_cli_and_the_web_list_the_same_entries_for_each_state(redis_server):
    """One engine: `redbeat list --state S` and the web view's state filter find the
    same entries, an entry disabled or broken by another client before the leader
    parked it (still at its score) included."""
    import json as json_module

    from click.testing import CliRunner

    from redbeat import RedBeatSchedulerEntry
    from redbeat.cli import main

    app = make_app(redis_server.url)
    client = redis_server.client()
    now = time.time()
    for number in range(12):
        RedBeatSchedulerEntry(f"e{number:02d}", "tasks.t", 60.0 + number, app=app,
                              enabled=number % 4 != 0).save()
    # written by another client and not yet read by a leader: still at a future score
    client.hset("redbeat:broken", "definition", "{not json")
    client.zadd("redbeat::schedule", {"redbeat:broken": now + 30})
    RedBeatSchedulerEntry("paused-late", "tasks.t", 60.0, app=app).save()
    client.hset("redbeat:paused-late", "definition", client.hget(
        "redbeat:paused-late", "definition").replace('"enabled": true', '"enabled": false'))
    RedBeatSchedulerEntry("done", "tasks.t", 60.0, app=app).save()
    client.zadd("redbeat::schedule", {"redbeat:done": -1})  # parked as a finished entry
    runner = CliRunner()
    for state in browse.STATES:
        web = [info.name for info in browse.read_page(app, Query(state=state, size=100)).rows]
        listed = runner.invoke(main, ["--url", redis_server.url, "list", "--json",
                                      "--state", state])
        cli = [json_module.loads(line)["name"] for line in listed.stdout.splitlines()]
        assert cli == web, state
    assert set(cli_names(runner, redis_server.url, "disabled")) == {
        "e00", "e04", "e08", "paused-late"}
    assert cli_names(runner, redis_server.url, "quarantined") == ["broken"]
    assert cli_names(runner, redis_server.url, "finished") == ["done"]


def cli_names(runner, url: str, state: str) -> list[str]:
    import json as json_module

    from redbeat.cli import main

    listed = runner.invoke(main, ["--url", url, "list", "--json", "--state", state])
    return [json_module.loads(line)["name"] for line in listed.stdout.splitlines()]

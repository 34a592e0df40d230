"""The operator API (redbeat.manage) goes through the store: a retried pipeline is built
again (redis-py's Pipeline.execute empties it, so retrying the built one ran nothing), and
``status`` costs the same round trips and a bounded number of reads whatever the number
of parked entries. Real redis-server."""

from __future__ import annotations

import redis
import redis.client

from conftest import make_app
from redbeat import RedBeatSchedulerEntry
from redbeat.manage import QUARANTINE_SAMPLE, import_entries, list_entries, status
from redbeat.runtime import store_for
from redbeat.schedulers import get_redis
from support.counting import counting_client


def fail_first_execute(monkeypatch) -> list[int]:
    """Make the next pipeline execute fail as a dropped connection would, once."""
    calls = []
    real = redis.client.Pipeline.execute

    def flaky(self, raise_on_error=True):
        calls.append(len(self.command_stack))
        if len(calls) == 1:
            self.reset()  # what redis-py does to a pipeline whose execute failed
            raise redis.exceptions.ConnectionError("connection dropped")
        return real(self, raise_on_error)

    monkeypatch.setattr(redis.client.Pipeline, "execute", flaky)
    return calls


def test_a_listing_retried_after_a_dropped_connection_still_lists_everything(
        app, monkeypatch):
    for name in ("a", "b", "c"):
        RedBeatSchedulerEntry(name, "tasks.x", 60.0, app=app).save()
    calls = fail_first_execute(monkeypatch)
    assert sorted(info.name for info in list_entries(app))[:3] == ["a", "b", "c"]
    assert calls[1] == calls[0] > 0  # the retry sent the commands again, not an empty pipe


def test_an_import_retried_after_a_dropped_connection_writes_its_entries(app, monkeypatch):
    document = {"format": "redbeat-export/1", "entries": [
        {"name": f"imp{i}", "definition": {
            "name": f"imp{i}", "task": "tasks.x",
            "schedule": {"__type__": "interval", "every": 10.0, "relative": False}}}
        for i in range(3)]}
    fail_first_execute(monkeypatch)
    plan = import_entries(app, document)
    assert plan.written == ["imp0", "imp1", "imp2"]
    assert all(get_redis(app).exists(f"redbeat:imp{i}") for i in range(3))


def test_status_reads_a_bounded_sample_of_parked_entries(redis_server):
    app = make_app(redis_server.url)
    client = get_redis(app)
    with client.pipeline(transaction=False) as pipe:
        for i in range(2000):
            pipe.hset(f"redbeat:parked{i}", mapping={"definition": "x", "quarantine":
                                                     '{"reason": "broken"}'})
            pipe.zadd("redbeat::schedule", {f"redbeat:parked{i}": -1})
        pipe.execute()
    counted = counting_client(redis_server.url)
    store_for(app).client = counted  # the same server, its round trips counted
    status(app)  # the connection's own handshake is not status's cost
    counted.counter.round_trips = 0
    state = status(app)
    assert state.parked == 2000
    assert len(state.quarantined) == QUARANTINE_SAMPLE
    assert counted.counter.round_trips == 1


def test_status_counts_score_zero_entries_as_waiting_not_overdue(app):
    client = get_redis(app)
    client.hset("redbeat:raw", "definition", "{}")
    client.zadd("redbeat::schedule", {"redbeat:raw": 0})
    state = status(app)
    assert (state.overdue, state.waiting, state.most_late_s) == (0, 1, 0.0)

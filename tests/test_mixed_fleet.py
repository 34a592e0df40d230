"""A real celery-redbeat 2.4.2 ``celery beat`` on the data this package writes.

Rolling back (or rolling out) means a 2.4.2 beat may run on our data, alone or next to
ours with the same lock. It must never exit, never send early, and never send a slot
twice; entries it cannot read (stored as disabled stubs, see redbeat.legacy) wait for one
of ours. The 2.4.2 processes run in their own interpreter (REDBEAT_REFERENCE_PYTHON)
with only the project dir on PYTHONPATH, so they import 2.4.2's ``redbeat``, not this one.

Sends are observed in the Redis broker queue (no worker): a thread notes when each
message id first appears, which is its send time to within the polling period. Each
phase lasts a number of sends, not of seconds, so a loaded machine only makes it longer.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
import redis
from celery.schedules import crontab, solar

from conftest import make_app
from redbeat import RedBeatSchedulerEntry, legacy
from redbeat.schedules import clocked, rrule
from redbeat.schedules import crontab as zoned_crontab
from support.processes import LIVENESS, Cluster
from support.reference import needs_reference, reference_python
from support.waiting import wait_until

pytestmark = [pytest.mark.e2e, needs_reference()]

LOCK_TIMEOUT = 3
#: Longest a lock change can leave a slot unsent: the dead leader's lock expiring, the
#: successor's next poll of it (2.4.2 sleeps beat_max_loop_interval between tries), a tick.
TAKEOVER = LOCK_TIMEOUT + 2.5
META_KEYS = {"last_run_at", "total_run_count"}  # 2.4.2 passes each to a constructor


class Sends:
    """Every message that reaches the broker queue, with when it was first seen."""

    def __init__(self, broker_url: str, period: float = 0.05) -> None:
        self.client = redis.Redis.from_url(broker_url)
        self.period = period
        # task id -> (task name, monotonic and epoch time first seen)
        self.seen: dict[str, tuple[str, float, float]] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stopping.is_set():
            now, wall = time.monotonic(), time.time()
            # kombu pushes on the left: read from the right, the oldest first, so sends
            # first seen in the same look keep their order (slots() sorts by the time
            # seen, and a sort keeps ties in order): a takeover's catch-up slot and the
            # next one, sent within one look, were read newest first, and the next one's
            # due time then came before the catch-up's ('a-iv' gaps [..., 3.14, -2.0])
            for raw in reversed(self.client.lrange("celery", 0, -1)):
                headers = json.loads(raw)["headers"]
                self.seen.setdefault(headers["id"], (headers["task"], now, wall))
            self.stopping.wait(self.period)

    def sent_after(self, task: str, after: float = 0.0) -> int:
        """Sends of ``task`` first seen after epoch time ``after``."""
        return sum(name == task and wall > after for name, _, wall in list(self.seen.values()))

    def wait_for(self, name: str, count: int = 1, after: float = 0.0) -> None:
        """Wait (liveness) until ``count`` sends of entry ``name`` were seen after ``after``."""
        wait_until(lambda: self.sent_after(f"mf.{name}", after) >= count, LIVENESS,
                   f"{count} sends of {name}", interval=0.05)

    def times(self, task: str) -> list[float]:
        return sorted(at for name, at, _ in list(self.seen.values()) if name == task)

    def slots(self, task: str, calendar: rrule | None = None) -> list[tuple[float, float]]:
        """(due, seen) epoch times of each send, in send order. Ours name the slot in the
        task id (``<name>:<due ms>``); 2.4.2's ids are random, so its slot is the latest
        time of the ``calendar`` rule by the send, or (for an interval, which 2.4.2 counts
        from each send) the send itself."""
        sends = []
        for task_id, (name, _, wall) in list(self.seen.items()):
            if name != task:
                continue
            _, _, due_ms = task_id.rpartition(":")
            if due_ms.isdigit():
                due = int(due_ms) / 1000
            elif calendar is not None:
                moment = datetime.fromtimestamp(wall, timezone.utc)
                due = calendar.rrule.before(moment, inc=True).timestamp()
            else:
                due = wall
            sends.append((due, wall))
        return sorted(sends, key=lambda send: send[1])

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(5)


@pytest.fixture
def fleet(tmp_path, redis_server):
    broker_url = redis_server.url[:-1] + "1"  # db 1 is the broker, db 0 the schedule
    cluster = Cluster(tmp_path, redis_server.url, broker_url,
                      redbeat_lock_timeout=LOCK_TIMEOUT, beat_max_loop_interval=1)
    sends = Sends(broker_url)
    yield cluster, sends, make_app(redis_server.url), redis_server.client()
    sends.stop()
    cluster.stop()


def save(app, name, schedule, **options) -> RedBeatSchedulerEntry:
    return RedBeatSchedulerEntry(name, f"mf.{name}", schedule, args=[name], app=app,
                                 **options).save()


def second(offset: float = 0.0) -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=offset)


def assert_no_crash(process) -> None:
    log = process.log()
    assert process.process.poll() is None, f"{process.name} exited\n{log}"
    for sign in ("Traceback", "Failed to load", "CRITICAL"):
        assert sign not in log, f"{process.name}: {sign}\n{log}"


def assert_meta_is_242s(client, keys) -> None:
    for key in keys:
        meta = client.hget(key, "meta")
        assert meta is None or set(json.loads(meta)) <= META_KEYS, (key, meta)


def assert_slots(sends: Sends, name: str, every: float, end: float | None = None,
                 calendar: rrule | None = None, longest: float | None = None) -> None:
    """Each send is a new slot, due at least half an interval after the previous one (so
    none twice, none early), sent no earlier than it was due; no slot gap beyond one
    takeover. (Two *sends* may be closer: after a takeover, the slot missed meanwhile is
    sent late, then the next on time, as after any failover of this package.)"""
    slots = sends.slots(f"mf.{name}", calendar)
    assert slots, name
    dues = [due for due, _ in slots]
    gaps = [b - a for a, b in zip(dues, dues[1:], strict=False)]
    assert min(gaps, default=every) >= every / 2, (name, gaps)
    assert max(gaps, default=0) <= (longest or every + TAKEOVER), (name, gaps)
    early = [(due, seen) for due, seen in slots if seen < due - 0.05]
    assert not early, (name, early)
    if end is not None:
        assert end - slots[-1][1] <= every + 1.5, (name, end - slots[-1][1])


def test_242_alone_runs_what_it_reads_and_skips_the_rest(fleet):
    cluster, sends, app, client = fleet
    start = second()
    minute_away = crontab(minute=(start.minute + 30) % 60)
    plain = {
        "iv": save(app, "iv", 1.0),
        "rr": save(app, "rr", rrule("SECONDLY", interval=2, dtstart=start - timedelta(minutes=1))),
        "cron": save(app, "cron", crontab(minute="*")),
        "cron-later": save(app, "cron-later", minute_away),  # sent now = sent early
    }
    paris = ZoneInfo("Europe/Paris")
    wrapped = {
        "cron-tz": save(app, "cron-tz", zoned_crontab(minute="*", timezone="Europe/London")),
        "rr-tz": save(app, "rr-tz", rrule("SECONDLY", interval=2,
                                          dtstart=start.astimezone(paris))),
        "once": save(app, "once", clocked(start + timedelta(seconds=2))),
        "off": save(app, "off", zoned_crontab(minute="*", timezone="Asia/Tokyo"),
                    enabled=False),
    }
    if importlib.util.find_spec("ephem"):
        wrapped["sun"] = save(app, "sun", solar("sunrise", 48.85, 2.35))
    stored = {name: client.hgetall(entry.key) for name, entry in wrapped.items()}
    assert all(legacy.MARKER in fields["definition"] for fields in stored.values())

    first_due = {name: client.zscore("redbeat::schedule", entry.key)
                 for name, entry in plain.items()}

    ref = cluster.beat("ref", python=reference_python())
    ref.wait_for("beat: Acquired lock")
    # saved while 2.4.2 runs, so it looks ahead at them (its tick loads what falls due
    # within beat_max_loop_interval) before they are due
    plain["iv-late"] = save(app, "iv-late", 3.0)
    plain["rr-late"] = save(app, "rr-late", rrule("SECONDLY", interval=3,
                                                  dtstart=second(1)))
    for name in ("iv-late", "rr-late"):
        first_due[name] = client.zscore("redbeat::schedule", plain[name].key)
    for name, count in {"iv": 6, "rr": 3, "iv-late": 2, "rr-late": 2}.items():
        sends.wait_for(name, count)  # meanwhile 2.4.2 had every chance to send the others
    end = time.time()
    assert_no_crash(ref)
    sent = {name: len(sends.times(f"mf.{name}")) for name in [*plain, *wrapped]}
    for name in ("iv", "rr", "iv-late", "rr-late"):  # never before the due time we stored
        first = sends.slots(f"mf.{name}")[0][1]
        assert first >= first_due[name] - 0.05, (name, first, first_due[name])
    assert_slots(sends, "iv", 1.0, end)
    assert_slots(sends, "iv-late", 3.0, end)
    assert_slots(sends, "rr-late", 3.0, end, plain["rr-late"].schedule)
    assert_slots(sends, "rr", 2.0, end, plain["rr"].schedule)
    assert sent["cron-later"] == 0, (sent, "2.4.2 sent a crontab half an hour early")
    assert all(sent[name] == 0 for name in wrapped), sent
    for name, entry in wrapped.items():  # 2.4.2 wrote nothing to the stubs
        assert client.hgetall(entry.key) == stored[name], name
    keys = [entry.key for entry in [*plain.values(), *wrapped.values()]]
    assert set(keys) <= set(client.zrange("redbeat::schedule", 0, -1))
    assert_meta_is_242s(client, keys)


def test_mixed_fleet_through_a_leader_kill_each_way(fleet):
    cluster, sends, app, client = fleet
    t0 = second()
    paris = ZoneInfo("Europe/Paris")
    ours = cluster.beat("ours1")
    ours.wait_for("Leading as")
    ref = cluster.beat("ref", python=reference_python())
    ref.wait_for("beat: Starting")  # then it blocks on the lock
    every = {"a-iv": 2.0, "a-rr": 3.0, "a-rr-tz": 2.0, "b-iv": 2.0, "c-iv": 2.0}
    save(app, "a-iv", 2.0)
    a_rr = save(app, "a-rr", rrule("SECONDLY", interval=3, dtstart=t0 - timedelta(minutes=1)))
    save(app, "a-rr-tz", rrule("SECONDLY", interval=2, dtstart=t0.astimezone(paris)))
    for name in ("a-iv", "a-rr", "a-rr-tz"):
        sends.wait_for(name)

    assert_no_crash(ref)
    ours.kill()  # SIGKILL: the lock stays until it expires
    ref_leads = ref.wait_for("beat: Acquired lock")
    save(app, "b-iv", 2.0)
    once_due = second(2)
    save(app, "b-once", clocked(once_due))  # 2.4.2 cannot run it: ours will, late
    ours2 = cluster.beat("ours2")
    ours2.wait_for("Standing by")
    # 2.4.2 leads on past b-once's due time: it sends b-iv, and the stub entries wait
    sends.wait_for("b-iv", 2)
    sends.wait_for("b-iv", 1, after=once_due.timestamp())

    assert_no_crash(ref)
    assert_no_crash(ours2)
    ref_killed = time.monotonic()
    ref_killed_at = time.time()
    ref.kill()
    ours2.wait_for("Leading as")
    ours2_leads = time.time()
    save(app, "c-iv", 2.0)
    # b-once is sent once, maybe by ours2's first tick before this test has read "Leading
    # as" in its log (a CI run at load ~4 waited for it in vain): counted from the kill
    sends.wait_for("b-once", 1, after=ref_killed_at)
    for name in every:  # each sent again under ours
        sends.wait_for(name, 1, after=ours2_leads)
    end = time.time()

    assert_no_crash(ours2)
    for name in ("a-iv", "b-iv", "c-iv"):  # 2.4.2 reads these: sent throughout
        assert_slots(sends, name, every[name], end)
    assert_slots(sends, "a-rr", every["a-rr"], end, a_rr.schedule)
    wrapped = sends.times("mf.a-rr-tz")
    # the stub's entry waits while 2.4.2 leads, and runs under ours before and after
    assert not [at for at in wrapped if ref_leads < at < ref_killed], wrapped
    assert [at for at in wrapped if at < ref_leads] and [at for at in wrapped if at > ref_killed]
    waited = ref_killed - ref_leads + 2 * TAKEOVER
    assert_slots(sends, "a-rr-tz", every["a-rr-tz"], end, longest=every["a-rr-tz"] + waited)
    once = sends.times("mf.b-once")
    assert len(once) == 1 and once[0] > ref_killed, (once, ref_killed)
    assert_meta_is_242s(client, client.zrange("redbeat::schedule", 0, -1))

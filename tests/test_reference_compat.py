"""Both ways with the real celery-redbeat 2.4.2, run in its own interpreter.

REDBEAT_REFERENCE_PYTHON names a Python with celery-redbeat 2.4.2 installed (.ci/run
builds one). Without it these tests skip, except in CI (REDBEAT_REQUIRE_REDIS), where
they fail, so the compatibility claim is always checked there.
"""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta, timezone

from celery.schedules import crontab

from redbeat import RedBeatSchedulerEntry
from redbeat.schedules import rrule
from support import reference
from support.recording import Recording
from support.reference import needs_reference

pytestmark = needs_reference()


def run_reference(script: str, url: str) -> dict:
    """Run ``script`` under 2.4.2 with an app on ``url``; the last line it prints, as JSON."""
    prelude = textwrap.dedent(f"""
        import json, sys
        from celery import Celery
        app = Celery('ref', broker='memory://')
        app.conf.redbeat_redis_url = {url!r}
        app.conf.timezone = 'UTC'
    """)
    output = reference.run_reference(prelude + textwrap.dedent(script))
    return json.loads(output.strip().splitlines()[-1])


def an_hour_ago() -> datetime:
    """The dtstart of the minutely rrules: 2.4.2 works out an rrule's next run by walking
    dateutil's runs from dtstart to the moment asked (its save and its tick ask about
    now), one step a minute: from 2026-01-01 that was seconds of CPU per question, and
    more every day."""
    return datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(hours=1)


def test_what_we_write_runs_under_242(app, redis_server):
    long_ago = datetime(2026, 1, 1, tzinfo=timezone.utc)
    entries = [
        RedBeatSchedulerEntry("iv", "tasks.iv", 5.0, args=["h\u00e9", 2], kwargs={"k": [1]},
                              options={"queue": "q"}, app=app, last_run_at=long_ago),
        RedBeatSchedulerEntry("cron", "tasks.cron", crontab(minute="*"), app=app,
                              last_run_at=long_ago),
        RedBeatSchedulerEntry("rr", "tasks.rr", rrule("MINUTELY", dtstart=an_hour_ago()),
                              app=app, last_run_at=long_ago),
        RedBeatSchedulerEntry("off", "tasks.off", 5.0, enabled=False, app=app),
    ]
    for entry in entries:
        entry.save()
    ours = Recording(app)
    ours.tick()
    ours.tick()  # one run each: meta now has total_run_count, plus history and pending
    ours.close()
    for key in ("redbeat:iv", "redbeat:cron", "redbeat:rr"):
        # due again for the reference tick, keeping the run count our tick wrote
        RedBeatSchedulerEntry.from_key(key, app=app).reschedule(last_run_at=long_ago)
    report = run_reference("""
        from celery.signals import beat_init
        from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
        loaded = {}
        for name in ('iv', 'cron', 'rr', 'off'):
            e = RedBeatSchedulerEntry.from_key('redbeat:' + name, app=app)
            loaded[name] = [e.task, e.args, e.kwargs, e.options, e.enabled, e.total_run_count]
        sent = []
        class R(RedBeatScheduler):
            def apply_async(self, entry, producer=None, advance=True, **kw):
                sent.append(entry.name)
        s = R(app=app)
        class Service: scheduler = s
        beat_init.send(sender=Service())
        s.tick()
        print(json.dumps({'loaded': loaded, 'sent': sorted(sent)}))
    """, redis_server.url)
    assert report["loaded"]["iv"] == ["tasks.iv", ["h\u00e9", 2], {"k": [1]}, {"queue": "q"},
                                      True, 1]
    assert report["loaded"]["off"][4] is False
    assert report["sent"] == ["cron", "iv", "rr"]


def test_what_242_writes_runs_here(app, redis_server):
    run_reference(f"""
        from datetime import datetime, timezone
        from celery.schedules import crontab
        from redbeat import RedBeatSchedulerEntry
        from redbeat.schedules import rrule
        past = datetime(2026, 1, 1, tzinfo=timezone.utc)
        recent = datetime.fromisoformat({an_hour_ago().isoformat()!r})
        for e in (
            RedBeatSchedulerEntry('iv', 'tasks.iv', 5.0, args=[1], app=app),
            RedBeatSchedulerEntry('cron', 'tasks.cron', crontab(minute='*'), app=app),
            RedBeatSchedulerEntry('rr', 'tasks.rr', rrule('MINUTELY', dtstart=recent), app=app),
        ):
            e.save()
            e.reschedule(last_run_at=past)
        print(json.dumps({{}}))
    """, redis_server.url)
    ours = Recording(app)
    ours.tick()
    ours.tick()
    assert sorted(name for name, _ in ours.sent) == ["cron", "iv", "rr"]
    ours.close()


def test_242_runs_an_entry_with_outcome_policies_on_its_slots(app, redis_server):
    """Issue 27's policies and the workers' ``run`` field are invisible to 2.4.2: it loads
    such an entry and sends it on its schedule, as it would without them."""
    long_ago = datetime(2026, 1, 1, tzinfo=timezone.utc)
    RedBeatSchedulerEntry("waits", "tasks.w", 5.0, app=app, last_run_at=long_ago,
                          overlap="skip", relative_to="execution", lost_after=60).save()
    client = redis_server.client()
    client.hset("redbeat:waits", "run", json.dumps({
        "task_id": "waits:1", "due_ms": 1, "state": "running", "at": 1, "wake": True}))
    report = run_reference("""
        from celery.signals import beat_init
        from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
        e = RedBeatSchedulerEntry.from_key('redbeat:waits', app=app)
        sent = []
        class R(RedBeatScheduler):
            def apply_async(self, entry, producer=None, advance=True, **kw):
                sent.append(entry.name)
        s = R(app=app)
        class Service: scheduler = s
        beat_init.send(sender=Service())
        s.tick()
        print(json.dumps({'task': e.task, 'sent': sent}))
    """, redis_server.url)
    assert report == {"task": "tasks.w", "sent": ["waits"]}

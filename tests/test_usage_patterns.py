"""Code that public projects wrote around celery-redbeat, run against this package.

Each test is one project's way of using celery-redbeat, found in its public repository
(named in the test's header) and written here anew as a small script: the same calls,
in the same order, on the same kinds of values, reporting what it observed as JSON. The
script runs in a process of its own (forked from an interpreter that has imported Celery:
support/forked.py) with this package, and, where a Python with
celery-redbeat 2.4.2 is known (REDBEAT_REFERENCE_PYTHON; CI sets it), again under 2.4.2:
both must report the same, except where docs/compatibility.md names the difference,
which the test then names too. Each implementation gets its own database of a real
redis-server.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from support.forked import run_script
from support.reference import reference_python

SRC = Path(__file__).resolve().parent.parent / "src"

PRELUDE = """
import json
from celery import Celery

URL = {url!r}
app = Celery("patterns", broker="memory://", set_as_current=False)
app.conf.redbeat_redis_url = URL
app.conf.timezone = "UTC"


def report(**values):
    print(json.dumps(values, sort_keys=True, default=str))
"""


def run(python: str, script: str, url: str, ours: bool) -> dict[str, Any]:
    source = textwrap.dedent(PRELUDE).format(url=url) + textwrap.dedent(script)
    result = run_script(python, str(SRC) if ours else "", source)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def on_database(url: str, number: int) -> str:
    return url.rsplit("/", 1)[0] + f"/{number}"


COMPATIBILITY = (Path(__file__).resolve().parent.parent / "docs" / "compatibility.md")


def observe(redis_server: Any, script: str,
            documented: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``script`` reports here; checked to be what it reports under 2.4.2 when a
    Python with 2.4.2 is known, except the values ``documented`` names: each maps a
    reported name to the row of docs/compatibility.md's differences that explains it."""
    documented = documented or {}
    for row in documented.values():
        assert row in COMPATIBILITY.read_text(), row
    ours = run(sys.executable, script, on_database(redis_server.url, 1), ours=True)
    reference = reference_python()
    if reference is not None:
        theirs = run(reference, script, on_database(redis_server.url, 2), ours=False)
        same = {name: value for name, value in ours.items() if name not in documented}
        assert same == {name: value for name, value in theirs.items()
                        if name not in documented}, {"here": ours, "celery-redbeat 2.4.2": theirs}
    return ours


# -- preftech/redbeat_manager (schedule.py, redis_manager.py) -----------------------------
# Entries saved with Celery interval schedules and task arguments; the manager lists them
# by reading the schedule's sorted set through ``schedulers.get_redis`` and a
# ``RedBeatConfig`` built on the app, then loading each member with ``from_key``.

def test_preftech_redbeat_manager_lists_the_sorted_set(redis_server):
    seen = observe(redis_server, """
        from celery.schedules import schedule
        from redbeat import RedBeatSchedulerEntry, schedulers

        RedBeatSchedulerEntry("POC.add", "POC.add", schedule(run_every=30), app=app,
                              args=[3, 4]).save()
        RedBeatSchedulerEntry("POC.mul", "POC.mul", schedule(run_every=60), app=app,
                              args=[5, 6]).save()
        client = schedulers.get_redis(app)
        config = schedulers.RedBeatConfig(app)
        members = client.zrange(config.schedule_key, 0, -1)
        entries = [schedulers.RedBeatSchedulerEntry.from_key(key, app=app) for key in members]
        report(schedule_key=config.schedule_key,
               entries=sorted([e.name, e.task, list(e.args)] for e in entries))
    """)
    assert seen == {"schedule_key": "redbeat::schedule",
                    "entries": [["POC.add", "POC.add", [3, 4]], ["POC.mul", "POC.mul", [5, 6]]]}


# -- Theo-automate/RedBeat-Task-Schedule-Manager (redis_utils.py) --------------------------
# A client of its own without decode_responses lists the keys under the prefix with KEYS,
# asks each one's TYPE and reads it by type, a hash's fields as JSON where they parse.

def test_theo_automate_reads_every_key_by_its_type(redis_server):
    seen = observe(redis_server, """
        import redis
        from redbeat import RedBeatSchedulerEntry

        RedBeatSchedulerEntry("report", "tasks.report", 120.0, app=app,
                              kwargs={"fmt": "pdf"}).save()
        own = redis.Redis.from_url(URL)  # bytes replies
        found = {}
        for raw in own.keys("redbeat:*"):
            key = raw.decode()
            kind = own.type(key).decode()
            if kind == "hash":
                fields = {}
                for field, value in own.hgetall(key).items():
                    try:
                        fields[field.decode()] = json.loads(value)
                    except ValueError:
                        fields[field.decode()] = value.decode()
                found[key] = {"type": kind, "task": fields["definition"]["task"],
                              "kwargs": fields["definition"]["kwargs"]}
            else:
                found[key] = {"type": kind}
        report(found=found)
    """)
    assert seen["found"]["redbeat:report"] == {"type": "hash", "task": "tasks.report",
                                                "kwargs": {"fmt": "pdf"}}


# -- comaserious/redbeat-scheduler-test (test_01/app/scheduler.py) ------------------------
# One entry per user, named with colons, every keyword spelled out (enabled=True).

def test_comaserious_saves_one_entry_per_user(redis_server):
    seen = observe(redis_server, """
        from celery.schedules import schedule
        from redbeat import RedBeatSchedulerEntry

        def create_10s_schedule(user_id):
            name = f"user:{user_id}:add_random_10s"
            RedBeatSchedulerEntry(name=name, task="tasks.add_random_numbers",
                                  schedule=schedule(10.0), app=app, args=[], kwargs={},
                                  enabled=True).save()
            return name

        name = create_10s_schedule("42")
        entry = RedBeatSchedulerEntry.from_key("redbeat:" + name, app=app)
        report(name=entry.name, key=entry.key, enabled=entry.enabled,
               every=entry.schedule.run_every.total_seconds())
    """)
    assert seen == {"name": "user:42:add_random_10s", "key": "redbeat:user:42:add_random_10s",
                    "enabled": True, "every": 10.0}


# -- parad0x96/django-redbeat (django_redbeat/models.py) ----------------------------------
# A model mirrors an entry: ``from_key(key=...)`` with no app (Celery's current app), a
# failure meaning "create it", a schedule given as seconds, then the schedule changed
# through the loaded entry and saved, then deleted.

def test_parad0x96_django_model_mirrors_an_entry(redis_server):
    seen = observe(redis_server, """
        from celery.schedules import schedule
        from redbeat import RedBeatSchedulerEntry as Entry

        app.set_current()
        try:
            Entry.from_key(key="redbeat:nightly")
            created = False
        except Exception:
            Entry(name="nightly", task="app.tasks.cleanup", args=[1, 2], schedule=10,
                  app=app).save()
            created = True
        entry = Entry.from_key("redbeat:nightly", app=app)
        entry.schedule = schedule(run_every=20)
        entry.save()
        every = Entry.from_key("redbeat:nightly", app=app).schedule.run_every.total_seconds()
        entry.delete()
        try:
            Entry.from_key("redbeat:nightly", app=app)
            gone = False
        except KeyError:
            gone = True
        report(created=created, every=every, gone=gone)
    """)
    assert seen == {"created": True, "every": 20.0, "gone": True}


# -- SaralynOgden/CeleryRedbeatPOC (api/app.py) --------------------------------------------
# A Flask route saves an entry named from its URL ("1 + 2"), the schedule a bare int in
# the third position, arguments and keyword arguments given.

def test_saralynogden_positional_int_schedule(redis_server):
    seen = observe(redis_server, """
        from redbeat import RedBeatSchedulerEntry

        name = "{} + {}".format(1, 2)
        RedBeatSchedulerEntry(name, "tasks.add", 30, args=[1, 2],
                              kwargs={"schedule_name": name}, app=app).save()
        entry = RedBeatSchedulerEntry.from_key("redbeat:1 + 2", app=app)
        report(args=entry.args, kwargs=entry.kwargs,
               every=entry.schedule.run_every.total_seconds())
    """)
    assert seen == {"args": [1, 2], "kwargs": {"schedule_name": "1 + 2"}, "every": 30.0}


# -- shonteag/redbeat-example (add_task.py) ------------------------------------------------
# The shortest form: name, task, seconds, a tuple of arguments; the key printed.

def test_shonteag_shortest_form(redis_server):
    seen = observe(redis_server, """
        from redbeat import RedBeatSchedulerEntry as Entry

        entry = Entry("thingo", "cluster.add_task", 10, args=(5, 10), app=app)
        entry.save()
        stored = json.loads(Entry.from_key(entry.key, app=app).app.redbeat_redis.hget(
            entry.key, "definition"))
        report(key=entry.key, args=stored["args"], every=stored["schedule"]["every"])
    """)
    assert seen == {"key": "redbeat:thingo", "args": [5, 10], "every": 10.0}


# -- gduverger/crono (crono/triggers.py) ---------------------------------------------------
# Triggers reach the schedules through the package attribute after ``import redbeat``: a
# one-off as ``redbeat.schedules.rrule(SECONDLY, dtstart=<naive UTC>, count=1)``, an
# interval from ``celery.schedules.schedule``, a crontab from a five-field expression.

def test_gduverger_crono_triggers(redis_server):
    seen = observe(redis_server, """
        import datetime
        import celery.schedules
        import redbeat

        start = datetime.datetime.utcnow() + datetime.timedelta(hours=1)
        triggers = {
            "on": redbeat.schedules.rrule(redbeat.schedules.SECONDLY, dtstart=start,
                                          count=1, app=app),
            "every": celery.schedules.schedule(run_every=90, app=app),
            "cron": celery.schedules.crontab(*"*/5 * * * *".split(" ")[:2], app=app),
        }
        for name, trigger in triggers.items():
            redbeat.RedBeatSchedulerEntry(name, "crono.tasks.run", trigger, app=app).save()
        loaded = {name: redbeat.RedBeatSchedulerEntry.from_key("redbeat:" + name, app=app)
                  for name in triggers}
        report(kinds={name: type(e.schedule).__name__ for name, e in loaded.items()},
               count=loaded["on"].schedule.count,
               waits_an_hour=3500 < loaded["on"].schedule.remaining_estimate(
                   datetime.datetime.now(datetime.timezone.utc)).total_seconds() <= 3600)
    """)
    assert seen == {"kinds": {"on": "rrule", "every": "schedule", "cron": "crontab"},
                    "count": 1, "waits_an_hour": True}


# -- mozilla/telemetry-analysis-service (atmo/jobs/schedules.py) --------------------------
# A job's schedule object builds its entry (a timedelta interval carrying the app, a
# tuple of arguments), gets it back through ``from_key`` (KeyError: none), adds and
# deletes it, saying whether there was one to delete.

def test_mozilla_atmo_job_schedule(redis_server):
    seen = observe(redis_server, """
        from datetime import timedelta
        from celery.schedules import schedule
        from redbeat.schedulers import RedBeatSchedulerEntry

        class JobSchedule:
            task = "atmo.jobs.tasks.run_job"

            def __init__(self, pk, hours):
                self.pk, self.name = pk, f"{self.task}:{pk}"
                self.every = timedelta(hours=hours)

            def build(self):
                return RedBeatSchedulerEntry(
                    name=self.name, task=self.task,
                    schedule=schedule(run_every=self.every, app=app),
                    args=(self.pk,), kwargs={}, app=app)

            def get(self):
                try:
                    return RedBeatSchedulerEntry.from_key(self.build().key, app=app)
                except KeyError:
                    return None

            def add(self):
                return self.build().save()

            def delete(self):
                entry = self.get()
                if entry is None:
                    return False
                entry.delete()
                return True

        job = JobSchedule(7, 24)
        before = job.get()
        job.add()
        found = job.get()
        report(before=before, args=list(found.args), task=found.task,
               hours=found.schedule.run_every.total_seconds() / 3600,
               deleted=job.delete(), after=job.get(), again=job.delete())
    """)
    assert seen == {"before": None, "args": [7], "task": "atmo.jobs.tasks.run_job",
                    "hours": 24.0, "deleted": True, "after": None, "again": False}


# -- panuta/wealth-crawler-advanced (server/celery_app.py) --------------------------------
# Beat configured in code: redbeat as beat_scheduler, a 5 s loop, one static entry every
# 30 s, and locking turned off (redbeat_lock_key = None) with a 5 s lock timeout.

def test_panuta_config_without_a_lock(redis_server):
    seen = observe(redis_server, """
        from redbeat import RedBeatScheduler, RedBeatSchedulerEntry

        app.conf.update(
            beat_scheduler="redbeat.RedBeatScheduler",
            beat_max_loop_interval=5,
            beat_schedule={"check-scrapyd-jobs": {"task": "server.tasks.scrapyd.listjobs",
                                                  "schedule": 30}},
            redbeat_lock_key=None,
            redbeat_lock_timeout=5,
        )
        beat = RedBeatScheduler(app)
        static = RedBeatSchedulerEntry.from_key("redbeat:check-scrapyd-jobs", app=app)
        wait = beat.tick()
        report(lock_key=beat.lock_key, task=static.task,
               statics=sorted(app.redbeat_redis.smembers("redbeat::statics")),
               waits=0 < wait <= 30)
    """, documented={"statics": "| Celery's default statics (`celery.backend_cleanup`) |"})
    # Celery's own backend_cleanup (results expire, the memory backend cannot expire
    # them) is recorded among the statics here, so it is removed again once unneeded
    assert seen == {"lock_key": None, "task": "server.tasks.scrapyd.listjobs",
                    "statics": ["celery.backend_cleanup", "check-scrapyd-jobs"], "waits": True}


# -- hamedsh/redBeat_example (urlSpeed.py) -------------------------------------------------
# A command line adds a URL check named from a user key (the repeat an int of seconds,
# the arguments a list) and prints the entry's key, which a later call gives back to
# ``from_key`` to delete it.

def test_hamedsh_add_then_delete_by_key(redis_server):
    seen = observe(redis_server, """
        from redbeat import RedBeatSchedulerEntry as Entry

        entry = Entry("urlCheck_home", "tasks.urlSpeed", 5,
                      args=["GET", "https://example.org", 5, "home"], app=app)
        entry.save()
        key = entry.key
        client = app.redbeat_redis
        existed = client.exists(key)
        Entry.from_key(key, app=app).delete()
        report(key=key, existed=existed, exists=client.exists(key),
               member=client.zscore("redbeat::schedule", key))
    """)
    assert seen == {"key": "redbeat:urlCheck_home", "existed": 1, "exists": 0,
                    "member": None}


# -- deliveree/celery-beat-schedulers (console_update.py) ---------------------------------
# A running schedule changed from a console: an entry loaded, its schedule replaced and
# saved, its arguments replaced and saved, then deleted.

def test_deliveree_console_updates(redis_server):
    seen = observe(redis_server, """
        from celery.schedules import schedule
        from redbeat import RedBeatSchedulerEntry as Entry

        Entry("task_259", "tasks.say", schedule(10), args=["Hello"], app=app).save()
        e = Entry.from_key("redbeat:task_259", app=app)
        e.schedule = schedule(5)
        e.save()
        e.args = ["Goodbye"]
        e.save()
        again = Entry.from_key("redbeat:task_259", app=app)
        every, args = again.schedule.run_every.total_seconds(), again.args
        e.delete()
        try:
            Entry.from_key("redbeat:task_259", app=app)
            gone = False
        except KeyError:
            gone = True
        report(every=every, args=args, gone=gone)
    """)
    assert seen == {"every": 5.0, "args": ["Goodbye"], "gone": True}


# -- sibson/redbeat (tests/basecase.py of its releases before 2.x) -------------------------
# The test base that downstream suites copied: the key prefix given through
# ``add_defaults`` under both its names, a fresh client assigned to ``app.redbeat_redis``
# for each test (``FakeStrictRedis(decode_responses=True)``; a real client on a flushed
# database where fakeredis is not installed, as in CI's 2.4.2 environment), an entry
# saved and its stored definition read back through that client. (On Celery 5 defaults
# added once the app is configured are not seen by either package: the keys keep the
# default prefix, under 2.4.2 too.)

def test_sibson_basecase_fresh_client_per_test(redis_server):
    seen = observe(redis_server, """
        import redis
        from celery.schedules import schedule
        from redbeat import RedBeatSchedulerEntry

        try:
            from fakeredis import FakeStrictRedis

            def fresh():
                return FakeStrictRedis(decode_responses=True)
        except ImportError:
            def fresh():
                return redis.Redis.from_url(URL, decode_responses=True)

        app.conf.add_defaults({"REDBEAT_KEY_PREFIX": "rb-tests:",
                               "redbeat_key_prefix": "rb-tests:"})
        seen = []
        for test in ("first", "second"):
            app.redbeat_redis = fresh()
            app.redbeat_redis.flushdb()
            entry = RedBeatSchedulerEntry(test, "tasks.test", schedule(run_every=60),
                                          app=app)
            entry.save()
            stored = json.loads(app.redbeat_redis.hget(entry.key, "definition"))
            seen.append([sorted(app.redbeat_redis.keys("*")), stored["task"],
                         stored["enabled"]])
        report(seen=seen)
    """)
    assert seen == {"seen": [[["redbeat::schedule", "redbeat:first"], "tasks.test", True],
                             [["redbeat::schedule", "redbeat:second"], "tasks.test", True]]}

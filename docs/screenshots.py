"""Regenerate the screenshots of docs/web.md: every page of the web view, at desktop and
phone width (and the entries in dark mode), from a demo schedule run by a real beat.

    PYTHONPATH=src python docs/screenshots.py        # writes docs/images/web-*.png

It starts its own redis-server, a real ``celery beat`` (redbeat) for a few seconds so
entries have a history, the real ``redbeat web`` command and Debian's headless Chromium
(/usr/bin/chromium, through Playwright), as the browser tests do (tests/support), and
stops each by its own pid.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_app  # noqa: E402
from redbeat import RedBeatSchedulerEntry, manage  # noqa: E402
from redbeat.entry_input import parse_solar  # noqa: E402
from redbeat.policy import EntryPolicy  # noqa: E402
from redbeat.schedule_text import parse_cron, parse_rrule, parse_time  # noqa: E402
from redbeat.schedules import clocked  # noqa: E402
from support.processes import Cluster  # noqa: E402
from support.redis_server import RedisServer  # noqa: E402
from support.web import WebServer, chromium, write_entries  # noqa: E402

IMAGES = ROOT / "docs" / "images"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def demo(app: Any, redis: RedisServer) -> None:
    """A schedule an operator might have: each kind, options, a policy, disabled, a
    static and an unreadable entry, and a crowd of minutely ones for the timeline."""
    entries = [
        RedBeatSchedulerEntry("heartbeat", "beatapp.record", 2.0, args=["ping"], app=app),
        RedBeatSchedulerEntry("sync-crm", "beatapp.record", 5.0, kwargs={"full": False},
                              options={"queue": "celery", "priority": 3}, app=app),
        RedBeatSchedulerEntry("nightly-report", "proj.tasks.report",
                              parse_cron("30 2 * * *", "Europe/Paris"), args=["daily"],
                              app=app, policy=EntryPolicy(misfire_grace_time=600,
                                                          jitter=30)),
        RedBeatSchedulerEntry("weekly-digest", "proj.tasks.digest",
                              parse_rrule("FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;"
                                          "BYSECOND=0", "Europe/Paris"), app=app),
        RedBeatSchedulerEntry("launch-email", "proj.tasks.announce",
                              clocked(parse_time("2031-03-04T09:00:00", "Europe/Paris")),
                              app=app, policy=EntryPolicy(ttl=86400)),
        RedBeatSchedulerEntry("lights-on", "proj.tasks.lights",
                              parse_solar("sunset 48.85,2.35"), app=app),
        RedBeatSchedulerEntry("old-cleanup", "proj.tasks.cleanup", 3600.0, app=app,
                              enabled=False),
    ]
    for entry in entries:
        entry.save(changed_by="python-api")
    client = redis.client()
    client.hset("redbeat:legacy-import", mapping={"definition": "{not json",
                                                  "meta": "{}"})
    client.zadd("redbeat::schedule", {"redbeat:legacy-import": -1})
    now = time.time()
    write_entries(app, [(f"poll-{i:03d}", "proj.tasks.poll", now + 3 * 3600 + i % 60 * 60,
                         {"every": 900.0}) for i in range(120)])


def shoot(page: Any, url: str, name: str, viewport: dict[str, int],
          full: bool = False) -> None:
    page.set_viewport_size(viewport)
    page.goto(url)
    path = IMAGES / f"web-{name}.png"
    page.screenshot(path=str(path), full_page=full)
    print(f"wrote {path.relative_to(ROOT)}")


def main() -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch, RedisServer() as redis:
        directory = Path(scratch)
        app = make_app(redis.url)
        app.conf.timezone = "Europe/Paris"
        demo(app, redis)
        cluster = Cluster(directory, redis.url, redis.url.replace("/0", "/1"),
                          timezone="Europe/Paris")
        web = WebServer(redis.url, directory=directory,
                        options=("--timezone", "Europe/Paris"))
        try:
            cluster.beat("beat").wait_for("Leading as")
            # marked static once the leader has synced beat_schedule (which has none,
            # and would have removed it): as a leader records an entry it wrote
            redis.client().sadd("redbeat::statics", "sync-crm")
            time.sleep(8)  # a few runs of the 2-s and 5-s entries: their history
            web.wait_ready()
            take(web.url, app)
        finally:
            web.stop()
            cluster.stop()


def take(url: str, app: Any) -> None:
    with chromium() as browser:
        page = browser.new_page()
        for suffix, viewport in (("", DESKTOP), ("-phone", PHONE)):
            shoot(page, url + "/entries", "entries" + suffix, viewport)
            shoot(page, url + "/entries?task=proj.tasks&state=enabled",
                  "entries-filtered" + suffix, viewport)
            shoot(page, url + "/entry?name=heartbeat", "entry" + suffix, viewport,
                  full=True)
            shoot(page, url + "/entry/edit?name=nightly-report", "form" + suffix, viewport,
                  full=True)
            shoot(page, url + "/timeline", "timeline" + suffix, viewport)
            shoot(page, url + "/nodes", "nodes" + suffix, viewport)
        page.set_viewport_size(DESKTOP)
        page.goto(url + "/entries/new")
        for field, value in {"name": "typo", "task": "proj.tasks.report",
                             "schedule": "61 * * * *", "zone": "Europe/Pariss",
                             "args_json": "[1,", "priority": "high"}.items():
            page.fill(f"[name={field}]", value)
        page.select_option("[name=kind]", "cron")
        page.click("#save")
        page.screenshot(path=str(IMAGES / "web-form-errors.png"), full_page=True)
        page.goto(url + "/entry/edit?name=nightly-report")
        page.click("#preview-button")
        page.locator("#preview").scroll_into_view_if_needed()
        page.screenshot(path=str(IMAGES / "web-form-preview.png"))
        page.goto(url + "/entry?name=old-cleanup")
        page.click("#action-delete")
        page.screenshot(path=str(IMAGES / "web-confirm.png"))
        page.goto(url + "/entries?task=proj.tasks.poll")
        page.check("#scope-filter")
        page.click("#bulk-disable")
        page.screenshot(path=str(IMAGES / "web-bulk-confirm.png"))
        page.goto(url + "/entry?name=sync-crm")
        page.click("#action-disable")
        page.screenshot(path=str(IMAGES / "web-static-confirm.png"))
        hostile = "<script>alert('name')</script>"
        RedBeatSchedulerEntry(hostile, "<img src=x onerror=alert('task')>", 60.0,
                              args=["</pre><svg onload=alert('args')>"], app=app).save()
        shoot(page, url + "/entry?name=" + quote(hostile), "xss-entry", DESKTOP)
        manage.delete_entry(app, hostile)
        manage.pause(app, by="web")
        shoot(page, url + "/nodes", "nodes-paused", DESKTOP)
        manage.resume(app)
        dark = browser.new_context(color_scheme="dark", viewport=DESKTOP).new_page()
        shoot(dark, url + "/entries", "entries-dark", DESKTOP)
        shoot(dark, url + "/entry?name=heartbeat", "entry-dark-phone", PHONE, full=True)
        print("wrote the form, confirmation and paused pages too")


if __name__ == "__main__":
    main()

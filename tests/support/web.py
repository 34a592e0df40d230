"""The web view's test kit: the real ``redbeat web`` command in a process of its own, a real
headless Chromium (Debian's, driven by Playwright), and a fast bulk writer of entries.

The server is stopped by its own pid. The browser is the system's ``/usr/bin/chromium``
(never a browser Playwright downloads); tests skip without it, except in CI.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from redbeat import RedBeatSchedulerEntry
from redbeat.entry import meta_json
from redbeat.runtime import store_for
from redbeat.settings import ensure_conf

from . import forked
from .redis_server import free_port, redis_required, stop_process

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
#: Features turned off beyond those Playwright turns off. In the headless mode of today's
#: Chromium each browser context preloads the address bar's drop-down, two WebUI pages
#: (chrome://omnibox-popup.top-chrome) in a renderer of their own: about 0.7 s of CPU per
#: context (measured: a context, a page and a load cost 1.3 s with it, 0.55 s without),
#: for browser UI no test sees. Pages are loaded and rendered as before.
DISABLED_FEATURES = ("WebUIOmniboxPopup", "WebUIOmniboxAimPopup")
#: Screenshots of each page, kept for docs/web.md and for looking at a failure.
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"


def browser_available() -> None:
    """Skip without Debian's chromium or Playwright, except in CI (REDBEAT_REQUIRE_REDIS),
    where that fails: .ci/run installs both."""
    missing = [] if os.path.exists(CHROMIUM) else [CHROMIUM]
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("playwright")
    if missing:
        message = f"browser tests need {', '.join(missing)}"
        if redis_required():
            pytest.fail(message)
        pytest.skip(message)


class WebServer:
    """``python -m redbeat --url URL [options] web ...`` on a free port, its output in a
    file: forked from the session's forker (support/forked.py), which has imported
    Celery, kombu and redis-py once (about 0.3 s of CPU a server instead of 0.7 s)."""

    def __init__(self, redis_url: str, *args: str, directory: Path,
                 env: dict[str, str] | None = None, options: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = directory / f"web-{self.port}.log"
        self.log_path.write_text("")
        environ = {**os.environ, **(env or {})}
        self.process = forked.start(
            sys.executable, os.environ.get("PYTHONPATH", ""),
            ["-m", "redbeat", "--url", redis_url, *options, "web", "--port", str(self.port),
             *args], os.getcwd(), environ, str(self.log_path), str(self.log_path))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 20.0, headers: dict[str, str] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"redbeat web exited:\n{self.log()}")
            try:
                fetch(self.url + "/nodes", headers=headers)
                return  # it answers (whatever the page says: some tests break Redis)
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"redbeat web did not answer:\n{self.log()}")

    def stop(self) -> None:
        stop_process(self.process)


def fetch(url: str, data: dict[str, str] | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, str]:
    """One HTTP request (a POST when ``data`` is given): status and body."""
    body = None if data is None else urllib.parse.urlencode(data).encode()
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def playwright_disabled_features() -> list[str] | None:
    """The features Playwright's own launch turns off (its ``--disable-features``), read
    from its driver's source; None if they are not found there. Chromium keeps only the
    last ``--disable-features`` it is given, so one of ours must list Playwright's too."""
    import playwright

    lib = Path(playwright.__file__).parent / "driver" / "package" / "lib"
    for source in (lib / "server" / "chromium" / "chromiumSwitches.js", lib / "coreBundle.js"):
        try:
            text = source.read_text(errors="replace")
        except OSError:
            continue
        found = re.search(r"\bdisabledFeatures\s*=\s*(?:\([^)]*\)\s*=>\s*)?\[(.*?)\]", text,
                          re.S)
        if found:
            listed = re.sub(r"//[^\n]*", "", found.group(1))
            return re.findall(r"[\"']([A-Za-z0-9_]+)[\"']", listed)
    return None


def chromium_args() -> list[str]:
    """CHROMIUM_ARGS, and DISABLED_FEATURES added to Playwright's own list of features it
    turns off; without that list (a Playwright that keeps it elsewhere) Playwright's
    own is left as it is and ours are not turned off."""
    theirs = playwright_disabled_features()
    if not theirs:
        return list(CHROMIUM_ARGS)
    features = [*theirs, *(name for name in DISABLED_FEATURES if name not in theirs)]
    return [*CHROMIUM_ARGS, "--disable-features=" + ",".join(features)]


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser (Playwright's ``Browser``): conftest's ``browser``
    launches one per test worker."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=chromium_args())
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    return path


def write_entries(app: Celery, entries: list[tuple[str, str, float, dict[str, Any]]],
                  chunk: int = 10_000) -> None:
    """Write many entries fast, as ``save()`` would store them: ``(name, task, score,
    changes)`` where ``changes`` may set ``enabled``, ``args``, ``every`` (seconds) and
    ``runs`` (a last run ``runs`` intervals before the call). A definition is encoded
    once per distinct shape and copied with the name and task substituted, a meta once
    per interval and count of runs; each chunk is one script call (atomic, as a
    transaction would be)."""
    keys = ensure_conf(app).keys
    store = store_for(app)
    templates: dict[tuple[float, bool, str], str] = {}
    metas: dict[tuple[float, int], str] = {}
    tasks: dict[str, str] = {}
    never_ran = meta_json(None, 0)
    now = time.time()
    quoted = json.encoder.encode_basestring_ascii  # what json.dumps does to a str

    def definition(name: str, task: str, changes: dict[str, Any]) -> str:
        every, enabled = float(changes.get("every", 60.0)), bool(changes.get("enabled", True))
        args = changes.get("args", [])
        shape = (every, enabled, repr(args))
        if shape not in templates:
            templates[shape] = RedBeatSchedulerEntry(
                NAME_MARK, TASK_MARK, every, args=args, app=app,
                enabled=enabled).definition_json()
        if task not in tasks:
            tasks[task] = quoted(task)
        return templates[shape].replace(NAME_JSON, quoted(name)).replace(
            TASK_JSON, tasks[task])

    def meta(changes: dict[str, Any]) -> str:
        runs = int(changes.get("runs", 0))
        if not runs:
            return never_ran
        every = float(changes.get("every", 60.0))
        if (every, runs) not in metas:
            last = datetime.fromtimestamp(now - every * runs, tz=timezone.utc)
            metas[every, runs] = meta_json(last, runs)
        return metas[every, runs]

    load = store.client.register_script(LOAD_ENTRIES)
    for at in range(0, len(entries), chunk):
        rows = [[keys.entry(name), definition(name, task, changes), meta(changes), repr(score)]
                for name, task, score, changes in entries[at:at + chunk]]
        load(keys=[keys.schedule], args=[json.dumps(rows, ensure_ascii=False)])


#: Writes entries as save() stores them (definition, meta, schedule score) from one JSON
#: text per chunk: packing a hundred thousand commands in redis-py costs seconds, while
#: one JSON text parses in C on both sides.
LOAD_ENTRIES = """
for _, row in ipairs(cjson.decode(ARGV[1])) do
  redis.call('HSET', row[1], 'definition', row[2], 'meta', row[3])
  redis.call('ZADD', KEYS[1], row[4], row[1])
end
"""


NAME_MARK, TASK_MARK = "@@name@@", "@@task@@"
NAME_JSON, TASK_JSON = json.dumps(NAME_MARK), json.dumps(TASK_MARK)

"""The web view as an operator console, in a real headless Chromium against the real
``redbeat web`` command and a real redis-server: create each kind of entry through the
form (validated per field, the input kept, the next runs previewed), confirmation
before a disable or delete, static entries refused without "force", only the actions
that apply, bulk actions on a selection and on a filter, a page that stays current,
a phone's width, dark mode, and an automated accessibility check (axe-core)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import make_app
from redbeat import RedBeatSchedulerEntry, manage
from support.redis_server import RedisServer, redis_required, require_redis_server
from support.waiting import wait_until
from support.web import WebServer, browser_available, screenshot

#: axe-core, fetched from the npm registry at test time into a fixture directory that
#: is not committed (tests/fixtures/axe/.gitignore).
AXE_VERSION = "4.10.3"
AXE_DIR = Path(__file__).parent / "fixtures" / "axe"


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    browser_available()
    require_redis_server()
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def web(redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    server = WebServer(redis.url, options=("--timezone", "Europe/Paris"),
                       directory=tmp_path_factory.mktemp("console"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tab(web: WebServer, browser: Any) -> Iterator[Any]:
    """The module's one desktop-sized page, in a context of its own. Each test navigates
    it anew: a new page starts a renderer whose first loads and first Playwright calls
    cost about twice what they cost in a renderer that has run before (measured: 4.0 s
    against 2.3 s of CPU for one create-through-the-form test)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


@pytest.fixture
def page(tab: Any) -> Any:
    """The module's page without the cookies an earlier test left (its session: CSRF
    token and pending messages) and in the context's light scheme, so each test starts
    as a visitor new to the console; each test's first step loads a page of its own."""
    tab.context.clear_cookies()
    tab.emulate_media(color_scheme="light")
    return tab


@pytest.fixture
def app(redis: RedisServer) -> Any:
    return make_app(redis.url)


def fill_form(page: Any, fields: dict[str, str]) -> None:
    selects = set(page.eval_on_selector_all("select[name]", "all => all.map(s => s.name)"))
    for name, value in fields.items():
        selector = f"[name={name}]"
        if name in selects:
            page.select_option(selector, value)
        else:
            page.fill(selector, value)


KINDS = [
    ("every", "90s", "", lambda s: s.run_every.total_seconds() == 90),
    ("cron", "30 9 * * 1-5", "Asia/Tokyo",
     lambda s: s.timezone == "Asia/Tokyo" and s._orig_minute == "30"),
    ("rrule_text", "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;BYSECOND=0", "America/New_York",
     lambda s: s.named_zone == "America/New_York"),
    ("run_at", "2031-03-04T05:06:07", "Europe/Paris",
     lambda s: s.run_at.timestamp() == 1930363567),
    ("solar", "sunset 48.85,2.35", "", lambda s: (s.event, s.lat, s.lon) == (
        "sunset", 48.85, 2.35)),
]


@pytest.mark.parametrize(("kind", "text", "zone", "check"), KINDS,
                         ids=[kind for kind, *_ in KINDS])
def test_creates_each_kind_of_entry_with_its_options_and_policy(
        web: WebServer, page: Any, app: Any, kind: str, text: str, zone: str,
        check: Any) -> None:
    name = f"made-{kind}"
    if kind == KINDS[0][0]:  # the list's New link leads to the form (the same for each kind)
        page.goto(web.url + "/entries")
        page.click("header a.new")
        assert page.url == web.url + "/entries/new"
    else:
        page.goto(web.url + "/entries/new")
    fill_form(page, {"name": name, "task": "tasks.report", "kind": kind, "schedule": text,
                     "zone": zone, "args_json": '[1, "two"]', "kwargs_json": '{"k": 3}',
                     "queue": "reports", "priority": "5", "expires": "10m",
                     "misfire_grace": "5m", "jitter": "30s", "ttl": "1d",
                     "start": "2030-01-01T00:00:00", "end": "2032-01-01T00:00:00"})
    page.click("#preview-button")
    # the click returns once the form is sent, not once the answer is shown: #preview is
    # only on the answer's page, so wait for it before reading its list (read at once, an
    # answer slow under load gave [] from the form's own page)
    page.wait_for_selector("#preview")
    runs = page.locator("#preview li").all_inner_texts()
    assert runs or "no more runs" in page.inner_text("#preview"), page.inner_text("main")
    if kind == "cron":  # previewed in the entry's own zone
        assert runs[0].startswith("2030-01-01 09:30:00 JST")  # the window's start
    if kind == "run_at":
        assert runs == ["2031-03-04 05:06:07 CET in 2 d"] or runs[0].startswith(
            "2031-03-04 05:06:07 CET")
    assert page.input_value("[name=queue]") == "reports"  # a preview keeps the input
    page.click("#save")
    assert page.inner_text(".flash-ok") == f"saved {name}"
    entry = manage.get_entry(app, name).entry
    assert check(entry.schedule), entry.schedule
    assert (entry.task, entry.args, entry.kwargs) == ("tasks.report", [1, "two"], {"k": 3})
    assert entry.options == {"queue": "reports", "priority": 5, "expires": 600.0}
    policy = entry.policy
    assert (policy.misfire_grace_time, policy.jitter, policy.ttl) == (300, 30, 86400)
    assert policy.end_time.year == 2032
    assert "through web (create)" in page.inner_text("#changed")
    if kind == "cron":
        screenshot(page, "console-entry")


def test_form_errors_are_shown_per_field_and_the_input_is_kept(
        web: WebServer, page: Any, app: Any) -> None:
    page.goto(web.url + "/entries/new")
    typed = {"name": "typo", "task": "tasks.t", "kind": "cron", "schedule": "61 * * * *",
             "zone": "Europe/Pariss", "args_json": "[1,", "priority": "high",
             "start": "2030-01-02T00:00:00", "end": "2030-01-01T00:00:00"}
    fill_form(page, typed)
    page.click("#save")
    assert page.inner_text("#form-errors").startswith("Not saved: ")
    errors = {element.get_attribute("id"): element.inner_text()
              for element in page.locator(".field-error").all()}
    assert set(errors) == {"error-zone", "error-args_json", "error-priority"}
    assert errors["error-zone"].startswith("Zone: unknown time zone 'Europe/Pariss'")
    assert errors["error-priority"] == "Priority wants a whole number 0-255, not 'high'"
    assert page.get_attribute("[name=zone]", "aria-invalid") == "true"
    for name, value in typed.items():  # everything typed is still there
        assert page.input_value(f"[name={name}]") == value, name
    # a flash in the error style, not the success one
    assert page.locator(".flash-ok").count() == 0
    screenshot(page, "console-form-errors")
    fill_form(page, {"zone": "Europe/Paris", "args_json": "[1]", "priority": ""})
    page.click("#save")
    errors = {element.get_attribute("id"): element.inner_text()
              for element in page.locator(".field-error").all()}
    assert set(errors) == {"error-schedule", "error-end"}
    assert errors["error-schedule"].startswith("Schedule: ")
    assert errors["error-end"] == "End must be after Start"
    with pytest.raises(KeyError):
        manage.get_entry(app, "typo")
    # a name that exists is refused on the name field
    RedBeatSchedulerEntry("taken", "tasks.t", 60.0, app=app).save()
    page.goto(web.url + "/entries/new")
    fill_form(page, {"name": "taken", "task": "tasks.t", "schedule": "1m"})
    page.click("#save")
    assert "an entry named 'taken' exists" in page.inner_text("#error-name")


def test_edit_keeps_what_it_does_not_change_and_records_what_changed(
        web: WebServer, page: Any, app: Any) -> None:
    RedBeatSchedulerEntry("kept", "tasks.k", 3600.0, args=[1], options={"retry": False},
                          app=app).save()
    page.goto(web.url + "/entry/edit?name=kept")
    assert page.input_value("[name=options_json]") == '{"retry": false}'
    assert page.get_attribute("[name=name]", "readonly") is not None
    fill_form(page, {"schedule": "2h", "queue": "slow"})
    page.click("#save")
    entry = manage.get_entry(app, "kept").entry
    assert entry.schedule.run_every.total_seconds() == 7200
    assert entry.options == {"retry": False, "queue": "slow"} and entry.args == [1]
    assert "through web (edit: schedule, options)" in page.inner_text("#changed")


def test_delete_and_disable_ask_first(web: WebServer, page: Any, app: Any) -> None:
    RedBeatSchedulerEntry("doomed", "tasks.d", 60.0, app=app).save()
    page.goto(web.url + "/entry?name=doomed")
    page.click("#action-delete")
    assert page.inner_text("#confirm-title") == "Delete doomed?"
    screenshot(page, "console-confirm")
    page.click("#cancel")
    assert manage.get_entry(app, "doomed").state == "enabled"
    page.click("#action-delete")
    page.click("#confirm")
    assert page.inner_text(".flash-ok") == "deleted doomed"
    with pytest.raises(KeyError):
        manage.get_entry(app, "doomed")


@pytest.mark.parametrize(("state", "offered"), [
    ("enabled", ["disable", "run", "delete", "edit"]),
    ("disabled", ["enable", "run", "delete", "edit"]),
])
def test_only_the_actions_that_apply_are_offered(web: WebServer, page: Any, app: Any,
                                                 state: str, offered: list[str]) -> None:
    RedBeatSchedulerEntry(f"s-{state}", "tasks.s", 60.0, app=app,
                          enabled=state == "enabled").save()
    page.goto(web.url + f"/entry?name=s-{state}")
    ids = [element.get_attribute("id") for element in page.locator(".actions [id]").all()]
    assert ids == [f"action-{action}" for action in offered]
    assert page.inner_text("#state .badge") == state


def test_a_static_entry_is_left_alone_unless_forced(web: WebServer, page: Any, app: Any,
                                                    redis: RedisServer) -> None:
    RedBeatSchedulerEntry("from-config", "tasks.c", 60.0, app=app).save()
    redis.client().sadd("redbeat::statics", "from-config")  # as a leader records it
    assert manage.get_entry(app, "from-config").static
    page.goto(web.url + "/entry?name=from-config")
    page.click("#action-disable")
    assert "static entry (from beat_schedule)" in page.inner_text("#static-warning")
    page.click("#confirm")  # without the box: refused, as the CLI refuses it
    assert "left alone" in page.inner_text(".flash-error")
    assert manage.get_entry(app, "from-config").state == "enabled"
    page.click("#action-delete")
    page.check("#force")
    page.click("#confirm")
    with pytest.raises(KeyError):
        manage.get_entry(app, "from-config")
    # the edit form asks the same
    RedBeatSchedulerEntry("static-edit", "tasks.c", 60.0, app=app).save()
    redis.client().sadd("redbeat::statics", "static-edit")
    page.goto(web.url + "/entry/edit?name=static-edit")
    fill_form(page, {"schedule": "5m"})
    page.click("#save")
    assert "tick the box" in page.inner_text("#error-force")
    assert page.input_value("[name=schedule]") == "5m"
    page.check("#force")
    page.click("#save")
    assert manage.get_entry(app, "static-edit").entry.schedule.run_every.total_seconds() == 300


def test_bulk_actions_on_a_selection_and_on_every_match_of_a_filter(
        web: WebServer, page: Any, app: Any) -> None:
    for i in range(60):  # more than one page of matches
        RedBeatSchedulerEntry(f"bulk-{i:02d}", "tasks.bulk", 60.0 + i, app=app).save()
    RedBeatSchedulerEntry("bystander", "tasks.other", 60.0, app=app).save()
    page.goto(web.url + "/entries?task=tasks.bulk")
    page.check("#scope-filter")
    page.click("#bulk-disable")
    assert page.inner_text("#confirm-title") == "Disable 60 entries?"
    assert "counted now: 60" in page.inner_text("#confirm-what")
    screenshot(page, "console-bulk-confirm")
    page.click("#confirm")
    assert page.inner_text(".flash-ok") == "disabled 60 entries"
    assert all(manage.get_entry(app, f"bulk-{i:02d}").state == "disabled" for i in range(60))
    assert manage.get_entry(app, "bystander").state == "enabled"
    # back on the filtered list; a selection of two is enabled without a question
    assert page.input_value("input[name=task]") == "tasks.bulk"
    page.check("input[value='bulk-00']")
    page.check("input[value='bulk-01']")
    page.click("#bulk-enable")
    assert page.inner_text(".flash-ok") == "enabled 2 entries"
    assert [manage.get_entry(app, f"bulk-0{i}").state for i in range(3)] == [
        "enabled", "enabled", "disabled"]
    page.click("#bulk-delete")  # nothing ticked
    assert "nothing selected" in page.inner_text(".flash-error")
    # every match of a filter is counted and asked about, whatever the action
    page.check("#scope-filter")
    page.click("#bulk-run")
    assert page.inner_text("#confirm-title") == "Run now 60 entries?"
    page.click("#cancel")
    assert page.input_value("input[name=task]") == "tasks.bulk"


def test_the_page_stays_current_by_itself(web: WebServer, page: Any, app: Any) -> None:
    RedBeatSchedulerEntry("live", "tasks.l", 300.0, app=app).save()
    page.goto(web.url + "/entry?name=live")
    assert re.fullmatch(r"in \d+ (s|min)", page.inner_text("#next-run .rel"))
    assert page.inner_text("#zone") == "Times in Europe/Paris"
    manage.set_enabled(app, "live", False)
    page.evaluate("document.body.setAttribute('data-refresh', '1')")
    wait_until(lambda: page.inner_text("#state .badge") == "disabled", 15,
               "the page to show the change without a reload")
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1


def test_a_phone_gets_a_page_of_its_width(web: WebServer, browser: Any, app: Any) -> None:
    RedBeatSchedulerEntry("phone", "tasks.with.a.rather.long.name.for.a.phone", 60.0,
                          app=app).save()
    context = browser.new_context(viewport={"width": 390, "height": 844},
                                  device_scale_factor=2, is_mobile=True, has_touch=True)
    page = context.new_page()
    for path, name in (("/entries", "console-phone-entries"),
                       ("/entry?name=phone", "console-phone-entry"),
                       ("/entries/new", None), ("/nodes", None)):
        page.goto(web.url + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (path, width)  # no sideways scrolling of the page itself
        if name:
            screenshot(page, name)
    context.close()


def _luminance(rgb: str) -> float:
    values = [int(v) / 255 for v in re.findall(r"\d+", rgb)[:3]]
    linear = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in values]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_dark_mode_follows_the_system(web: WebServer, page: Any) -> None:
    """Each scheme as the system states it (the emulated prefers-color-scheme, what a
    context's colour scheme sets), each on a page loaded in it."""
    for scheme, dark in (("light", False), ("dark", True)):
        page.emulate_media(color_scheme=scheme)
        page.goto(web.url + "/entries")
        assert page.evaluate(f"matchMedia('(prefers-color-scheme: {scheme})').matches")
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        text = page.evaluate("getComputedStyle(document.body).color")
        assert (_luminance(background) < 0.1) is dark, background
        assert (_luminance(text) > 0.5) is dark, text
        if dark:
            screenshot(page, "console-dark")


def axe_source() -> str:
    """axe.min.js from the npm registry (``npm pack``), kept in the fixture directory."""
    script = AXE_DIR / f"axe-{AXE_VERSION}.min.js"
    if not script.exists():
        if shutil.which("npm") is None:
            if redis_required():
                pytest.fail("the accessibility check needs npm to fetch axe-core")
            pytest.skip("the accessibility check needs npm to fetch axe-core")
        AXE_DIR.mkdir(parents=True, exist_ok=True)
        packed = subprocess.run(["npm", "pack", f"axe-core@{AXE_VERSION}", "--silent"],
                                cwd=AXE_DIR, capture_output=True, text=True, timeout=300)
        if packed.returncode != 0:
            pytest.skip(f"npm could not fetch axe-core: {packed.stderr.strip()[:200]}")
        archive = AXE_DIR / packed.stdout.strip().splitlines()[-1]
        with tarfile.open(archive) as tar:
            member = tar.extractfile("package/axe.min.js")
            assert member is not None
            script.write_bytes(member.read())
        archive.unlink()
    return script.read_text()


#: What axe checks per scheme: every rule in the light one; in the dark one the rules that
#: read colours, since the dark scheme changes nothing but style.css's colour variables
#: (the same DOM, the same layout), so the other rules could only repeat their answers.
AXE_RULES = {"light": "{resultTypes: ['violations']}",
             "dark": "{resultTypes: ['violations'], runOnly: {type: 'rule', "
                     "values: ['color-contrast', 'link-in-text-block']}}"}


def test_no_serious_accessibility_violations(web: WebServer, page: Any, app: Any) -> None:
    source = axe_source()
    RedBeatSchedulerEntry("axe", "tasks.a", 60.0, app=app).save()
    found = {}
    for path in ("/entries", "/entry?name=axe", "/entries/new", "/entry/edit?name=axe",
                 "/timeline", "/nodes"):
        page.goto(web.url + path)
        # the page's policy allows only its own script: the checker is evaluated in the
        # page through the browser's debugging protocol, which that policy does not govern
        page.evaluate(source)
        assert page.evaluate("typeof axe.run") == "function"
        # each scheme checked on the page as loaded (one load, one checker): the system's
        # scheme switched under it restyles it as a load in that scheme would
        for scheme, rules in AXE_RULES.items():
            page.emulate_media(color_scheme=scheme)
            assert page.evaluate(f"matchMedia('(prefers-color-scheme: {scheme})').matches")
            result = page.evaluate(f"axe.run(document, {rules})")
            serious = [(violation["id"], [node["target"] for node in violation["nodes"]][:3])
                       for violation in result["violations"]
                       if violation["impact"] in ("serious", "critical")]
            if serious:
                found[f"{scheme} {path}"] = serious
    assert not found, json.dumps(found, indent=1)


def test_keyboard_reaches_every_action_with_a_visible_focus(web: WebServer, page: Any,
                                                           app: Any) -> None:
    RedBeatSchedulerEntry("keys", "tasks.k", 60.0, app=app).save()
    page.goto(web.url + "/entry?name=keys")
    reached = []
    for _ in range(20):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement === document.body"):
            break
        reached.append(page.evaluate("document.activeElement.id || "
                                     "document.activeElement.textContent.trim()"))
        outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert outline != "none", reached[-1]
    assert reached[0] == "Skip to content"
    assert {"action-disable", "action-run", "action-delete", "action-edit"} <= set(reached)


def test_the_task_name_is_checked_as_the_cli_checks_it(redis: RedisServer) -> None:
    """Under ``celery -A proj redbeat web`` the form knows the app's tasks: an unknown
    name is refused with the closest ones (a typo), unless accepted on purpose."""
    from redbeat.web import create_app

    app = make_app(redis.url)

    @app.task(name="proj.tasks.report")
    def report() -> None:
        pass

    client = create_app(app).test_client()
    with client.session_transaction() as session:
        session["csrf"] = "token"
    form = {"csrf": "token", "name": "typo-task", "task": "proj.tasks.reprot",
            "kind": "every", "schedule": "1h", "op": "save"}
    refused = client.post("/entry/save", data=form)
    text = refused.get_data(as_text=True)
    assert refused.status_code == 400
    assert ("Task: no task named &#39;proj.tasks.reprot&#39; is registered by the app; "
            "did you mean proj.tasks.report?") in text
    assert 'value="proj.tasks.reprot"' in text and 'id="accept-task"' in text
    with pytest.raises(KeyError):
        manage.get_entry(app, "typo-task")
    assert client.post("/entry/save", data={**form, "accept_task": "1"}).status_code == 302
    assert manage.get_entry(app, "typo-task").entry.task == "proj.tasks.reprot"
    empty = client.post("/entry/save", data={**form, "name": "empty", "task": " ",
                                             "accept_task": "1"})
    assert "Task: the task name is empty" in empty.get_data(as_text=True)


def test_labels_filter_bulk_change_form_and_audit(web: WebServer, page: Any, app: Any) -> None:
    """Labels in the console: set in the form, shown as links, filtered on, changed in
    bulk through the filter; the entry page says who created and changed it."""
    for i in range(3):
        RedBeatSchedulerEntry(f"acme-{i}", "tasks.bulk", 60.0, app=app,
                              labels=["tenant:acme"]).save(actor="ana")
    RedBeatSchedulerEntry("other-tenant", "tasks.bulk", 60.0, app=app,
                          labels=["tenant:zeta"]).save()
    page.goto(web.url + "/entries?label=tenant:acme")
    assert sorted(page.locator("td.name > a:first-child").all_inner_texts()) == [
        "acme-0", "acme-1", "acme-2"]
    page.check("#scope-filter")
    page.click("#bulk-disable")
    assert page.inner_text("#confirm-title") == "Disable 3 entries?"
    page.click("#confirm")
    assert [manage.get_entry(app, f"acme-{i}").state for i in range(3)] == ["disabled"] * 3
    assert manage.get_entry(app, "other-tenant").state == "enabled"
    assert page.input_value("input[name=label]") == "tenant:acme"
    page.goto(web.url + "/entry?name=acme-0")
    assert page.inner_text("#labels").strip() == "tenant:acme"
    assert " by ana through python on " in page.inner_text("#created")
    page.goto(web.url + "/entry/edit?name=other-tenant")
    page.fill("[name=labels]", "tenant:zeta, billing")
    page.click("#save")
    assert manage.get_entry(app, "other-tenant").labels == ("billing", "tenant:zeta")
    assert "labels)" in page.inner_text("#changed")
    page.goto(web.url + "/entry/edit?name=other-tenant")
    page.fill("[name=labels]", "bad\u0007label")
    page.click("#save")
    assert "Labels: label" in page.inner_text("#error-labels")


def test_the_form_sets_overlap_and_execution_relative_intervals(web: WebServer, page: Any,
                                                                 app: Any) -> None:
    """docs/outcomes.md's per-entry options, from the form as from the CLI."""
    page.goto(web.url + "/entries/new")
    fill_form(page, {"name": "no-overlap", "task": "tasks.long", "kind": "every",
                     "schedule": "5m", "overlap": "buffer_one", "relative_to": "execution",
                     "lost_after": "20m"})
    page.click("#save")
    policy = manage.get_entry(app, "no-overlap").entry.policy
    assert (policy.overlap, policy.relative_to, policy.lost_after) == (
        "buffer_one", "execution", 1200.0)
    page.goto(web.url + "/entry/edit?name=no-overlap")
    assert page.input_value("[name=overlap]") == "buffer_one"
    fill_form(page, {"overlap": "allow", "lost_after": ""})
    page.click("#save")
    policy = manage.get_entry(app, "no-overlap").entry.policy
    assert (policy.overlap, policy.relative_to, policy.lost_after) == (
        "allow", "execution", None)
    page.goto(web.url + "/entry/edit?name=no-overlap")
    fill_form(page, {"lost_after": "soon"})
    page.click("#save")
    assert page.inner_text("#error-lost_after").startswith("Lost after")

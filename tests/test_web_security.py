"""The web view is safe to expose: the bind rule, credentials, CSRF, read-only mode,
hostile text from Redis shown as text in a real browser, and no Redis password on any
page. The rules are tables; the rest runs the real ``redbeat web`` command."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conftest import make_app
from redbeat import RedBeatSchedulerEntry, manage
from redbeat.cli import main
from redbeat.web.security import (
    WebSettings,
    authorized,
    check_bind,
    csrf_valid,
    host_allowed,
    is_local,
)
from support.redis_server import RedisServer
from support.web import WebServer, fetch, screenshot

TOKEN = "t0ken-for-tests"


@pytest.mark.parametrize(("host", "local"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False),
    ("example.org", False), ("", False)])
def test_local_binds(host: str, local: bool) -> None:
    assert is_local(host) is local


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(("settings", "header", "allowed"), [
    (WebSettings(), None, True),  # no credentials configured: local only (check_bind)
    (WebSettings(token=TOKEN), None, False),
    (WebSettings(token=TOKEN), f"Bearer {TOKEN}", True),
    (WebSettings(token=TOKEN), "Bearer wrong", False),
    (WebSettings(token=TOKEN), basic("anyone", TOKEN), True),
    (WebSettings(token=TOKEN), basic(TOKEN, "x"), False),
    (WebSettings(user="ops", password="pw"), basic("ops", "pw"), True),
    (WebSettings(user="ops", password="pw"), basic("ops", "PW"), False),
    (WebSettings(user="ops", password="pw"), basic("root", "pw"), False),
    (WebSettings(user="ops", password="pw"), "Bearer pw", False),
    (WebSettings(user="ops", password="pw"), "Basic !!!not-base64", False),
    (WebSettings(user="ops", password="pw"), "Basic " + base64.b64encode(b"ops").decode(),
     False),
    (WebSettings(user="ops", password="pw"), "Digest x", False),
])
def test_credentials(settings: WebSettings, header: str | None, allowed: bool) -> None:
    assert authorized(header, settings) is allowed


@pytest.mark.parametrize(("settings", "refused"), [
    (WebSettings(), False),
    (WebSettings(host="0.0.0.0"), True),
    (WebSettings(host="0.0.0.0", token=TOKEN), False),
    (WebSettings(host="192.168.1.2", user="ops", password="pw"), False),
    (WebSettings(host="0.0.0.0", user="ops"), True),  # a user without a password
])
def test_bind_rule(settings: WebSettings, refused: bool) -> None:
    if refused:
        with pytest.raises(ValueError):
            check_bind(settings)
    else:
        check_bind(settings)


@pytest.mark.parametrize(("host", "settings", "allowed"), [
    ("127.0.0.1:8080", WebSettings(), True), ("localhost:8080", WebSettings(), True),
    ("[::1]:8080", WebSettings(), True), ("127.0.0.1", WebSettings(), True),
    ("attacker.example:8080", WebSettings(), False),  # a name re-pointed at 127.0.0.1
    ("10.0.0.5:8080", WebSettings(), False), ("", WebSettings(), False),
    (None, WebSettings(), False),
    ("scheduler.internal:8080", WebSettings(host="0.0.0.0", token=TOKEN), True),
])
def test_hosts_served(host: str | None, settings: WebSettings, allowed: bool) -> None:
    assert host_allowed(host, settings) is allowed


@pytest.mark.parametrize(("sent", "expected", "valid"), [
    ("abc", "abc", True), ("abc", "abd", False), (None, "abc", False), ("", "", False),
    ("abc", None, False)])
def test_csrf_comparison(sent: str | None, expected: str | None, valid: bool) -> None:
    assert csrf_valid(sent, expected) is valid


def test_a_non_local_bind_without_credentials_refuses_to_start(redis_server: Any) -> None:
    """The command in this process (click's runner): it refuses before it serves."""
    result = CliRunner().invoke(main, ["--url", redis_server.url, "web", "--host", "0.0.0.0",
                                       "--port", "1"])
    assert result.exit_code == 2
    assert "refusing to listen on 0.0.0.0" in result.stderr


# -- against the running command -------------------------------------------------------


@pytest.fixture(scope="module")
def tab(browser: Any) -> Iterator[Any]:
    """The module's one page, in a context of its own: a new context or page starts a
    renderer whose first loads cost about twice what they cost in one that has run
    before."""
    context = browser.new_context()
    yield context.new_page()
    context.close()


@pytest.fixture
def page(tab: Any) -> Any:
    """The module's page without the cookies an earlier test left, as a new visitor's;
    each test's first step loads a page of its own (the servers are the test's own)."""
    tab.context.clear_cookies()
    return tab


@pytest.fixture
def started(redis_server: Any, tmp_path: Path) -> Iterator[Any]:
    servers: list[WebServer] = []

    def start(*args: str, url: str | None = None, ready: bool = True,
              headers: dict[str, str] | None = None) -> WebServer:
        server = WebServer(url or redis_server.url, *args, directory=tmp_path)
        servers.append(server)
        if ready:
            server.wait_ready(headers=headers)
        return server
    yield start
    for server in servers:
        server.stop()


def test_every_request_needs_the_credentials_and_every_post_the_csrf_token(
        redis_server: Any, started: Any, browser: Any) -> None:
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("job", "tasks.job", 60.0, app=app).save()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    server = started("--token", TOKEN, headers=auth)
    for path in ("/entries", "/entry?name=job", "/timeline", "/nodes", "/metrics"):
        assert fetch(server.url + path)[0] == 401, path
        assert fetch(server.url + path, headers=auth)[0] == 200, path
    form = {"names": "job", "action": "disable", "confirm": "1"}
    assert fetch(server.url + "/entries/act", form)[0] == 401
    status, body = fetch(server.url + "/entries/act", form, headers=auth)
    assert status == 403 and "CSRF" in body
    status, _ = fetch(server.url + "/entries/act", {**form, "csrf": "forged"}, headers=auth)
    assert status == 403
    assert fetch(server.url + "/entries/act", headers=auth)[0] == 405  # a GET changes nothing
    assert fetch(server.url + "/entry?name=job&action=disable", headers=auth)[0] == 200
    assert manage.get_entry(app, "job").state == "enabled"  # nothing above changed it
    # the browser's form carries the session's token: that one is accepted
    context = browser.new_context(http_credentials={"username": "ops", "password": TOKEN})
    page = context.new_page()
    page.goto(server.url + "/entry?name=job")
    page.click("#action-disable")
    page.click("#confirm")  # the confirmation page's form carries the token too
    assert page.inner_text("#state").startswith("disabled")
    assert manage.get_entry(app, "job").state == "disabled"
    context.close()


def test_read_only_mode_shows_no_action_and_refuses_changes(
        redis_server: Any, started: Any, page: Any) -> None:
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("job", "tasks.job", 60.0, app=app).save()
    server = started("--read-only")
    page.goto(server.url + "/entry?name=job")
    assert page.locator("form[method=post]").count() == 0
    assert "read-only" in page.inner_text("header")
    status, body = fetch(server.url + "/entries/act", {"names": "job", "action": "delete",
                                                       "confirm": "1"})
    assert status == 403 and "read-only" in body
    # without credentials, only local names are served (no DNS rebinding)
    assert fetch(server.url + "/entries", headers={"Host": "attacker.example"})[0] == 403
    assert manage.get_entry(app, "job").state == "enabled"


PAYLOADS = {
    "name": "<script>window.__pwned='name'</script>",
    "task": "<img src=x onerror=\"window.__pwned='task'\">",
    "arg": "</pre><svg onload=window.__pwned='args'></svg>",  # no quote: JSON escapes it
    "reason": "<script>window.__pwned='reason'</script>",
}


def test_html_and_script_written_into_redis_render_as_text(
        redis_server: Any, started: Any, page: Any) -> None:
    app = make_app(redis_server.url)
    RedBeatSchedulerEntry(PAYLOADS["name"], PAYLOADS["task"], 60.0, args=[PAYLOADS["arg"]],
                          app=app).save()
    # a hash written raw by any client: an unreadable definition and a hostile reason
    client = redis_server.client()
    client.hset("redbeat:" + PAYLOADS["name"] + "-raw", mapping={
        "definition": "<b>not json</b>",
        "quarantine": json.dumps({"reason": PAYLOADS["reason"]})})
    client.zadd("redbeat::schedule", {"redbeat:" + PAYLOADS["name"] + "-raw": -1})
    server = started()
    seen = []
    for path, name in (("/entries", "xss-entries"),
                       ("/entry?name=" + _quote(PAYLOADS["name"]), "xss-entry"),
                       ("/entry?name=" + _quote(PAYLOADS["name"] + "-raw"), None),
                       ("/nodes", None), ("/entries?state=quarantined", None)):
        page.goto(server.url + path)
        seen.append(page.inner_text("main"))
        assert page.evaluate("window.__pwned") is None, path
        # the text is there, and none of it became an element
        assert page.locator("main script, main img, main svg").count() == 0, path
        if name:
            screenshot(page, name)
    text = "\n".join(seen)
    for payload in PAYLOADS.values():
        assert payload in text


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


PASSWORD = "s3cret-redis-pw"


def test_the_redis_password_never_reaches_a_page(started: Any, page: Any) -> None:
    with RedisServer() as locked:  # this test's own server: its password set here
        locked.client().config_set("requirepass", PASSWORD)
        url = f"redis://:{PASSWORD}@127.0.0.1:{locked.port}/0"
        good = started(url=url)
        wrong = started(url=f"redis://:{PASSWORD}-wrong@127.0.0.1:{locked.port}/0",
                        ready=False)
        gone = started(url=f"redis://:{PASSWORD}@127.0.0.1:1/0", ready=False)
        wrong.wait_ready()
        gone.wait_ready()
        for server, path in ((good, "/nodes"), (good, "/entries"), (good, "/metrics"),
                             (wrong, "/nodes"), (wrong, "/entries"), (gone, "/nodes")):
            response = page.goto(server.url + path)
            assert PASSWORD not in page.content(), (server.url, path)
            assert PASSWORD not in response.text()
        page.goto(good.url + "/nodes")
        assert "redis://:***@127.0.0.1" in page.inner_text("#redis")


@pytest.mark.parametrize("band", ["from=nan", "to=nan", "from=inf", "from=-inf", "from=1e20",
                                  "from=-1e20&to=1e21", "from=x&to=", "start=-5"])
def test_paging_parameters_out_of_any_range_are_ignored(redis_server: Any, band: str) -> None:
    """A band bound of NaN reached Redis (503), one past year 9999 failed the page (500)."""
    from redbeat.web import create_app

    app = make_app(redis_server.url)
    RedBeatSchedulerEntry("listed", "tasks.x", 10.0, app=app).save()
    page = create_app(app).test_client().get(f"/entries?{band}",
                                             headers={"Host": "127.0.0.1"})
    assert page.status_code == 200
    assert "listed" in page.get_data(as_text=True)


def test_a_missing_entry_and_an_unknown_action_are_pages_saying_why(redis_server: Any) -> None:
    from redbeat.web import create_app

    client = create_app(make_app(redis_server.url)).test_client()
    missing = client.get("/entry?name=ghost")
    assert missing.status_code == 404
    assert "no entry named &#39;ghost&#39;" in missing.get_data(as_text=True)
    assert "Cannot do that" in missing.get_data(as_text=True)  # the view's error page
    with client.session_transaction() as session:
        session["csrf"] = "token"  # what a page with a form would have put there
    refused = client.post("/entries/act",
                          data={"names": "ghost", "action": "explode", "csrf": "token"})
    assert refused.status_code == 400
    assert "unknown action" in refused.get_data(as_text=True)
    assert "Cannot do that" in refused.get_data(as_text=True)
    gone = client.post("/entries/act", data={"names": "ghost", "action": "run",
                                             "csrf": "token"}, follow_redirects=True)
    assert "not queued: ghost: no such entry" in gone.get_data(as_text=True)

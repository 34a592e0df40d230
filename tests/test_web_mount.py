"""``redbeat.web`` mounted under a prefix of an existing Flask app and of a Django project,
behind each one's own login: the two examples of docs/web.md, taken from the page as
written and run in a fresh process each (a real redis-server; Django with its real
sessions and users in SQLite; the Flask one also served by waitress to headless
Chromium). Without a login the view answers 403; after the host app's login every page
is served under the prefix, its links carry the prefix, and a confirmed disable goes
through its CSRF-protected forms. Each process is forked from the session's forker
(support/forked.py), which has imported Celery but neither Flask, Django nor the
project: those are imported and set up in the process, as new."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from support import forked

DOCS = Path(__file__).resolve().parent.parent / "docs" / "web.md"
SRC = Path(__file__).resolve().parent.parent / "src"

CELERY_MODULE = """
import os

from celery import Celery

app = Celery("proj", set_as_current=False)
app.conf.update(redbeat_redis_url=os.environ["REDIS_URL"], timezone="UTC")
"""

DJANGO_SETTINGS = """
SECRET_KEY = "test-only"
DEBUG = False
ALLOWED_HOSTS = ["ops.example.com"]
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes",
                  "django.contrib.sessions"]
MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware",
              "django.contrib.auth.middleware.AuthenticationMiddleware"]
ROOT_URLCONF = "proj.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}
USE_TZ = True
# Django's advice for tests: its default hasher spends about 0.5 s of CPU on each password
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
"""

#: What both drivers check once logged in, through the prefix, as a browser would.
CHECKS = """
import json
import re

from redbeat import RedBeatSchedulerEntry, manage
from proj.celery import app as celery_app

HOST = "http://ops.example.com"  # a public name: the host app's login is the only gate
BASE = "/ops/redbeat"


def get(client, path):
    return client.get(path, base_url=HOST)


def post(client, path, data):
    return client.post(path, data=data, base_url=HOST)


def check(client, out):
    RedBeatSchedulerEntry("job", "tasks.job", 60.0, app=celery_app).save()
    page = get(client, BASE + "/entries")
    text = page.get_data(as_text=True)
    out["entries"] = page.status_code
    out["prefixed links"] = all(link in text for link in (
        'href="/ops/redbeat/entry?name=job"', 'href="/ops/redbeat/static/style.css"',
        'src="/ops/redbeat/static/live.js"', 'action="/ops/redbeat/entries/act"'))
    out["stylesheet"] = get(client, BASE + "/static/style.css").status_code
    for path in ("/entry?name=job", "/timeline", "/nodes", "/entries/new"):
        out[path] = get(client, BASE + path).status_code
    csrf = re.search('name="csrf" value="([^"]+)"', text).group(1)
    form = {"csrf": csrf, "names": "job", "action": "disable"}
    asked = post(client, BASE + "/entries/act", form)
    out["asked"] = "Disable job?" in asked.get_data(as_text=True)
    done = post(client, BASE + "/entries/act", {**form, "confirm": "1"})
    out["redirect"] = done.headers.get("Location")
    out["state"] = manage.get_entry(celery_app, "job").state
    forged = post(client, BASE + "/entries/act", {**form, "csrf": "forged"})
    out["forged"] = forged.status_code
    print(json.dumps(out))
"""

FLASK_DRIVER = """
from werkzeug.test import Client

from checks import check, get, post
from redbeat_flask_example import flask_app

client = Client(flask_app)
out = {"anonymous": get(client, "/ops/redbeat/entries").status_code}
post(client, "/login", {"user": "ann"})
check(client, out)
"""

DJANGO_DRIVER = """
import os

os.environ["DJANGO_SETTINGS_MODULE"] = "proj.settings"
from proj.wsgi import application  # noqa: E402  (sets Django up)

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client as DjangoClient  # noqa: E402
from werkzeug.test import Client  # noqa: E402

from checks import check, get  # noqa: E402

call_command("migrate", verbosity=0)
staff = User.objects.create_user("ops", password="pw", is_staff=True)
guest = User.objects.create_user("guest", password="pw")


def session_of(user):
    django_client = DjangoClient()
    django_client.force_login(user)  # what the admin's login page leaves in the session
    return django_client.cookies["sessionid"].value


client = Client(application)
out = {"anonymous": get(client, "/ops/redbeat/entries").status_code}
client.set_cookie("sessionid", session_of(guest), domain="ops.example.com")
out["not staff"] = get(client, "/ops/redbeat/entries").status_code
client.set_cookie("sessionid", session_of(staff), domain="ops.example.com")
check(client, out)
"""


def example(first_line: str) -> str:
    """The code block of docs/web.md that starts with ``first_line``, as written."""
    for block in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"docs/web.md has no example starting {first_line!r}")


def run(directory: Path, driver: str, redis_url: str) -> dict[str, Any]:
    (directory / "checks.py").write_text(CHECKS)
    (directory / "driver.py").write_text(driver)
    result = forked.run(
        ["-m", "driver"], str(directory), timeout=120,
        env={**os.environ, "REDIS_URL": redis_url,
             "PYTHONPATH": os.pathsep.join([str(directory), str(SRC)])})
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def project(directory: Path) -> Path:
    package = directory / "proj"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "celery.py").write_text(CELERY_MODULE)
    return package


def expected_once_logged_in(out: dict[str, Any]) -> None:
    assert out["entries"] == 200 and out["prefixed links"], out
    assert out["stylesheet"] == 200, out
    assert all(out[path] == 200 for path in (
        "/entry?name=job", "/timeline", "/nodes", "/entries/new")), out
    assert out["asked"] and out["redirect"] == "/ops/redbeat/entry?name=job", out
    assert out["state"] == "disabled", out
    assert out["forged"] == 403, out


def test_mounted_in_a_flask_app_behind_its_login(redis_server: Any, tmp_path: Path) -> None:
    project(tmp_path)
    (tmp_path / "redbeat_flask_example.py").write_text(
        example("# redbeat_flask_example.py"))
    out = run(tmp_path, FLASK_DRIVER, redis_server.url)
    assert out["anonymous"] == 403, out
    expected_once_logged_in(out)


def test_mounted_in_a_django_project_behind_its_staff_login(redis_server: Any,
                                                            tmp_path: Path) -> None:
    package = project(tmp_path)
    (package / "settings.py").write_text(DJANGO_SETTINGS)
    (package / "urls.py").write_text("urlpatterns = []\n")
    (package / "wsgi.py").write_text(example("# proj/wsgi.py"))
    out = run(tmp_path, DJANGO_DRIVER, redis_server.url)
    assert out["anonymous"] == 403 and out["not staff"] == 403, out
    expected_once_logged_in(out)


SERVE = """
import sys

from waitress import serve

from redbeat import RedBeatSchedulerEntry
from proj.celery import app as celery_app
from redbeat_flask_example import flask_app

RedBeatSchedulerEntry("job", "tasks.job", 60.0, app=celery_app).save()
serve(flask_app, host="127.0.0.1", port=int(sys.argv[1]), threads=2)
"""


def test_a_browser_uses_the_view_mounted_in_a_flask_app(redis_server: Any, tmp_path: Path,
                                                       browser: Any) -> None:
    """The same Flask example served by waitress, used in headless Chromium: refused
    before the host app's login, then paged, confirmed and changed under the prefix."""
    from support.redis_server import free_port
    from support.waiting import wait_until
    from support.web import fetch

    project(tmp_path)
    (tmp_path / "redbeat_flask_example.py").write_text(
        example("# redbeat_flask_example.py"))
    (tmp_path / "serve.py").write_text(SERVE)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    context = browser.new_context()
    log = tmp_path / "serve.log"
    log.write_text("")
    server = forked.start(
        sys.executable, os.environ.get("PYTHONPATH", ""), ["-m", "serve", str(port)],
        str(tmp_path), {**os.environ, "REDIS_URL": redis_server.url,
                        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)])},
        str(log), str(log))
    try:
        wait_until(lambda: _answers(url + "/ops/redbeat/entries", fetch), 20,
                   "the Flask app under waitress")
        page = context.new_page()
        response = page.goto(url + "/ops/redbeat/entries")
        assert response.status == 403
        assert "log in to the application" in page.inner_text("main")
        page.request.post(url + "/login", form={"user": "ann"})  # the host's login
        page.goto(url + "/ops/redbeat/entries")
        page.click("text=job")
        assert page.url == url + "/ops/redbeat/entry?name=job"
        page.click("#action-disable")
        page.click("#confirm")
        assert page.url == url + "/ops/redbeat/entry?name=job"
        assert page.inner_text("#state .badge") == "disabled"
        page.click("header >> text=Timeline")
        assert page.url == url + "/ops/redbeat/timeline"
    finally:
        context.close()
        if server.poll() is None:
            os.kill(server.pid, signal.SIGTERM)
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(server.pid, signal.SIGKILL)
                server.wait(10)


def _answers(url: str, fetch: Any) -> bool:
    try:
        return fetch(url)[0] in (200, 403)
    except OSError:
        return False

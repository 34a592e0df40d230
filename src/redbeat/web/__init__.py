"""``redbeat web``: a small server-rendered view of the schedule (``pip install
'celery-beatkeeper[web]'``).

It reads and changes entries only through redbeat's management API (``redbeat.manage``,
``redbeat.browse``), like the CLI. Every page is HTML rendered by Jinja2 with
autoescaping, and no page has a script: whatever a client wrote into Redis (entry
names, arguments, reasons) is shown as text. The one script, static/live.js, is served
from the view itself (the policy allows no other): it keeps relative times and the page
current, and every page works without it. See docs/web.md.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection
from typing import Any

from celery import Celery
from flask import Flask, Response, abort, request, session

from ..metrics import schedule_registry
from .security import (
    SECURITY_HEADERS,
    WebSettings,
    authorized,
    check_bind,
    csrf_valid,
    host_allowed,
)

__all__ = ["WebSettings", "create_app", "serve"]

#: The session field holding the CSRF token every form carries.
CSRF_FIELD = "csrf"


def registered_tasks(celery_app: Celery) -> Callable[[], Collection[str] | None]:
    """The app's task names once its task modules are imported (as a worker imports
    them): the names the entry form accepts without its "accept anyway" box."""
    def read() -> Collection[str]:
        celery_app.loader.import_default_modules()
        return set(celery_app.tasks)
    return read


def refusal(settings: WebSettings,
            authorize: Callable[[dict[str, Any]], bool] | None) -> Response | None:
    """What a request is answered instead of being served (None: serve it): the host
    app's login when mounted, else the Host check and the credentials; then, for a
    change, read-only mode and the CSRF token. Aborts with 403 where a page says why."""
    if authorize is not None:
        if not authorize(request.environ):
            abort(403, "log in to the application this view is part of")
    elif not host_allowed(request.headers.get("Host"), settings):
        abort(403, "this server answers only to local names (127.0.0.1, localhost) "
                   "when it has no credentials")
    if authorize is None and not authorized(request.headers.get("Authorization"), settings):
        return Response("authentication required\n", 401,
                        {"WWW-Authenticate": 'Basic realm="redbeat"'})
    if request.method not in ("GET", "HEAD"):
        if settings.read_only:
            abort(403, "read-only mode: nothing can be changed here")
        if not csrf_valid(request.form.get(CSRF_FIELD), session.get(CSRF_FIELD)):
            abort(403, "missing or wrong CSRF token: load the page again and resubmit")
    return None


def create_app(celery_app: Celery, settings: WebSettings | None = None,
               zone: Any = None, check_tasks: bool = True,
               authorize: Callable[[dict[str, Any]], bool] | None = None) -> Flask:
    """The WSGI app for ``celery_app``'s schedule. ``zone``: where times are shown
    (default: the app's zone). ``check_tasks``: refuse a task name the app does not
    register, as ``celery -A proj redbeat add`` does (the standalone ``redbeat``
    command, which has no app's tasks to know, passes False).

    ``authorize``: for a view mounted inside another app (under a prefix, by
    ``werkzeug.middleware.dispatcher.DispatcherMiddleware`` or the like), the host
    app's login: called with each request's WSGI environ, True serves it, False
    answers 403. It replaces the view's own Host check and credentials (which guard
    it when it serves alone); CSRF, the CSP and everything else stay. See docs/web.md."""
    from . import views

    settings = settings or WebSettings()
    check_bind(settings)
    app = Flask(__name__)
    # A fresh secret per process: it signs only the session cookie that carries the CSRF
    # token, so a restart merely asks open forms to be loaded again.
    app.secret_key = secrets.token_bytes(32)
    app.config.update(SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Strict",
                      SESSION_COOKIE_NAME="redbeat_session", MAX_CONTENT_LENGTH=64 * 1024)
    app.extensions["redbeat"] = views.Context(
        celery_app, settings, zone or celery_app.timezone,
        registered_tasks(celery_app) if check_tasks else lambda: None)
    app.extensions["redbeat.metrics"] = schedule_registry(celery_app)
    app.register_blueprint(views.blueprint)

    app.before_request(lambda: refusal(settings, authorize))

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.context_processor
    def forms() -> dict[str, Any]:
        def csrf_token() -> str:
            if CSRF_FIELD not in session:
                session[CSRF_FIELD] = secrets.token_urlsafe(32)
            return str(session[CSRF_FIELD])
        return {"csrf_token": csrf_token, "read_only": settings.read_only}

    return app


def serve(celery_app: Celery, settings: WebSettings, zone: Any = None,
          threads: int = 4, check_tasks: bool = True) -> None:
    """Serve the view with waitress (a production WSGI server) until interrupted."""
    from waitress import serve as waitress_serve

    app = create_app(celery_app, settings, zone, check_tasks)
    waitress_serve(app, host=settings.host, port=settings.port, threads=threads,
                   ident="redbeat")

"""What keeps the web view safe to expose: who may connect, and what a POST must carry.

Pure decisions, apart from Flask: the bind rule, the credential check and the CSRF
comparison are tested as tables. The app applies them to every request (see
``redbeat.web.create_app``)."""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from dataclasses import dataclass

#: Host names that only this machine can reach.
LOCAL_NAMES = frozenset({"localhost", "ip6-localhost"})


class RefusedBind(ValueError):
    """A bind reachable from other machines with no credentials set."""


@dataclass(frozen=True)
class WebSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    #: a bearer token (also accepted as the password of HTTP basic auth, any user name)
    token: str | None = None
    #: HTTP basic credentials
    user: str | None = None
    password: str | None = None
    read_only: bool = False

    @property
    def has_auth(self) -> bool:
        return bool(self.token) or bool(self.user and self.password)


def is_local(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only.
    ``0.0.0.0``, ``::`` and any name other than localhost are not."""
    if host.lower() in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(settings: WebSettings) -> None:
    """Refuse to serve beyond this machine without credentials: the view shows every
    entry's arguments and can run, disable and delete entries."""
    if not is_local(settings.host) and not settings.has_auth:
        raise RefusedBind(
            f"refusing to listen on {settings.host}, reachable from other machines, "
            "without authentication: give --token or --user/--password (or the settings "
            "redbeat_web_token / redbeat_web_user, redbeat_web_password), or bind 127.0.0.1")
    if settings.user and not settings.password or settings.password and not settings.user:
        raise RefusedBind("HTTP basic authentication needs both a user and a password")


def host_allowed(host_header: str | None, settings: WebSettings) -> bool:
    """Whether a request's ``Host`` may be served. Without credentials the server is
    local, and only local names are: a page of another site whose name an attacker
    re-points at 127.0.0.1 (DNS rebinding) would otherwise read the view as its own
    origin, CSRF tokens included."""
    if settings.has_auth:
        return True
    host = (host_header or "").strip()
    if host.startswith("["):
        name = host[1:host.find("]")] if "]" in host else host
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return is_local(name)


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                               expected.encode("utf-8", "surrogateescape"))


def authorized(header: str | None, settings: WebSettings) -> bool:
    """Whether an ``Authorization`` header carries the configured credentials (always
    true when none are configured: then the server is local, see :func:`check_bind`)."""
    if not settings.has_auth:
        return True
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer":
        return bool(settings.token) and _same(value, settings.token or "")
    if scheme != "basic":
        return False
    try:
        user, sep, password = base64.b64decode(value, validate=True).decode(
            "utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    if not sep:
        return False
    if settings.token and _same(password, settings.token):
        return True
    return bool(settings.user and settings.password) and (
        _same(user, settings.user or "") & _same(password, settings.password or ""))


def csrf_valid(sent: str | None, expected: str | None) -> bool:
    """Whether a form's CSRF token is the one of its session (both must exist)."""
    return bool(sent) and bool(expected) and _same(sent or "", expected or "")


#: Sent with every response: no script runs but the view's own file (no inline script,
#: no handler attribute, nothing from elsewhere: a name written into Redis as
#: ``<script>`` stays text), nothing loads from elsewhere, and no other site may frame
#: it or post its forms. The script only refreshes the page; every page works without.
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; "
                                "img-src 'self'; connect-src 'self'; "
                                "form-action 'self'; frame-ancestors 'none'; "
                                "base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

"""Secrets out of every URL redbeat shows: the one function banners, pages, logs, CLI
output and error messages pass a URL (or a text holding URLs) through.

A Redis URL carries its password in the userinfo (``redis://:pw@host``) or, in
redis-py's documented form for sockets and as an alternative for TCP, in its query
(``unix:///run/redis.sock?password=pw``, ``redis://host/0?password=pw``); Celery's
Sentinel form joins several URLs with ``;``, and a URL may sit inside another's query
(a broker option naming a result store). Every one of them is redacted.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode

MASK = "***"

#: A query parameter whose name holds one of these is a secret (``password``,
#: ``sentinel_password``, ``passwd``, ``token``, ``client_secret``, ``auth``...).
SECRET_NAMES = ("pass", "pwd", "secret", "token", "auth", "credential")

#: A URL inside a text: a scheme, ``://``, then everything up to blank space, a quote
#: or a closing bracket (how URLs appear in log lines and exception messages).
URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>)\]]*")


#: Where Celery's Sentinel form joins URLs: a ';' followed by the next one's scheme.
NEXT_URL = re.compile(r";(?=[A-Za-z][A-Za-z0-9+.-]*://)")


def redact(text: str) -> str:
    """``text`` with every URL in it redacted (a text that is one URL: that URL)."""
    return URL_IN_TEXT.sub(
        lambda found: ";".join(_redact_url(url) for url in NEXT_URL.split(found.group(0))),
        text)


def _secret(name: str) -> bool:
    lowered = name.lower()
    return any(part in lowered for part in SECRET_NAMES)


def _redact_url(url: str) -> str:
    """One URL: the password of its userinfo masked, every secret query value masked,
    and any URL nested in a query value redacted in turn."""
    scheme, _, rest = url.partition("://")
    # the userinfo ends at the last '@' before any nested URL, so a password holding an
    # unescaped '/', '?' or '@' is still masked whole
    nested = rest.find("://")
    at = rest.rfind("@", 0, nested if nested >= 0 else len(rest))
    userinfo, rest = (rest[:at], rest[at + 1:]) if at >= 0 else (None, rest)
    ends = [index for index in (rest.find("/"), rest.find("?")) if index >= 0]
    host, tail = rest[:min(ends, default=len(rest))], rest[min(ends, default=len(rest)):]
    path, mark, query = tail.partition("?")
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        # no ':' is a password alone to some clients (redis://secret@host): masked too
        host = f"{user}:{MASK}@{host}" if colon else f"{MASK}@{host}"
    return f"{scheme}://{host}{path}{mark}{_redact_query(query) if query else ''}"


def _redact_query(query: str) -> str:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return MASK  # not a query this function can take apart: none of it is shown
    shown = [(name, MASK if _secret(name) and value else redact(value))
             for name, value in pairs]
    return urlencode(shown, safe="/:@*;,", quote_via=quote)

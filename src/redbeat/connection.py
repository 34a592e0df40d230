"""Builds the Redis client from the settings (redbeat.runtime keeps one per app), and
the text-answering twin of a client the application set that answers bytes.

One client (and so one pool) lives for the life of the scheduler; for Sentinel it is
the ``master_for`` client, whose pool asks the sentinels for the master on every new
connection and so follows a failover without being rebuilt.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import ssl
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel, SentinelConnectionPool

from .redaction import redact
from .settings import RedBeatConfig

logger = logging.getLogger("celery.beat")

#: Options that steer redbeat itself and are never handed to the redis client.
INTERNAL_OPTIONS = ("retry_period", "cluster", "sentinels", "service_name", "sentinel_kwargs",
                    "startup_nodes")
OWN_OPTIONS = frozenset(INTERNAL_OPTIONS)


#: Replies as text; bytes that are not UTF-8 (a corrupt entry) survive the round trip
#: through ``surrogateescape`` instead of failing the whole read.
TEXT_REPLIES: dict[str, Any] = {"decode_responses": True, "encoding_errors": "surrogateescape"}


class RedisConfigError(ValueError):
    """The Redis URL or options cannot describe a server we can reach."""


def client_options(config: RedBeatConfig) -> dict[str, Any]:
    """Options for the client: 2.4.2's rule is that only ``redbeat_redis_options`` are
    forwarded, never options inherited from ``broker_transport_options``."""
    if not config.redis_options_from_redbeat:
        if config.redis_options:
            logger.debug("beat: not forwarding broker_transport_options (%s) to the schedule's "
                          "Redis client; set redbeat_redis_options to pass options to it",
                          ", ".join(sorted(config.redis_options)))
        return {}
    return {k: v for k, v in config.redis_options.items() if k not in OWN_OPTIONS}


def ssl_options(config: RedBeatConfig) -> dict[str, Any]:
    options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    if isinstance(config.redis_use_ssl, dict):
        options.update(config.redis_use_ssl)
    return options


def _sentinel_addresses(url: str, options: dict[str, Any]) -> list[tuple[str, int]]:
    if options.get("sentinels"):
        return [(str(host), int(port)) for host, port in options["sentinels"]]
    # Celery's spelling: "sentinel://h1:26379;sentinel://h2:26379"
    addresses = []
    for part in url.split(";"):
        parsed = urlparse(part.strip())
        if parsed.hostname:
            addresses.append((parsed.hostname, parsed.port or 26379))
    if not addresses:
        raise RedisConfigError(
            f"no sentinel addresses in {redact(url)!r} or redbeat_redis_options")
    return addresses


def _sentinel_client(config: RedBeatConfig) -> redis.Redis:
    options = config.redis_options
    first = urlparse(config.redis_url.split(";")[0])
    connection_kwargs: dict[str, Any] = dict(TEXT_REPLIES)
    password = options.get("password") or (unquote(first.password) if first.password else None)
    username = options.get("username") or (unquote(first.username) if first.username else None)
    for name, value in (
        ("password", password),
        ("username", username),
        ("socket_timeout", options.get("socket_timeout")),
        ("credential_provider", options.get("credential_provider")),
    ):
        if value is not None:
            connection_kwargs[name] = value
    if config.redis_use_ssl:
        connection_kwargs["ssl"] = True
        connection_kwargs.update(ssl_options(config))
    sentinel = Sentinel(
        _sentinel_addresses(config.redis_url, options),
        sentinel_kwargs=options.get("sentinel_kwargs"),
        **connection_kwargs,
    )
    db = int(options.get("db", first.path.strip("/") or 0) or 0)
    return sentinel.master_for(options.get("service_name", "master"), db=db)


class StartupNode(ClusterNode, Mapping[str, Any]):
    """A redis-py ``ClusterNode`` that also reads as the startup node as configured.

    ``RedisCluster`` connects through ``ClusterNode``s (a dict fails once it connects);
    celery-redbeat 2.4.2 passed the configured dicts, their port made an int, and code
    written against it reads ``node["host"]``, ``node["port"]`` and compares the list
    with dicts. So this node is both: a read-only mapping of the configured items (the
    host as given, ``localhost`` included, which ``ClusterNode`` resolves to an address)
    that equals a dict holding the same items, and a ``ClusterNode`` whose equality and
    hash among ClusterNodes stay redis-py's (by ``host:port`` name), which its
    ``NodesManager`` relies on. Only dicts compare as mappings: they have no hash, so no
    two objects that compare equal hash differently.
    """

    def __init__(self, configured: Mapping[str, Any]) -> None:
        self._configured = {**configured, "port": int(configured["port"])}
        super().__init__(self._configured["host"], self._configured["port"])

    def __getitem__(self, key: str) -> Any:
        return self._configured[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._configured)

    def __len__(self) -> int:
        return len(self._configured)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ClusterNode):
            return other.name == self.name
        if isinstance(other, dict):
            return self._configured == other
        return NotImplemented

    __hash__ = ClusterNode.__hash__


def _cluster_client(config: RedBeatConfig) -> Any:
    # looked up when called, as 2.4.2 did: test suites written for it patch
    # redis.cluster.RedisCluster to check how the client is built
    from redis import cluster

    # Cluster URLs are no kombu transport, so options inherited from the broker's are
    # meant for this client too (2.4.2 forwards them here as well).
    own = {k: v for k, v in config.redis_options.items() if k not in OWN_OPTIONS}
    extra = {**own, **TEXT_REPLIES}
    url = config.redis_url
    if url.startswith("redis-cluster://"):
        url = "redis://" + url[len("redis-cluster://"):]
    if config.redis_options.get("startup_nodes"):
        nodes: list[ClusterNode] = [
            StartupNode(node) for node in config.redis_options["startup_nodes"]]
        return cluster.RedisCluster(startup_nodes=nodes, **extra)
    if url.startswith("rediss://"):
        extra.update(ssl_options(config))
    return cluster.RedisCluster.from_url(url, **extra)


#: Schemes whose query redis-py reads into connection arguments (``parse_url``).
URL_SCHEMES = ("redis", "rediss", "unix")


def _connection_arguments() -> set[str]:
    """Every argument a URL's query may give redis-py: its parsed ones and those of its
    connection and pool classes (an unknown one reaches the connection's constructor
    and fails there, at the first command, as a TypeError)."""
    names = set(redis.connection.URL_QUERY_ARGUMENT_PARSERS)
    for kind in (redis.connection.Connection, redis.connection.SSLConnection,
                 redis.connection.UnixDomainSocketConnection, redis.connection.ConnectionPool):
        for klass in kind.__mro__:
            init = klass.__dict__.get("__init__")
            if init is not None:
                names |= set(inspect.signature(init).parameters) - {"self", "args", "kwargs"}
    return names


def url_problem(url: str) -> str | None:
    """What redis-py would refuse in ``url``'s query, found before any connection: an
    unknown parameter (with the closest known name) or a value it cannot parse. None
    when it reads, or for a scheme whose query redis-py does not parse."""
    scheme = urlparse(url).scheme
    if scheme not in URL_SCHEMES:
        return None
    try:
        given = redis.connection.parse_url(url)
    except ValueError as exc:
        return f"{exc} ({redact(url)})"
    path = urlparse(url).path.strip("/")
    if scheme != "unix" and path and not path.isdigit():  # redis-py would use db 0
        return f"the database must be a number, not {unquote(path)!r} ({redact(url)})"
    unknown = sorted(set(given) - _connection_arguments() - {"host", "port", "path",
                                                             "connection_class"})
    if not unknown:
        return None
    close = difflib.get_close_matches(unknown[0], sorted(_connection_arguments()), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown parameter {unknown[0]!r} in {redact(url)}{hint}"


def build_client(config: RedBeatConfig) -> Any:
    """A new client for ``config``: plain, TLS, unix socket, Sentinel or Cluster."""
    url = config.redis_url
    if not url:
        raise RedisConfigError(
            "no Redis configured: set redbeat_redis_url (or broker_url) to a redis:// URL"
        )
    scheme = urlparse(url).scheme
    if config.redis_options.get("cluster") or scheme == "redis-cluster":
        return _cluster_client(config)
    if scheme in ("redis-sentinel", "sentinel"):
        return _sentinel_client(config)
    if scheme not in ("redis", "rediss", "unix"):
        raise RedisConfigError(
            f"unsupported Redis URL scheme {scheme!r} in {redact(url)!r} "
            "(use redis://, rediss://, unix://, redis-sentinel:// or redis-cluster://)"
        )
    extra: dict[str, Any] = {**client_options(config), **TEXT_REPLIES}
    if scheme == "rediss":
        extra.update(ssl_options(config))
        extra.update(dict(parse_qsl(urlparse(url).query)))
    return redis.Redis.from_url(url, **extra)


def text_client(client: Any) -> Any:
    """``client``, or a twin on the same server and pool settings that answers text
    when it answers bytes (an application's ``redis.Redis(...)`` without
    ``decode_responses``; fakeredis too): the store reads replies as text."""
    encoder = getattr(client, "get_encoder", None)
    if encoder is None or encoder().decode_responses:
        return client
    if isinstance(client, RedisCluster):
        kwargs = {name: value for name, value in client.get_connection_kwargs().items()
                  if name not in ("host", "port", "connection_pool", "redis_connect_func")}
        nodes = [ClusterNode(node.host, node.port) for node in client.get_nodes()]
        return RedisCluster(startup_nodes=nodes, **{**kwargs, **TEXT_REPLIES})
    if not isinstance(client, redis.Redis):
        raise RedisConfigError(
            f"the {type(client).__name__} set as app.redbeat_redis answers bytes; create it "
            "with decode_responses=True")
    pool = client.connection_pool
    kwargs = {name: value for name, value in pool.connection_kwargs.items()
              if name != "connection_pool"}  # a Sentinel pool's own back-reference
    kwargs.update(TEXT_REPLIES)
    if isinstance(pool, SentinelConnectionPool):
        twin_pool = SentinelConnectionPool(pool.service_name, pool.sentinel_manager,
                                           is_master=pool.is_master,
                                           check_connection=pool.check_connection, **kwargs)
    else:
        twin_pool = type(pool)(connection_class=pool.connection_class,
                               max_connections=pool.max_connections, **kwargs)
    return type(client)(connection_pool=twin_pool)



def unwrapped(client: Any) -> Any:
    """The redis-py client behind a :class:`RetryingConnection` (the store retries by
    itself and needs the real client's type and scripts)."""
    return getattr(client, "wrapped_connection", client)

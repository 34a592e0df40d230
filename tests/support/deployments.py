"""Real Redis deployments for integration tests: TLS, ACL, Sentinel and Cluster.

Every server is a child ``redis-server`` on free loopback ports in a temp dir, stopped
by its own pid. Certificates are made by ``openssl`` for each run.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from .redis_server import RedisServer, free_port


def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


# -- TLS -------------------------------------------------------------------------------


@dataclass
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_certificates(directory: Path) -> Certificates:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=redbeat-test-ca", "-keyout", "ca.key", "-out", "ca.crt")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
                f"{name}.key", "-out", f"{name}.csr")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", f"{name}.crt", "-extfile", "san.ext")
    return Certificates(directory / "ca.crt", directory / "server.crt", directory / "server.key",
                        directory / "client.crt", directory / "client.key")


class TLSServer(RedisServer):
    """redis-server that only speaks TLS and requires a client certificate."""

    def __init__(self) -> None:
        super().__init__()
        self.certs = make_certificates(self.dir)
        self.extra_args = [
            "--port", "0", "--tls-port", str(self.port),
            "--tls-cert-file", str(self.certs.server_cert),
            "--tls-key-file", str(self.certs.server_key),
            "--tls-ca-cert-file", str(self.certs.ca), "--tls-auth-clients", "yes",
        ]

    def command_line(self) -> list[str]:
        line = super().command_line()
        del line[1:3]  # the plain --port: it is 0 here, the TLS port is ours
        return line

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def ssl_options(self) -> dict[str, str]:
        return {"ssl_ca_certs": str(self.certs.ca), "ssl_certfile": str(self.certs.client_cert),
                "ssl_keyfile": str(self.certs.client_key)}

    def client(self, **kwargs: object) -> redis.Redis:
        options: dict[str, object] = {"decode_responses": True, "socket_timeout": 5, "ssl": True,
                                      **self.ssl_options(), **kwargs}
        return redis.Redis(port=self.port, **options)  # type: ignore[arg-type]


# -- ACL -------------------------------------------------------------------------------

#: What a scheduler's ACL user needs: its scripts and the commands around them.
SCHEDULER_COMMANDS = (
    "+evalsha +eval +script|load +ping +info +config|get +multi +exec "
    "+get +set +pexpire +pttl +expire +del +exists +type "
    "+zrangebyscore +zadd +zrem +zrange +zscore +zrank +zcard +zcount "
    "+hmget +hget +hset +hsetnx +hdel +hgetall +hscan +hlen "
    "+smembers +sadd +srem +sismember"
)


class ACLServer(RedisServer):
    """redis-server with a user ``beat`` limited to ``<prefix>*`` keys and the scheduler's
    commands; the default user keeps full rights (password ``admin``) for the harness."""

    def __init__(self, prefix: str = "redbeat:", password: str = "beat-secret") -> None:
        super().__init__()
        self.prefix = prefix
        self.password = password
        self.extra_args = [
            "--user", "default", "on", ">admin", "~*", "&*", "+@all",
            "--user", "beat", "on", f">{password}", f"~{prefix}*", f"&{prefix}*",
            *SCHEDULER_COMMANDS.split(),
        ]

    @property
    def beat_url(self) -> str:
        return f"redis://beat:{self.password}@127.0.0.1:{self.port}/0"

    def client(self, **kwargs: object) -> redis.Redis:
        return super().client(password="admin", **kwargs)


# -- Sentinel --------------------------------------------------------------------------


class SentinelDeployment:
    """A master, a replica and one sentinel (quorum 1) watching service ``mymaster``."""

    service = "mymaster"

    def __init__(self) -> None:
        self.master = RedisServer()
        self.replica = RedisServer()
        self.sentinel_port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="redbeat-sentinel-"))
        self.sentinel: subprocess.Popen[bytes] | None = None

    def start(self) -> SentinelDeployment:
        self.master.start()
        self.replica.extra_args = ["--replicaof", "127.0.0.1", str(self.master.port)]
        self.replica.start()
        wait_for(lambda: self.replica.client().info("replication")["master_link_status"] == "up",
                 15, "the replica to sync")
        config = self.dir / "sentinel.conf"
        config.write_text(
            f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {self.service} 1000\n"
            f"sentinel failover-timeout {self.service} 4000\n"
        )
        self.sentinel = subprocess.Popen(
            ["redis-server", str(config), "--sentinel"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.sentinel_client().sentinel_master(self.service)["num-slaves"] >= 1,
                 15, "the sentinel to see the replica")
        return self

    def sentinel_client(self) -> redis.Redis:
        return redis.Redis(port=self.sentinel_port, decode_responses=True, socket_timeout=2)

    def master_port(self) -> int:
        return int(self.sentinel_client().sentinel_get_master_addr_by_name(self.service)[1])

    def force_failover(self) -> float:
        """SENTINEL FAILOVER, then wait for a writable new master; returns seconds taken."""
        began = time.monotonic()
        old = self.master_port()
        self.sentinel_client().execute_command("SENTINEL", "FAILOVER", self.service)

        def promoted() -> bool:
            port = self.master_port()
            if port == old:
                return False
            client = redis.Redis(port=port, socket_timeout=2)
            return client.info("replication")["role"] == "master" and bool(
                client.set("failover-probe", 1))

        wait_for(promoted, 30, "the failover")
        return time.monotonic() - began

    def stop(self) -> None:
        if self.sentinel is not None:
            self.sentinel.terminate()
            self.sentinel.wait(10)
        self.replica.cleanup()
        self.master.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- Cluster ---------------------------------------------------------------------------


def _cluster_port() -> int:
    """A free port Redis accepts in cluster mode (at most 55535: it reserves +10000)."""
    while True:
        port = free_port()
        if port <= 55535:
            return port


class ClusterDeployment:
    """Three masters and three replicas, created with ``redis-cli --cluster create``."""

    def __init__(self) -> None:
        self.nodes = [RedisServer(port=_cluster_port(), extra_args=[
            "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
            "--cluster-port", str(free_port()), "--cluster-config-file", "nodes.conf"])
            for _ in range(6)]

    def start(self) -> ClusterDeployment:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas",
                        "1", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        wait_for(self._healthy, 30, "the cluster to be ok")
        return self

    def _healthy(self) -> bool:
        """Every node says ok and every slot range has its replica (failover needs it)."""
        if not all(node.client().cluster("info")["cluster_state"] == "ok"
                   for node in self.nodes if node.process is not None):
            return False
        ranges = self.nodes[0].client().execute_command("CLUSTER", "SLOTS")
        return len(ranges) == 3 and all(len(line) >= 4 for line in ranges)

    @property
    def startup_nodes(self) -> list[dict[str, object]]:
        return [{"host": "127.0.0.1", "port": node.port} for node in self.nodes[:3]]

    @property
    def url(self) -> str:
        return f"redis-cluster://127.0.0.1:{self.nodes[0].port}/0"

    def serving(self, key: str) -> tuple[int, int | None]:
        """Ports of the master that owns ``key``'s slot and of its replica (None while a
        failover has left it without one)."""
        client = self.nodes[0].client()
        slot = client.cluster("keyslot", key)
        for line in client.execute_command("CLUSTER", "SLOTS"):
            if line[0] <= slot <= line[1]:
                return int(line[2][1]), int(line[3][1]) if len(line) > 3 else None
        raise LookupError(slot)

    def fail_over(self, key: str) -> float:
        """Promote the replica of the master that owns ``key`` (CLUSTER FAILOVER)."""
        began = time.monotonic()
        _, replica_port = self.serving(key)
        replica = next(node for node in self.nodes if node.port == replica_port)
        replica.client().execute_command("CLUSTER", "FAILOVER")
        wait_for(lambda: self.serving(key)[0] == replica_port, 30, "the replica to take over")
        wait_for(self._healthy, 30, "the cluster to be ok again")
        return time.monotonic() - began

    def stop(self) -> None:
        for node in self.nodes:
            node.cleanup()

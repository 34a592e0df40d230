"""The deployment harness itself (tests/support/deployments.py), checked with plain
redis-py: each deployment really is what it claims to be, so the scheduler tests that
use it test the scheduler and not a half-started server."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

sys.path.insert(0, str(Path(__file__).parent))

from support.deployments import (  # noqa: E402
    SCHEDULER_COMMANDS,
    Certificates,
    ClusterDeployment,
    acl_server,
    cluster_deployment,
    make_certificates,
    plain_server,
    require_programs,
    require_valkey,
    sentinel_deployment,
    tls_server,
)

pytestmark = pytest.mark.redis_server

#: Fail at once instead of retrying: for the connections that must be refused.
NO_RETRY = {"retry": Retry(NoBackoff(), 0), "socket_timeout": 2, "socket_connect_timeout": 2}


@pytest.fixture(autouse=True)
def _servers_present() -> None:
    require_programs("redis-server", "redis-cli")


# -- plain -----------------------------------------------------------------------------


def test_plain_server_is_our_own_child():
    with plain_server() as server:
        assert int(server.info("server")["process_id"]) == server.process.pid
        client = server.client()
        assert client.eval("return redis.call('set', KEYS[1], ARGV[1])", 1, "redbeat:k", "v")
        assert client.get("redbeat:k") == "v"
        directory = server.dir
    assert server.process is None and not directory.exists()


def test_valkey_through_binary():
    binary = require_valkey()
    with plain_server(binary=binary) as server:
        assert "valkey_version" in server.info("server")
        client = server.client()
        assert client.eval("return redis.call('incr', KEYS[1])", 1, "redbeat:n") == 1


# -- TLS -------------------------------------------------------------------------------


def test_tls_requires_ca_and_client_certificate():
    with tls_server(client_auth="yes") as server:
        assert server.url.startswith("rediss://127.0.0.1:")
        strict = redis.Redis(host="127.0.0.1", port=server.port, ssl=True,
                             ssl_include_verify_flags=[ssl.VERIFY_X509_STRICT],
                             **server.ssl_options())
        assert strict.set("redbeat:secure", 1) and strict.get("redbeat:secure") == b"1"
        assert redis.Redis.from_url(server.url_with_certs()).ping()
        by_name = redis.Redis(host="localhost", port=server.port, ssl=True,
                              **server.ssl_options())
        assert by_name.ping()  # the DNS name in the certificate checks too

        refused = [
            dict(ssl=True, **server.ssl_options(client_cert=False)),  # no client cert
            dict(ssl=True, ssl_certfile=server.cert_file, ssl_keyfile=server.key_file),  # no CA
            {},  # plain text on the TLS port
        ]
        for options in refused:
            client = redis.Redis(host="127.0.0.1", port=server.port, **NO_RETRY, **options)
            with pytest.raises(redis.ConnectionError):
                client.ping()


def test_tls_client_certificate_optional():
    with tls_server(client_auth="optional") as server:
        ca_only = redis.Redis.from_url(server.url_with_certs(client_cert=False))
        assert ca_only.ping()
        with_cert = redis.Redis(host="127.0.0.1", port=server.port, ssl=True,
                                **server.ssl_options())
        assert with_cert.ping()
        unverified_server = redis.Redis(host="127.0.0.1", port=server.port, ssl=True,
                                        **NO_RETRY)
        with pytest.raises(redis.ConnectionError):
            unverified_server.ping()  # the system CAs do not know ours


def check_certificates(certs: Certificates) -> None:
    for leaf in (certs.server_cert, certs.client_cert):
        subprocess.run(["openssl", "verify", "-x509_strict", "-CAfile", str(certs.ca),
                        str(leaf)], check=True, capture_output=True)
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.client_cert), str(certs.client_key))


def test_certificates_verify(tmp_path):
    check_certificates(make_certificates(tmp_path))


def test_certificates_without_openssl_fail_saying_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a directory without openssl
    with pytest.raises(RuntimeError, match="openssl command is not on PATH"):
        make_certificates(tmp_path / "tls")


# -- ACL -------------------------------------------------------------------------------


@pytest.mark.parametrize(("prefix", "commands", "refused_command"), [
    ("redbeat:", SCHEDULER_COMMANDS, ("FLUSHALL",)),
    ("{tenant}:beat:", "+ping +get +set +del +publish", ("HSET", "{tenant}:beat:h", "f", 1)),
])
def test_acl_user_limited_to_its_prefix(prefix, commands, refused_command):
    with acl_server(prefix, commands=commands) as server:
        user = server.user_client(**NO_RETRY)
        assert user.set(f"{prefix}key", "v") and user.get(f"{prefix}key") == "v"
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.set("elsewhere", 1)
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.get("other:key")
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.execute_command(*refused_command)
        if "+publish" in commands:
            assert user.publish(f"{prefix}events", "x") == 0
            with pytest.raises(redis.exceptions.NoPermissionError):
                user.publish("other-channel", "x")
        if "+eval" in commands:  # scripts are checked key by key too
            script = "return redis.call('set', KEYS[1], ARGV[1])"
            assert user.eval(script, 1, f"{prefix}scripted", "1")
            with pytest.raises(redis.exceptions.NoPermissionError):
                user.eval(script, 1, "outside", "1")

        admin = server.client()
        assert admin.set("elsewhere", 1) and admin.get(f"{prefix}key") == "v"
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=server.port, **NO_RETRY).set("x", 1)
        assert redis.Redis.from_url(server.user_url).get(f"{prefix}key") == b"v"


# -- Sentinel --------------------------------------------------------------------------


@pytest.mark.parametrize("sentinels", [1, 3])
def test_sentinel_forced_failover_moves_writes(sentinels):
    with sentinel_deployment(sentinels=sentinels) as deployment:
        print(f"\nsentinel x{sentinels} started in {deployment.startup_seconds:.2f}s")
        assert len(deployment.sentinels) == sentinels
        assert deployment.quorum == sentinels // 2 + 1
        writer = deployment.sentinel().master_for(deployment.service)
        writer.set("redbeat:before", 1)
        first = deployment.master_port()
        assert first == deployment.master.port

        took = deployment.force_failover(demote_old_master=True)
        print(f"sentinel x{sentinels} forced failover took {took:.2f}s")
        second = deployment.master_port()
        assert second == deployment.replica.port
        assert {deployment.master_address(i) for i in range(sentinels)} == {("127.0.0.1",
                                                                            second)}
        new_master = deployment.node_at(second).client()
        assert new_master.get("redbeat:before") == "1"  # replicated before the failover

        fresh = deployment.sentinel().master_for(deployment.service)
        fresh.set("redbeat:after", 1)
        # The long-lived client's pooled connection is to the demoted master: redis-py
        # turns its READONLY answer into ConnectionError("The previous master is now a
        # slave") unless the client retries, then asks the sentinels again on reconnect.
        try:
            writer.set("redbeat:after-long-lived", 1)
        except redis.ConnectionError:
            writer.set("redbeat:after-long-lived", 1)
        assert new_master.get("redbeat:after") == "1"
        assert new_master.get("redbeat:after-long-lived") == "1"
        assert new_master.wait(1, 5000) == 1
        assert deployment.node_at(first).client().get("redbeat:after") == "1"

        back = deployment.force_failover()  # converged, so a second one works
        print(f"sentinel x{sentinels} second failover took {back:.2f}s")
        assert deployment.master_port() == first
        deployment.sentinel().master_for(deployment.service).set("redbeat:third", 1)
        assert deployment.node_at(first).client().get("redbeat:third") == "1"


# -- Cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    require_programs("redis-server", "redis-cli")
    with cluster_deployment(replicas=1) as deployment:
        print(f"\ncluster started in {deployment.startup_seconds:.2f}s")
        yield deployment


def test_cluster_spreads_keys_and_keeps_tagged_keys_together(cluster: ClusterDeployment):
    assert len(cluster.masters()) == 3 and len(cluster.replicas()) == 3
    client = cluster.client()
    keys = [f"redbeat:entry{i}" for i in range(30)]
    for key in keys:
        client.set(key, key)
    assert {cluster.master_for_key(key) for key in keys} == set(cluster.masters())
    assert [client.get(key) for key in keys] == keys

    tagged = ["{redbeat}:schedule", "{redbeat}:lock", "{redbeat}:entry"]
    assert len({client.keyslot(key) for key in tagged}) == 1
    client.mset(dict.fromkeys(tagged, "t"))
    swap = "local v = redis.call('get', KEYS[1]); redis.call('set', KEYS[2], v); return v"
    assert client.eval(swap, 2, tagged[0], "{redbeat}:copy") == "t"
    apart = next(key for key in keys if client.keyslot(key) != client.keyslot(keys[0]))
    with pytest.raises((RedisClusterException, redis.ResponseError)):
        client.eval(swap, 2, keys[0], apart)  # untagged keys in two slots: refused


def test_cluster_survives_failover_and_restarts(cluster: ClusterDeployment):
    client = cluster.client()
    key = "{redbeat}:survivor"
    client.set(key, "0")
    owner = cluster.master_for_key(key)

    took = cluster.fail_over(key)
    print(f"\ncluster CLUSTER FAILOVER took {took:.2f}s")
    promoted = cluster.master_for_key(key)
    assert promoted != owner and cluster.master_of(owner) == promoted
    assert client.get(key) == "0" and client.incr(key) == 1

    took = cluster.restart_node(promoted)
    print(f"cluster master restart took {took:.2f}s")
    assert cluster.master_for_key(key) == promoted  # back before anyone noticed
    assert client.incr(key) == 2  # its append-only file kept the data

    took = cluster.restart_node(promoted, wait_for_takeover=True)
    print(f"cluster master down until its replica took over, then back: {took:.2f}s")
    assert cluster.master_for_key(key) == owner
    assert promoted in cluster.replicas()
    assert client.incr(key) == 3

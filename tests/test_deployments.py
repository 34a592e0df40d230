"""The scheduler on the Redis deployments people run: TLS, an ACL user, Sentinel with a
forced failover, and Redis Cluster with a failover. All real servers."""

from __future__ import annotations

import shutil
import ssl

import pytest
import redis

from conftest import make_app
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.cli import main
from redbeat.connection import StartupNode
from redbeat.lock import Lease
from redbeat.manage import get_entry
from redbeat.runtime import get_redis, store_for
from support.deployments import (
    FAST_REPLICATION,
    HOST,
    ACLServer,
    ClusterDeployment,
    SentinelDeployment,
    TLSServer,
    plain_server,
    require_valkey,
    wait_for,
)
from support.processes import LIVENESS
from support.recording import Recording
from support.redis_server import (
    free_port,
    redis_required,
    redis_server_binary,
    require_redis6_server,
)

pytestmark = pytest.mark.redis_server


@pytest.fixture(autouse=True)
def _needs_servers():
    if redis_server_binary() is None or shutil.which("redis-cli") is None:
        if redis_required():
            pytest.fail("redis-server/redis-cli missing and REDBEAT_REQUIRE_REDIS is set")
        pytest.skip("redis-server/redis-cli not on PATH")


def run_until_sent(scheduler, count, ticks=200):
    import time

    for _ in range(ticks):
        if len(scheduler.task_ids) >= count:
            return
        time.sleep(max(0.0, min(scheduler.tick(), 0.2)))
    raise AssertionError(f"only {len(scheduler.task_ids)} sends, wanted {count}")


def test_valkey_leader_standby_and_cli():
    """Valkey, which many hosted deployments run instead of Redis: ticks, scripts, the
    lock and its handover, and the CLI, on a real valkey-server."""
    from click.testing import CliRunner

    with plain_server(binary=require_valkey()) as server:
        assert "valkey_version" in server.info("server")
        url = server.url
        app = make_app(url, redbeat_lock_timeout=3)
        RedBeatSchedulerEntry("vk", "tasks.vk", 0.5, app=app).save()
        leader, standby = Recording(app), Recording(make_app(url, redbeat_lock_timeout=3))
        run_until_sent(leader, 3)
        standby.tick()
        assert standby.task_ids == []  # the lock holds on Valkey too
        listing = CliRunner().invoke(main, ["--url", url, "list", "--json"])
        assert listing.exit_code == 0 and '"name": "vk"' in listing.output
        leader.close()  # releases the lock: the standby leads
        run_until_sent(standby, 2)
        sent = leader.task_ids + standby.task_ids
        assert len(sent) == len(set(sent))  # one id per slot across the handover
        standby.close()


def test_redis_6_is_asked_for_evictions_and_replicas_one_info_section_at_a_time():
    """Under an evicting policy tick.lua reads INFO's stats and replication sections in one
    call, which Redis 7 answers and Redis 6 refuses; on Redis 6 it asks for each apart.
    On a real Redis 6.2 with a replica and keys evicted, the leader's tick still counts
    both (without them it would neither log evictions nor wait for the replica)."""
    binary = require_redis6_server()
    evicting = [*FAST_REPLICATION, "--maxmemory-policy", "allkeys-lru"]
    with plain_server(binary=binary, extra_args=evicting) as master:
        follows = [*FAST_REPLICATION, "--replicaof", HOST, str(master.port)]
        with plain_server(binary=binary, extra_args=follows):
            client = master.client()
            with pytest.raises(redis.ResponseError):  # the Redis < 7 this test is about
                client.execute_command("INFO", "stats", "replication")
            wait_for(
                lambda: client.info("replication").get("slave0", {}).get("state") == "online",
                LIVENESS,
                "the replica to sync",
            )
            client.mset({f"filler:{i}": "x" * 1000 for i in range(1000)})
            # Redis leaves a replica's output buffer out of the memory it evicts for: on a
            # loaded machine the fillers were still in that buffer, and nothing was evicted
            assert client.wait(1, int(LIVENESS * 1000)) >= 1
            client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 500_000)
            client.set("filler:last", "x")  # a write: Redis evicts down to maxmemory first
            client.config_set("maxmemory", 0)
            evicted = int(client.info("stats")["evicted_keys"])
            assert evicted > 0

            app = make_app(master.url)
            store = store_for(app)
            lease = Lease(store, app.redbeat_conf.keys.lock, 10.0)
            assert store.fetch(0.0, lease, 10, lease.token, read_evictions=True).status == (
                "acquired"
            )
            fetch = store.fetch(0.0, lease, 10, lease.token, read_evictions=True)
            assert fetch.status == "leader" and fetch.evicted_keys == evicted
            assert store.replicas.expected == 1


def test_tls_with_ca_and_client_certificate():
    server = TLSServer().start()
    try:
        app = make_app(
            server.url,
            redbeat_redis_use_ssl={**server.ssl_options(), "ssl_cert_reqs": ssl.CERT_REQUIRED},
        )
        RedBeatSchedulerEntry("secure", "tasks.s", 0.5, app=app).save()
        scheduler = Recording(app)
        run_until_sent(scheduler, 2)
        scheduler.close()
        assert server.client().exists("redbeat:secure")
        wrong = make_app(server.url, redbeat_redis_use_ssl={"ssl_cert_reqs": ssl.CERT_REQUIRED})
        with pytest.raises(redis.exceptions.ConnectionError):
            store_for(wrong).client.ping()  # no CA, no client cert: refused, not ignored
    finally:
        server.cleanup()


def test_acl_user_limited_to_the_prefix():
    server = ACLServer().start()
    try:
        app = make_app(server.beat_url, beat_schedule={"s": {"task": "t", "schedule": 5.0}})
        RedBeatSchedulerEntry("job", "tasks.j", 0.5, app=app).save()
        scheduler = Recording(app)
        run_until_sent(scheduler, 3)
        from click.testing import CliRunner

        status = CliRunner().invoke(main, ["--url", server.beat_url, "status"])
        assert status.exit_code == 0, status.output
        assert "leader:" in status.output
        scheduler.close()
        user = redis.Redis.from_url(server.beat_url)
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.set("elsewhere", 1)
        assert "s" in server.client().smembers("redbeat::statics")  # statics written too
    finally:
        server.cleanup()


@pytest.mark.parametrize("spelling", ["redis-sentinel", "sentinel"])
def test_sentinel_failover_while_ticking(spelling):
    """Both URL spellings reach the master through the sentinel and follow it to the
    promoted replica. The old master is demoted at once (REPLICAOF, what the sentinel does
    by itself some 10 s later): the scheduler meets "the previous master is now a slave"
    and asks the sentinel again. The sentinel's own late demotion, with a real beat
    committing to the old master meanwhile, is test_sentinel_bursts' subject."""
    deployment = SentinelDeployment().start()
    try:
        port = deployment.sentinel_port
        if spelling == "redis-sentinel":
            url, options = (
                "redis-sentinel://127.0.0.1/0",
                {"sentinels": [("127.0.0.1", port)], "service_name": "mymaster"},
            )
        else:
            url, options = f"sentinel://127.0.0.1:{port}", {"service_name": "mymaster"}
        app = make_app(url, redbeat_redis_options={**options, "retry_period": 30})
        RedBeatSchedulerEntry("ha", "tasks.ha", 0.5, app=app).save()
        scheduler = Recording(app)
        run_until_sent(scheduler, 2)
        took = deployment.force_failover(demote_old_master=True)
        print(f"sentinel forced failover took {took:.2f}s")
        before = len(scheduler.task_ids)
        run_until_sent(scheduler, before + 4)
        new_master = redis.Redis(port=deployment.master_port(), decode_responses=True)
        assert new_master.exists("redbeat:ha")
        assert len(scheduler.task_ids) == len(set(scheduler.task_ids))
        scheduler.close()
    finally:
        deployment.stop()


def test_cluster_with_a_tagged_prefix_and_a_failover():
    deployment = ClusterDeployment().start()
    try:
        prefix = "{redbeat}:"
        app = make_app(
            deployment.url,
            redbeat_key_prefix=prefix,
            redbeat_redis_options={"retry_period": 30},
            beat_schedule={"static": {"task": "t", "schedule": 5.0}},
        )
        RedBeatSchedulerEntry("clustered", "tasks.c", 0.5, app=app).save()
        scheduler = Recording(app)
        run_until_sent(scheduler, 2)
        took = deployment.fail_over(f"{prefix}:schedule")
        print(f"cluster failover took {took:.2f}s")
        before = len(scheduler.task_ids)
        run_until_sent(scheduler, before + 4)
        assert len(scheduler.task_ids) == len(set(scheduler.task_ids))
        history = get_entry(app, "clustered").history
        assert history[0]["task_id"] in scheduler.task_ids  # history written through the cluster
        scheduler.close()

        untagged = make_app(deployment.url)
        with pytest.raises(ValueError, match="hash tag"):
            RedBeatScheduler(untagged)
    finally:
        deployment.stop()


def test_cluster_from_startup_nodes_written_as_dicts():
    """``startup_nodes`` as 2.4.2's users write them (dicts, ports as text), the first
    one down: the client connects through the others and the scheduler runs. With
    ``dynamic_startup_nodes`` off redis-py keeps our nodes for every reinitialization,
    so they must stay ClusterNodes to it while still reading as the dicts configured."""
    deployment = ClusterDeployment(replicas=0).start()
    try:
        configured = [{"host": "127.0.0.1", "port": str(free_port())}] + [
            {"host": host, "port": str(port)} for host, port in deployment.addresses
        ]
        app = make_app(
            deployment.url,
            redbeat_key_prefix="{redbeat}:",
            redbeat_redis_options={"startup_nodes": configured, "dynamic_startup_nodes": False},
        )
        client = get_redis(app)
        kept = list(client.nodes_manager.startup_nodes.values())
        assert all(isinstance(node, StartupNode) for node in kept)
        assert kept == [{**node, "port": int(node["port"])} for node in configured]
        client.nodes_manager.initialize()  # what a MOVED or a lost node triggers
        assert list(client.nodes_manager.startup_nodes.values()) == kept

        RedBeatSchedulerEntry("clustered", "tasks.c", 0.5, app=app).save()
        scheduler = Recording(app)
        run_until_sent(scheduler, 2)
        scheduler.close()
    finally:
        deployment.stop()

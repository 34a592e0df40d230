"""connection.StartupNode: a redis-py ClusterNode that reads as the configured dict.
The Cluster it connects to is tested live in tests/test_deployments.py."""

from __future__ import annotations

import pytest
from redis.cluster import ClusterNode

from redbeat.connection import StartupNode


def test_reads_as_the_configured_dict_with_an_int_port():
    node = StartupNode({"host": "192.168.1.1", "port": "30001", "tag": "a"})
    assert node["host"] == "192.168.1.1"
    assert node["port"] == 30001 and isinstance(node["port"], int)
    assert dict(node) == {"host": "192.168.1.1", "port": 30001, "tag": "a"}
    assert list(node) == ["host", "port", "tag"] and len(node) == 3
    assert "host" in node and "password" not in node
    assert node.get("password") is None


def test_is_the_cluster_node_redis_py_connects_through():
    node = StartupNode({"host": "192.168.1.1", "port": "30001"})
    assert isinstance(node, ClusterNode)
    assert (node.host, node.port, node.name) == ("192.168.1.1", 30001, "192.168.1.1:30001")


def test_localhost_reads_as_configured_but_connects_to_its_address():
    node = StartupNode({"host": "localhost", "port": 30001})
    assert node["host"] == "localhost"
    assert node.host == "127.0.0.1"  # ClusterNode resolves it; nodes are named by address


def test_is_read_only():
    node = StartupNode({"host": "192.168.1.1", "port": 30001})
    with pytest.raises(TypeError):
        node["port"] = 1  # type: ignore[index]


NODE = {"host": "192.168.1.1", "port": "30001"}


@pytest.mark.parametrize(("other", "equal"), [
    ({"host": "192.168.1.1", "port": 30001}, True),
    ({"host": "192.168.1.1", "port": "30001"}, False),  # it reads with an int port
    ({"host": "192.168.1.1", "port": 30002}, False),
    ({"host": "192.168.1.2", "port": 30001}, False),
    ({"host": "192.168.1.1", "port": 30001, "tag": "a"}, False),
    ({"host": "192.168.1.1"}, False),
    (ClusterNode("192.168.1.1", 30001), True),
    (ClusterNode("192.168.1.1", 30002), False),
    (StartupNode({"host": "192.168.1.1", "port": 30001, "tag": "a"}), True),  # by address
    (StartupNode({"host": "192.168.1.2", "port": 30001}), False),
    (("192.168.1.1", 30001), False),
    ("192.168.1.1:30001", False),
])
def test_equality(other, equal):
    node = StartupNode(NODE)
    assert (node == other) is equal and (other == node) is equal
    assert (node != other) is not equal


def test_hash_is_redis_pys_so_equal_nodes_hash_alike():
    node = StartupNode(NODE)
    assert hash(node) == hash(ClusterNode("192.168.1.1", 30001))
    assert hash(node) == hash(StartupNode({"host": "192.168.1.1", "port": 30001, "tag": "a"}))
    # NodesManager keys nodes by name and finds them among its values by equality
    by_name = {node.name: node}
    assert ClusterNode("192.168.1.1", 30001) in by_name.values()
    assert {node, ClusterNode("192.168.1.1", 30001)} == {node}


def test_a_list_of_them_equals_the_configured_list():
    configured = [{"host": "192.168.1.1", "port": "30001"}, {"host": "192.168.1.2", "port": 30002}]
    nodes = [StartupNode(item) for item in configured]
    assert nodes == [{"host": "192.168.1.1", "port": 30001}, {"host": "192.168.1.2", "port": 30002}]

"""Every Lua script replies ``{status, payload...}`` (lua/prelude.lua), decoded in one
place (``store.script_reply``); the script celery-redbeat 2.4.2 exposed by name keeps
its 1-or-0 reply for code that calls it."""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from redbeat.schedulers import LUA_EXTEND_TO_SCRIPT
from redbeat.store import LockLost, Reply, script_reply


@pytest.mark.parametrize("raw, expected", [
    (["ok"], Reply("ok", [])),
    (["leader", None, [], "[]"], Reply("leader", [None, [], "[]"])),
    (["lost", None], Reply("lost", [None])),
])
def test_a_reply_is_its_status_then_its_payload(raw, expected):
    assert script_reply("x", raw) == expected


@pytest.mark.parametrize("raw", [1, 0, "ok", [], [1, "ok"], None])
def test_a_reply_of_another_shape_is_an_error_naming_the_script(raw):
    with pytest.raises(ResponseError, match=r"commit\.lua replied"):
        script_reply("commit", raw)


def test_a_lost_lease_is_lock_lost_with_the_holder():
    assert Reply("ok", ["applied", []]).fenced() == ["applied", []]
    with pytest.raises(LockLost) as lost:
        Reply("lost", ["other-token"]).fenced()
    assert lost.value.holder == "other-token"


def test_lua_extend_to_script_replies_1_or_0_as_in_2_4_2(redis_server):
    client = redis_server.client()
    extend = client.register_script(LUA_EXTEND_TO_SCRIPT)
    assert extend(keys=["redbeat::lock"], args=["mine", 60000]) == 0  # no lock
    client.set("redbeat::lock", "mine", px=1000)
    assert extend(keys=["redbeat::lock"], args=["mine", 60000]) == 1
    assert client.pttl("redbeat::lock") > 50000
    assert extend(keys=["redbeat::lock"], args=["theirs", 1]) == 0
    assert extend(keys=["redbeat::lock"], args=["", 1]) == 0  # an empty token holds nothing
    assert client.pttl("redbeat::lock") > 50000

"""Loads the celery-redbeat 2.4.2 Redis dump (tests/fixtures) into a server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DUMP_PATH = Path(__file__).parent.parent / "fixtures" / "celery-redbeat-2.4.2-dump.json"


def read_dump() -> dict[str, Any]:
    return json.loads(DUMP_PATH.read_text())


def load_dump(client: Any) -> dict[str, Any]:
    dump = read_dump()
    with client.pipeline() as pipe:
        for key, item in dump["keys"].items():
            kind, value = item["type"], item["value"]
            if kind == "string":
                pipe.set(key, value)
            elif kind == "zset":
                pipe.zadd(key, {member: score for member, score in value})
            elif kind == "set":
                pipe.sadd(key, *value)
            elif kind == "hash":
                pipe.hset(key, mapping=value)
        pipe.execute()
    return dump


def dump_hashes(dump: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {key: item["value"] for key, item in dump["keys"].items() if item["type"] == "hash"}

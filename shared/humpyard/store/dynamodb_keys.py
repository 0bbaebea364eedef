"""Where the ledger's items live in the DynamoDB tables: a decision's key (its day,
its shard, its time and id: ``dynamodb_ledger``'s docstring and ADR 0019), the key a
sort key's position reads back from, and a spend total's key and lifetime."""

from __future__ import annotations

import zlib

from humpyard.clock import key_time
from humpyard.records import request_time
from humpyard.store.dynamodb_base import Item, S, day_label, day_of, ts_key

DECISION_SHARDS = 4
"""A day's decisions are spread over this many partitions (``shard_of``)."""
SPEND_TTL_SECS = 400 * 86_400
"""How long a spend total is kept after its last add."""


def legacy_decision_key(request_id: str) -> Item:
    """Where the previous layout kept a decision (read by id until its TTL removes it)."""
    return {"pk": S(f"decision#{request_id}"), "sk": S("decision")}


def spend_key(key_id: str, period: str) -> Item:
    return {"pk": S(f"spend#{key_id}"), "sk": S(period)}


def shard_of(request_id: str) -> int:
    """The shard of a decision: stable, and even over request ids."""
    return zlib.crc32(request_id.encode()) % DECISION_SHARDS


def partition(day: int, shard: int) -> str:
    return f"decision#{day_label(day)}#{shard}"


def decision_key(request_id: str, ts: float) -> Item:
    """The key of a decision: its id's time when the id carries one, else ``ts``."""
    when = request_time(request_id)
    if when is None:
        when = ts
    return {"pk": S(partition(day_of(when), shard_of(request_id))),
            "sk": S(f"{ts_key(when)}#{request_id}")}


def sort_position(sort: str) -> tuple[float, str]:
    """(time, request id) of a sort key."""
    stamp, _, rid = sort.partition("#")
    return key_time(stamp), rid


LIMITS_TTL_SECS = 7 * 86_400
"""How long a key's limit item is kept after its last write."""


def limits_key(key_id: str) -> Item:
    """The item of a key's per-key limit counters and in-flight slot leases."""
    return {"pk": S(f"limits#{key_id}"), "sk": S("limits")}

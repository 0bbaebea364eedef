"""The ``LiveStateStore`` half of ``DynamoDBStore``: breakers and latency buckets.

Every breaker is two attributes of one item, ``live``/``live`` in the state
table: ``b:<endpoint>`` (the state as JSON) and ``v:<endpoint>`` (its
version). One read brings them all back (with the overrides' version,
``ov``, kept on the same item), which is what lets an instance refresh its
whole view of the shared state with one call (``DynamoDBStore.read_shared``).
``put_breaker`` is an ``UpdateItem`` conditional on that endpoint's version
alone (``attribute_not_exists`` or ``= :expected``), so writers of different
endpoints never conflict, and it asks for the item back when the condition
fails, so the loser learns the current state without a second read. The
item only changes on a breaker transition or an override change: it is
never written per request.

Latency is one item per time bucket and shard (``latency#<shard>``; each
store object writes one shard, drawn at random), holding ``n:<target>`` and
``ms:<target>`` counters: a flush of any number of targets is one
``UpdateItem`` with ``ADD``; a read sums the shards.
"""

from __future__ import annotations

import json
from typing import Any

from humpyard.store.dynamodb_base import (
    ConditionFailed,
    DynamoDBBase,
    Item,
    N,
    S,
    as_float,
    as_int,
    as_str,
    int_key,
    key_of,
)
from humpyard.store.dynamodb_schema import TTL_ATTRIBUTE
from humpyard.store.live import check_breaker_version
from humpyard.store.rows import to_json

LATENCY_TTL_SECS = 86_400
LATENCY_SHARDS = 4
MAX_TARGETS_PER_UPDATE = 40  # keeps each UpdateExpression well under DynamoDB's 4 KB
LIVE_KEY: Item = {"pk": S("live"), "sk": S("live")}
OVERRIDES_VERSION = "ov"
_BODY = "b:"
_VERSION = "v:"
_COUNT = "n:"
_TOTAL = "ms:"


def latency_key(shard: int, bucket: int) -> Item:
    return {"pk": S(f"latency#{shard}"), "sk": S(int_key(int(bucket)))}


def breakers_of(item: Item | None) -> dict[str, dict[str, Any]]:
    """Every breaker state on the live item."""
    out: dict[str, dict[str, Any]] = {}
    for name in (item or {}):
        if name.startswith(_BODY):
            out[name[len(_BODY):]] = json.loads(as_str(item or {}, name) or "{}")
    return out


def latency_of(items: list[Item]) -> dict[str, dict[int, tuple[int, float]]]:
    """Target → bucket → (count, total ms), summed over the shards of ``items``."""
    out: dict[str, dict[int, tuple[int, float]]] = {}
    for item in items:
        bucket = as_int(item, "bucket")
        for name in item:
            if name.startswith(_COUNT):
                target = name[len(_COUNT):]
                cells = out.setdefault(target, {})
                count, total = cells.get(bucket, (0, 0.0))
                cells[bucket] = (count + as_int(item, name),
                                 total + as_float(item, _TOTAL + target))
    return out


class DynamoDBLive(DynamoDBBase):
    """Shared breaker states and latency buckets."""

    _latency_shard: int | None = None

    def _live_item(self, **kwargs: Any) -> Item | None:
        found: Item | None = self._call("get_item", TableName=self.state_table, Key=LIVE_KEY,
                                        ConsistentRead=True, **kwargs).get("Item")
        return found

    def get_breakers(self) -> dict[str, dict[str, Any]]:
        return breakers_of(self._live_item())

    def get_breaker(self, key: str) -> dict[str, Any] | None:
        item = self._live_item(ProjectionExpression="#b",
                               ExpressionAttributeNames={"#b": _BODY + key})
        return breakers_of(item).get(key)

    def put_breaker(
        self, key: str, state: dict[str, Any], expected_version: int | None,
    ) -> tuple[bool, dict[str, Any] | None]:
        version = check_breaker_version(state, expected_version)
        body = to_json({**state, "version": version})
        names = {"#b": _BODY + key, "#v": _VERSION + key}
        values: dict[str, Any] = {":body": S(body), ":version": N(version)}
        if expected_version is None:
            condition = "attribute_not_exists(#v)"
        else:
            condition = "#v = :expected"
            values[":expected"] = N(expected_version)
        try:
            self._call("update_item", TableName=self.state_table, Key=LIVE_KEY,
                       UpdateExpression="SET #b = :body, #v = :version",
                       ConditionExpression=condition, ExpressionAttributeNames=names,
                       ExpressionAttributeValues=values,
                       ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ConditionFailed as lost:
            return False, breakers_of(lost.item).get(key)
        return True, json.loads(body)

    def add_latency(self, samples: dict[str, tuple[int, float]], bucket: int) -> None:
        if self._latency_shard is None:
            self._latency_shard = self._rng.randrange(LATENCY_SHARDS)
        checked = [(t, int(c), float(ms)) for t, (c, ms) in sorted(samples.items())]
        expires = N(int(self._clock.now() + LATENCY_TTL_SECS))
        for start in range(0, len(checked), MAX_TARGETS_PER_UPDATE):
            names = {"#ttl": TTL_ATTRIBUTE, "#b": "bucket"}
            values: dict[str, Any] = {":ttl": expires, ":b": N(int(bucket))}
            adds = []
            chunk = checked[start:start + MAX_TARGETS_PER_UPDATE]
            for i, (target, count, total_ms) in enumerate(chunk):
                names[f"#n{i}"], names[f"#m{i}"] = _COUNT + target, _TOTAL + target
                values[f":n{i}"], values[f":m{i}"] = N(count), N(total_ms)
                adds.append(f"#n{i} :n{i}, #m{i} :m{i}")
            self._call("update_item", TableName=self.state_table,
                       Key=latency_key(self._latency_shard, bucket),
                       UpdateExpression=f"ADD {', '.join(adds)} SET #ttl = :ttl, #b = :b",
                       ExpressionAttributeNames=names, ExpressionAttributeValues=values)

    def _latency_items(self, cond: str, bound: int) -> list[Item]:
        return [item for shard in range(LATENCY_SHARDS) for item in self._query(
            TableName=self.state_table, ConsistentRead=True,
            KeyConditionExpression=f"pk = :pk AND sk {cond} :b",
            ExpressionAttributeValues={":pk": S(f"latency#{shard}"),
                                       ":b": S(int_key(max(0, bound)))})]

    def get_latency(self, since_bucket: int) -> dict[str, list[tuple[int, int, float]]]:
        cells = latency_of(self._latency_items(">=", since_bucket))
        return {target: [(b, c, ms) for b, (c, ms) in sorted(by_bucket.items())]
                for target, by_bucket in sorted(cells.items())}

    def purge_latency(self, before_bucket: int) -> int:
        if before_bucket <= 0:
            return 0
        old = self._latency_items("<", before_bucket)
        self._delete_keys(self.state_table, [key_of(i) for i in old])
        return sum(len(cells) for cells in latency_of(old).values())

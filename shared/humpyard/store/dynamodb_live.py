"""The ``LiveStateStore`` half of ``DynamoDBStore``: breakers and latency buckets.

Breakers are one item each in the state table's ``breaker`` partition, so
one Query reads them all. ``put_breaker`` is a conditional ``PutItem``
(``attribute_not_exists`` or ``version = :expected``) that asks for the
stored item back when the condition fails, so the loser learns the current
state without a second read.

Latency is one item per time bucket holding ``n:<target>`` and
``ms:<target>`` counters: a flush of any number of targets is one
``UpdateItem`` with ``ADD``, and a read of the last ``max_age`` is one Query.
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
MAX_TARGETS_PER_UPDATE = 40  # keeps each UpdateExpression well under DynamoDB's 4 KB
_COUNT = "n:"
_TOTAL = "ms:"


def _breaker_key(key: str) -> Item:
    return {"pk": S("breaker"), "sk": S(key)}


def _breaker(item: Item | None) -> dict[str, Any] | None:
    if not item:
        return None
    state: dict[str, Any] = json.loads(as_str(item, "body") or "{}")
    return state


class DynamoDBLive(DynamoDBBase):
    """Shared breaker states and latency buckets."""

    def get_breakers(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for item in self._query(TableName=self.state_table, ConsistentRead=True,
                                KeyConditionExpression="pk = :pk",
                                ExpressionAttributeValues={":pk": S("breaker")}):
            state = _breaker(item)
            if state is not None:
                out[as_str(item, "sk") or ""] = state
        return out

    def get_breaker(self, key: str) -> dict[str, Any] | None:
        found = self._call("get_item", TableName=self.state_table, Key=_breaker_key(key),
                           ConsistentRead=True)
        return _breaker(found.get("Item"))

    def put_breaker(
        self, key: str, state: dict[str, Any], expected_version: int | None,
    ) -> tuple[bool, dict[str, Any] | None]:
        version = check_breaker_version(state, expected_version)
        body = to_json({**state, "version": version})
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(pk)"} if expected_version is None
            else {"ConditionExpression": "#v = :expected",
                  "ExpressionAttributeNames": {"#v": "version"},
                  "ExpressionAttributeValues": {":expected": N(expected_version)}})
        try:
            self._call("put_item", TableName=self.state_table,
                       Item={**_breaker_key(key), "body": S(body), "version": N(version)},
                       ReturnValuesOnConditionCheckFailure="ALL_OLD", **condition)
        except ConditionFailed as lost:
            return False, _breaker(lost.item)
        return True, json.loads(body)

    def add_latency(self, samples: dict[str, tuple[int, float]], bucket: int) -> None:
        checked = [(t, int(c), float(ms)) for t, (c, ms) in sorted(samples.items())]
        sk = S(int_key(int(bucket)))
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
                       Key={"pk": S("latency"), "sk": sk},
                       UpdateExpression=f"ADD {', '.join(adds)} SET #ttl = :ttl, #b = :b",
                       ExpressionAttributeNames=names, ExpressionAttributeValues=values)

    def _latency_items(self, cond: str, bound: int) -> list[Item]:
        return list(self._query(
            TableName=self.state_table, ConsistentRead=True,
            KeyConditionExpression=f"pk = :pk AND sk {cond} :b",
            ExpressionAttributeValues={":pk": S("latency"), ":b": S(int_key(max(0, bound)))}))

    def get_latency(self, since_bucket: int) -> dict[str, list[tuple[int, int, float]]]:
        out: dict[str, list[tuple[int, int, float]]] = {}
        for item in self._latency_items(">=", since_bucket):  # ascending by bucket
            bucket = as_int(item, "bucket")
            for name in sorted(item):
                if name.startswith(_COUNT):
                    target = name[len(_COUNT):]
                    out.setdefault(target, []).append(
                        (bucket, as_int(item, name), as_float(item, _TOTAL + target)))
        return out

    def purge_latency(self, before_bucket: int) -> int:
        if before_bucket <= 0:
            return 0
        old = self._latency_items("<", before_bucket)
        self._delete_keys(self.state_table, [key_of(i) for i in old])
        return sum(1 for i in old for name in i if name.startswith(_COUNT))

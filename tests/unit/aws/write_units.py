"""What DynamoDB bills for every write, and on which partition: a boto3 client proxy for tests.

``WriteUnits(client)`` forwards every call and, for each write
(``PutItem``, ``UpdateItem``, ``DeleteItem``, ``BatchWriteItem``,
``TransactWriteItems``), reads the item before and after it through the
raw client (uncounted) and records one ``Write`` per item and per GSI entry
it changes: the table or ``table/index``, the partition key value, and the
write units as DynamoDB bills them on demand —

- an item: 1 unit per started KB of the larger of the old and new item
  (``UpdateItem`` and ``PutItem`` alike), twice in a transaction;
- a GSI entry: 1 unit per started KB of the projected entry (table keys,
  index keys, projected attributes, plus 100 bytes of overhead), written
  when the item enters or leaves the index or a projected attribute
  changes; a changed index key is a delete plus a put.

Reads are priced too (``read_units``): ``GetItem`` and ``BatchGetItem`` 1
unit per started 4 KB of each key asked for (a missing item costs one),
``Query`` per started 4 KB of all it returned; half that when not strongly
consistent.

Item sizes follow DynamoDB's rules: attribute names plus values, a number
about one byte per two digits plus one. ``heat()`` sums the write units per
partition. The table layouts come from ``dynamodb_schema``.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from humpyard.store.dynamodb_schema import LEDGER_TABLE, STATE_TABLE

INDEX_OVERHEAD = 100


def value_size(value: dict[str, Any]) -> int:
    (kind, raw), = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "N":
        digits = Decimal(raw).normalize().as_tuple().digits
        return len(digits) // 2 + 2
    if kind == "B":
        return len(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in raw.items())
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in raw)
    if kind in ("SS", "BS"):
        return sum(len(v) if kind == "BS" else len(v.encode()) for v in raw)
    if kind == "NS":
        return sum(value_size({"N": v}) for v in raw)
    raise ValueError(f"unknown attribute type {kind}")


def item_size(item: dict[str, Any] | None) -> int:
    """An item's size as DynamoDB counts it (0 for no item)."""
    return sum(len(n.encode()) + value_size(v) for n, v in (item or {}).items())


def units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


@dataclass(frozen=True)
class Write:
    """One billed write: where (``table`` or ``table/index``, partition key value) and units."""

    operation: str
    table: str
    partition: str
    units: int
    index: bool


class WriteUnits:
    """A client proxy recording a ``Write`` per item and index entry written; thread-safe."""

    def __init__(self, client: Any, state_table: str, ledger_table: str) -> None:
        self._client = client
        self._api: dict[str, str] = dict(client.meta.method_to_api_mapping)
        self._lock = threading.Lock()
        self._indexes = {state_table: _indexes(STATE_TABLE), ledger_table: _indexes(LEDGER_TABLE)}
        self.writes: list[Write] = []
        self.calls: Counter[str] = Counter()
        self.read_units = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        operation = self._api.get(name)
        if operation is None:
            return attr
        handler = getattr(self, f"_on_{name}", None)

        def recorded(**kwargs: Any) -> Any:
            with self._lock:
                self.calls[operation] += 1
            if handler is None:
                return attr(**kwargs)
            return handler(attr, **kwargs)

        return recorded

    # -- the write operations -------------------------------------------------------------

    def _on_get_item(self, call: Any, **kw: Any) -> Any:
        answer = call(**kw)
        self._read(kw, [answer["Item"]] if "Item" in answer else [], per_item=True, asked=1)
        return answer

    def _on_batch_get_item(self, call: Any, **kw: Any) -> Any:
        answer = call(**kw)
        for table, request in kw["RequestItems"].items():
            unread = len((answer.get("UnprocessedKeys") or {}).get(table, {}).get("Keys", []))
            self._read(request, answer.get("Responses", {}).get(table, []), per_item=True,
                       asked=len(request["Keys"]) - unread)
        return answer

    def _on_query(self, call: Any, **kw: Any) -> Any:
        answer = call(**kw)
        self._read(kw, answer.get("Items", []), per_item=False)
        return answer

    def _read(self, kw: dict[str, Any], items: list[dict[str, Any]], *, per_item: bool,
              asked: int = 0) -> None:
        factor = 1.0 if kw.get("ConsistentRead") else 0.5
        if per_item:
            found = (sum(max(1, math.ceil(item_size(i) / 4096)) for i in items)
                     + max(0, asked - len(items)))
        else:
            found = max(1, math.ceil(sum(item_size(i) for i in items) / 4096))
        with self._lock:
            self.read_units += factor * found

    def _on_put_item(self, call: Any, **kw: Any) -> Any:
        return self._single("PutItem", call, kw, kw["TableName"], _key(kw["Item"]))

    def _on_update_item(self, call: Any, **kw: Any) -> Any:
        return self._single("UpdateItem", call, kw, kw["TableName"], kw["Key"])

    def _on_delete_item(self, call: Any, **kw: Any) -> Any:
        return self._single("DeleteItem", call, kw, kw["TableName"], kw["Key"])

    def _single(self, op: str, call: Any, kw: dict[str, Any], table: str,
                key: dict[str, Any], factor: int = 1) -> Any:
        # Reads of the item around the write, only where they change the price: a put of
        # a new item (conditional on it) had nothing before; an ADD on a table without
        # indexes only grows the item, so the new size is the larger.
        new_only = (op == "PutItem" and kw.get("ConditionExpression")
                    == "attribute_not_exists(pk)")
        grows = op == "UpdateItem" and not self._indexes.get(table)
        before = None if new_only or grows else self._get(table, key)
        try:
            return call(**kw)
        finally:
            after = kw["Item"] if new_only else self._get(table, key)
            self._record(op, table, before, after, factor)

    def _on_batch_write_item(self, call: Any, **kw: Any) -> Any:
        wanted = [(table, _key(r["PutRequest"]["Item"]) if "PutRequest" in r
                   else r["DeleteRequest"]["Key"])
                  for table, requests in kw["RequestItems"].items() for r in requests]
        before = [self._get(t, k) for t, k in wanted]
        answer = call(**kw)
        unprocessed = {(t, repr(sorted(_key(r.get("PutRequest", {}).get("Item")
                                            or r["DeleteRequest"]["Key"]).items())))
                       for t, requests in (answer.get("UnprocessedItems") or {}).items()
                       for r in requests}
        for (table, key), old in zip(wanted, before, strict=True):
            if (table, repr(sorted(key.items()))) not in unprocessed:
                self._record("BatchWriteItem", table, old, self._get(table, key), 1)
        return answer

    def _on_transact_write_items(self, call: Any, **kw: Any) -> Any:
        wanted = []
        for entry in kw["TransactItems"]:
            (kind, body), = entry.items()
            if kind == "ConditionCheck":
                continue
            key = _key(body["Item"]) if kind == "Put" else body["Key"]
            wanted.append((body["TableName"], key))
        before = [self._get(t, k) for t, k in wanted]
        answer = call(**kw)  # all or nothing: on an error nothing was written
        for (table, key), old in zip(wanted, before, strict=True):
            self._record("TransactWriteItems", table, old, self._get(table, key), 2)
        return answer

    # -- accounting -----------------------------------------------------------------------

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._client.get_item(
            TableName=table, Key=key, ConsistentRead=True).get("Item")
        return found

    def _record(self, op: str, table: str, before: dict[str, Any] | None,
                after: dict[str, Any] | None, factor: int) -> None:
        if before is None and after is None:
            return  # a failed conditional put of a new item: billed, but nothing to attribute
        pk = (after or before or {})["pk"]["S"]
        found = [Write(op, table, pk, factor * units(max(item_size(before), item_size(after))),
                       False)]
        for name, (hash_attr, projected) in self._indexes.get(table, {}).items():
            old, new = _entry(before, hash_attr, projected), _entry(after, hash_attr, projected)
            if old == new:
                continue
            for entry in (old, new):
                if entry is None:
                    continue
                if old is not None and new is not None and entry is old and (
                        old[hash_attr] == new[hash_attr]):
                    continue  # same partition: one (update) write, counted with the new entry
                found.append(Write(op, f"{table}/{name}", entry[hash_attr]["S"],
                                   factor * units(item_size(entry) + INDEX_OVERHEAD), True))
        with self._lock:
            self.writes.extend(found)

    # -- reports --------------------------------------------------------------------------

    def items(self) -> int:
        """Items written (index entries aside)."""
        with self._lock:
            return sum(1 for w in self.writes if not w.index)

    def total_units(self) -> int:
        with self._lock:
            return sum(w.units for w in self.writes)

    def heat(self) -> Counter[tuple[str, str]]:
        """Write units per (table or table/index, partition key value)."""
        out: Counter[tuple[str, str]] = Counter()
        with self._lock:
            for w in self.writes:
                out[(w.table, w.partition)] += w.units
        return out

    def reset(self) -> None:
        with self._lock:
            self.writes.clear()
            self.calls.clear()
            self.read_units = 0.0


def _key(item: dict[str, Any]) -> dict[str, Any]:
    return {"pk": item["pk"], "sk": item["sk"]}


def _indexes(spec: dict[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    out = {}
    for gsi in spec.get("GlobalSecondaryIndexes", []):
        keys = [k["AttributeName"] for k in gsi["KeySchema"]]
        projected = tuple(gsi["Projection"].get("NonKeyAttributes", ()))
        out[gsi["IndexName"]] = (keys[0], ("pk", "sk", *keys, *projected))
    return out


def _entry(item: dict[str, Any] | None, hash_attr: str,
           projected: tuple[str, ...]) -> dict[str, Any] | None:
    if not item or hash_attr not in item:
        return None
    return {name: item[name] for name in projected if name in item}

"""The ``LedgerStore`` half of ``DynamoDBStore``: decisions, spend, listing and purge.

A decision is one conditional ``PutItem`` (``attribute_not_exists(pk)``, so
a request id is recorded once) of an item kept small: the body as JSON, or
zlib-compressed when that is shorter than ``COMPRESS_OVER`` bytes of JSON
allow, plus the few fields listing filters on. The item carries the keys of
two sparse GSIs and no others (``dynamodb_schema``):

- ``by_day``: ``g_all`` = ``<YYYY-MM-DD>#<ok|x>#<shard>`` — every decision,
  split by outcome class (``ok`` or anything else) and write-sharded;
- ``by_route``: ``g_route`` = ``<route>#<YYYY-MM-DD>#<shard>`` — decisions
  with a route.

The shard is ``crc32(request id) % INDEX_SHARDS``, so no index partition
takes more than a quarter of a day's decisions (of one class, or of one
route). Listing walks the day partitions newest first and, per day, queries
every shard of the chosen index and merges them: ``?route=`` on
``by_route``; anything else on ``by_day`` (``?outcome=`` only the class it
belongs to), with ``rule``, ``key_id`` and ``outcome`` as filters.

Stats are not written with the decision (``dynamodb_stats``); spend is one
``ADD`` per key and period. Nothing here ever scans.
"""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass, field
from typing import Any

from humpyard.errors import ConflictError, StoreError
from humpyard.store import decisions as dec
from humpyard.store.base import LedgerBatch
from humpyard.store.dynamodb_base import (
    CLOCK_SKEW_SECS,
    ConditionFailed,
    Item,
    N,
    S,
    as_float,
    as_str,
    day_label,
    day_of,
    key_of,
    ts_key,
)
from humpyard.store.dynamodb_schema import (
    ROUTE_INDEX,
    SORT_ATTRIBUTE,
    TIME_INDEX,
    TTL_ATTRIBUTE,
)
from humpyard.store.dynamodb_stats import DynamoDBStats
from humpyard.store.rows import check_usd

logger = logging.getLogger("humpyard.store")

INDEX_SHARDS = 4
COMPRESS_OVER = 512
"""A body of more bytes of JSON than this is stored compressed (``bodyz``, binary)."""

OK_CLASS, OTHER_CLASS = "ok", "x"
SPEND_TTL_SECS = 400 * 86_400
_FILTERS = ("rule", "outcome", "key_id")


def decision_key(request_id: str) -> Item:
    return {"pk": S(f"decision#{request_id}"), "sk": S("decision")}


def spend_key(key_id: str, period: str) -> Item:
    return {"pk": S(f"spend#{key_id}"), "sk": S(period)}


def shard_of(request_id: str) -> int:
    """The index shard of a decision: stable, and even over request ids."""
    return zlib.crc32(request_id.encode()) % INDEX_SHARDS


def outcome_class(outcome: str | None) -> str:
    return OK_CLASS if outcome == "ok" else OTHER_CLASS


def time_partition(day: int, klass: str, shard: int) -> str:
    return f"{day_label(day)}#{klass}#{shard}"


def route_partition(route: str, day: int, shard: int) -> str:
    return f"{route}#{day_label(day)}#{shard}"


def body_of(item: Item) -> dict[str, Any]:
    """The decision an item holds, as appended."""
    packed = item.get("bodyz")
    if packed is not None:
        raw = packed["B"]
        return json.loads(zlib.decompress(raw if isinstance(raw, bytes) else bytes(raw)))
    found: dict[str, Any] = json.loads(as_str(item, "body") or "{}")
    return found


class LedgerWriteError(StoreError):
    """``write_batch`` could not write everything; ``unwritten`` is what is missing."""

    def __init__(self, message: str, unwritten: LedgerBatch) -> None:
        super().__init__(message)
        self.unwritten = unwritten


@dataclass(frozen=True, slots=True)
class _Listed:
    sort: str  # the g_sk: "<ts key>#<request id>", ordered like (ts, request_id)
    ts: float
    request_id: str


@dataclass
class _Listing:
    """Which index a listing walks, its partitions per day, and the filters left over."""

    index: str
    attr: str
    partitions: Any  # day -> list of partition values
    filters: dict[str, str] = field(default_factory=dict)


class DynamoDBLedger(DynamoDBStats):
    """Decisions, spend per key and period, retention."""

    # -- decisions ----------------------------------------------------------------

    def append_decision(self, decision: dict[str, Any]) -> None:
        row = dec.decision_row(decision)
        if not self._put_decision(row):
            raise ConflictError(f"decision {row.request_id} is already recorded")
        self._count_stats([row])
        self._flush_stats_when_due()

    def write_batch(self, batch: LedgerBatch) -> None:
        # Everything is checked before anything is written (ValueError names the item).
        rows = [dec.decision_row(d) for d in batch.decisions]
        spend = {key: check_usd(usd) for key, usd in batch.spend.items()}
        recorded: list[dec.DecisionRow] = []
        unwritten = LedgerBatch()
        failure: StoreError | None = None
        for row, decision in zip(rows, batch.decisions, strict=True):
            try:
                if self._put_decision(row):
                    recorded.append(row)
            except StoreError as exc:
                failure = failure or exc
                unwritten.decisions.append(decision)
        self._count_stats(recorded)
        for (key_id, period), usd in spend.items():
            try:
                self.add_spend(key_id, period, usd)
            except StoreError as exc:
                failure = failure or exc
                unwritten.spend[(key_id, period)] = usd
        self._flush_stats_when_due()
        if failure is not None:
            raise LedgerWriteError(f"{len(unwritten)} of {len(batch)} ledger writes failed: "
                                   f"{failure}", unwritten) from failure

    def _put_decision(self, row: dec.DecisionRow) -> bool:
        """Write the decision item; False when its request id is already recorded."""
        try:
            self._call("put_item", TableName=self.ledger_table, Item=self._decision_item(row),
                       ConditionExpression="attribute_not_exists(pk)")
        except ConditionFailed:
            return False
        return True

    def _decision_item(self, row: dec.DecisionRow) -> Item:
        day = day_of(row.ts)
        shard = shard_of(row.request_id)
        item: Item = {
            **decision_key(row.request_id), "ts": N(row.ts),
            TTL_ATTRIBUTE: self._expiry(row.ts),
            SORT_ATTRIBUTE: S(f"{ts_key(row.ts)}#{row.request_id}"),
            TIME_INDEX[1]: S(time_partition(day, outcome_class(row.outcome), shard)),
        }
        if row.route is not None:
            item["route"] = S(row.route)
            item[ROUTE_INDEX[1]] = S(route_partition(row.route, day, shard))
        for name in _FILTERS:
            value = getattr(row, name)
            if value is not None:
                item[name] = S(value)
        raw = row.body.encode()
        if len(raw) > COMPRESS_OVER:
            packed = zlib.compress(raw, 6)
            if len(packed) < len(raw):
                item["bodyz"] = {"B": packed}
                return item
        item["body"] = S(row.body)
        return item

    def list_decisions(
        self, *, route: str | None = None, rule: str | None = None,
        outcome: str | None = None, key_id: str | None = None,
        since: float | None = None, limit: int = 50, cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        limit = dec.page_limit(limit)
        after = dec.decode_cursor(cursor) if cursor else None
        listing = _listing(route, rule, outcome, key_id)
        now = self._clock.now()
        newest = day_of(after[0]) if after else day_of(now + CLOCK_SKEW_SECS)
        oldest = day_of(since) if since is not None else day_of(now - self.retention_secs) - 1
        upper = f"{ts_key(after[0])}#{after[1]}" if after else None
        lower = ts_key(since) if since is not None else None
        found: list[_Listed] = []
        if upper is not None and lower is not None and lower > upper:
            oldest = newest + 1  # the cursor is older than ``since``: nothing left
        for day in range(newest, oldest - 1, -1):
            want = limit + 1 - len(found)
            merged: list[_Listed] = []
            for pk in listing.partitions(day):
                merged += self._index_page(listing, pk, upper, lower, want)
            merged.sort(key=lambda e: e.sort, reverse=True)
            found += merged[:want]
            if len(found) > limit:
                break
        page = found[:limit]
        bodies = self._bodies([f.request_id for f in page])
        decisions = [bodies[f.request_id] for f in page if f.request_id in bodies]
        more = len(found) > limit
        return decisions, dec.encode_cursor(page[-1].ts, page[-1].request_id) if more else None

    def _index_page(self, listing: _Listing, pk: str, upper: str | None, lower: str | None,
                    want: int) -> list[_Listed]:
        """Up to ``want`` entries of one partition, newest first, ``lower <= g_sk < upper``."""
        names = {"#p": listing.attr}
        values: dict[str, Any] = {":p": S(pk)}
        cond = "#p = :p"
        if upper is not None or lower is not None:
            names["#s"] = SORT_ATTRIBUTE
        if upper is not None and lower is not None:
            cond += " AND #s BETWEEN :lo AND :up"  # inclusive: the cursor's own entry is dropped
            values.update({":lo": S(lower), ":up": S(upper)})
        elif upper is not None:
            cond += " AND #s < :up"
            values[":up"] = S(upper)
        elif lower is not None:
            cond += " AND #s >= :lo"
            values[":lo"] = S(lower)
        kwargs: dict[str, Any] = {"TableName": self.ledger_table, "IndexName": listing.index,
                                  "KeyConditionExpression": cond, "ScanIndexForward": False,
                                  "Limit": want}
        if listing.filters:
            clauses = []
            for i, (name, value) in enumerate(sorted(listing.filters.items())):
                names[f"#f{i}"] = name
                values[f":f{i}"] = S(value)
                clauses.append(f"#f{i} = :f{i}")
            kwargs["FilterExpression"] = " AND ".join(clauses)
            kwargs["Limit"] = min(max(want * 4, 100), 1000)
        kwargs.update(ExpressionAttributeNames=names, ExpressionAttributeValues=values)
        out: list[_Listed] = []
        for item in self._query(**kwargs):
            sort = as_str(item, SORT_ATTRIBUTE) or ""
            if sort == upper:
                continue
            out.append(_Listed(sort, as_float(item, "ts"), sort.split("#", 1)[1]))
            if len(out) >= want:
                break
        return out

    def _bodies(self, request_ids: list[str]) -> dict[str, dict[str, Any]]:
        items = self._batch_get(self.ledger_table, [decision_key(r) for r in request_ids])
        return {(as_str(i, "pk") or "").split("#", 1)[1]: body_of(i) for i in items}

    def get_decision(self, request_id: str) -> dict[str, Any] | None:
        found = self._call("get_item", TableName=self.ledger_table,
                           Key=decision_key(request_id), ConsistentRead=True).get("Item")
        return None if found is None else body_of(found)

    # -- spend ----------------------------------------------------------------------

    def add_spend(self, key_id: str, period: str, usd: float) -> float:
        usd = check_usd(usd)
        answer = self._call(
            "update_item", TableName=self.state_table, Key=spend_key(key_id, period),
            UpdateExpression="ADD #u :u, #c :u SET #ttl = :ttl",  # committed: leases
            ExpressionAttributeNames={"#u": "usd", "#c": "committed", "#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues={":u": N(usd),
                                       ":ttl": N(int(self._clock.now() + SPEND_TTL_SECS))},
            ReturnValues="UPDATED_NEW")
        return as_float(answer.get("Attributes", {}), "usd")

    def get_spend(self, key_id: str, period: str) -> float:
        return self.spend_for({key_id: period})[key_id]

    def spend_for(self, period_by_key: dict[str, str]) -> dict[str, float]:
        keys = [spend_key(k, p) for k, p in period_by_key.items()]
        found = {(as_str(i, "pk"), as_str(i, "sk")): as_float(i, "usd")
                 for i in self._batch_get(self.state_table, keys)}
        return {k: found.get((f"spend#{k}", p), 0.0) for k, p in period_by_key.items()}

    # -- retention --------------------------------------------------------------------

    def _purge_ledger(self, before: float) -> int:
        """Decisions and stats buckets older than ``before``; the number of decisions."""
        decisions = self._purge_decisions(before)
        self._purge_stats(before)
        return decisions

    def _purge_decisions(self, before: float) -> int:
        # From the newest day a decision can be on, back past the TTL horizon (TTL
        # deletes within about two days of expiry).
        now = self._clock.now()
        newest = day_of(min(before, now + CLOCK_SKEW_SECS))
        horizon = min(before, now) - self.retention_secs - 3 * 86_400
        index, attr = TIME_INDEX
        keys: list[Item] = []
        for day in range(newest, day_of(horizon) - 1, -1):
            for pk in _time_partitions(day, (OK_CLASS, OTHER_CLASS)):
                keys += [key_of(i) for i in self._query(
                    TableName=self.ledger_table, IndexName=index,
                    KeyConditionExpression="#p = :p AND #s < :c",
                    ExpressionAttributeNames={"#p": attr, "#s": SORT_ATTRIBUTE},
                    ExpressionAttributeValues={":p": S(pk), ":c": S(ts_key(before))})]
        self._delete_keys(self.ledger_table, keys)
        return len(keys)


def _time_partitions(day: int, classes: tuple[str, ...]) -> list[str]:
    return [time_partition(day, k, s) for k in classes for s in range(INDEX_SHARDS)]


def _listing(route: str | None, rule: str | None, outcome: str | None,
             key_id: str | None) -> _Listing:
    """The index and partitions a listing with these filters reads, and its filters."""
    filters = {name: value for name, value in
               (("rule", rule), ("outcome", outcome), ("key_id", key_id)) if value is not None}
    if route is not None:
        return _Listing(*ROUTE_INDEX, lambda day: [route_partition(route, day, s)
                                                   for s in range(INDEX_SHARDS)], filters)
    classes = (OK_CLASS, OTHER_CLASS) if outcome is None else (outcome_class(outcome),)
    if outcome == OK_CLASS:
        del filters["outcome"]  # the ok partitions hold nothing else
    return _Listing(*TIME_INDEX, lambda day: _time_partitions(day, classes), filters)

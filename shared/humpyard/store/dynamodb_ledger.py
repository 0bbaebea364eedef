"""The ``LedgerStore`` half of ``DynamoDBStore``: decisions, spend, listing and purge.

A decision is ONE item and no index entry (ADR 0019): a conditional
``PutItem`` (``attribute_not_exists(pk)``, so a request id is recorded once)
keyed for listing by the table's own keys::

    pk = decision#<YYYY-MM-DD>#<shard>     sk = <time key>#<request id>

The time is the one the request id carries (``records.request_time``: every
id the gateway issues starts with its time), so ``get_decision`` is one
``GetItem`` and a repeated id lands on the same key; an id that carries no
time (one written by a test, or by hand) is keyed by the decision's ``ts``
and found, and checked for repeats, by a bounded walk of its shard
(``FOREIGN_WALK_ITEMS``). The shard is ``crc32(request id) %
DECISION_SHARDS``, so no partition takes more than a quarter of a day's
decisions (the keys are built in ``dynamodb_keys``). The item holds the
body as JSON, or zlib-compressed when that is shorter than ``COMPRESS_OVER``
bytes of JSON allow, and the four fields listing filters on (``route``,
``rule``, ``outcome``, ``key_id``).

Listing walks the day partitions newest first and, per day, queries every
shard (strongly consistent, sorted on ``sk``) and merges them, the filters
evaluated by DynamoDB (``FilterExpression``). A page examines at most
``LIST_EXAMINED_ITEMS`` items: when a rare filter has not filled the page by
then, the page comes back short with a cursor where the walk stopped, so no
listing call reads more than that, however large the table.

Stats are not written with the decision (``dynamodb_stats``); spend is one
``ADD`` per key and period. Nothing here ever scans.
"""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass
from typing import Any

from humpyard.errors import ConflictError, StoreError, StoreUnavailable
from humpyard.records import request_time
from humpyard.store import decisions as dec
from humpyard.store.base import LedgerBatch
from humpyard.store.dynamodb_base import (
    CLOCK_SKEW_SECS,
    DAY,
    ConditionFailed,
    Item,
    N,
    S,
    as_float,
    as_str,
    day_of,
    key_of,
    ts_key,
)
from humpyard.store.dynamodb_keys import (
    DECISION_SHARDS,
    SPEND_TTL_SECS,
    decision_key,
    legacy_decision_key,
    partition,
    shard_of,
    sort_position,
    spend_key,
)
from humpyard.store.dynamodb_schema import TTL_ATTRIBUTE
from humpyard.store.dynamodb_stats import DynamoDBStats
from humpyard.store.rows import check_usd

logger = logging.getLogger("humpyard.store")

COMPRESS_OVER = 512
"""A body of more bytes of JSON than this is stored compressed (``bodyz``, binary)."""
LIST_EXAMINED_ITEMS = 5000
"""At most this many decisions are read for one page of a listing (about 3 MB, 800 read
units); a page that needs more comes back short, with a cursor."""
FOREIGN_WALK_ITEMS = 2000
"""How many of its shard's newest decisions an id that carries no time is looked for in."""

_FILTERS = ("route", "rule", "outcome", "key_id")


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

    @staticmethod
    def of(message: str, unwritten: LedgerBatch, failure: StoreError) -> LedgerWriteError:
        """The error for ``unwritten`` after ``failure``: ``LedgerUnavailable`` when
        the store was unavailable (the writer keeps the part and tries it again)."""
        kind = LedgerUnavailable if isinstance(failure, StoreUnavailable) else LedgerWriteError
        return kind(message, unwritten)


class LedgerUnavailable(LedgerWriteError, StoreUnavailable):
    """``LedgerWriteError`` because the store was unavailable: ``unwritten`` may be
    written again later."""


@dataclass
class _Shard:
    """One shard of one day being listed: where its walk stands."""

    pk: str
    start: Item | None = None  # ExclusiveStartKey of its next page
    done: bool = False
    low: str | None = None  # the sort key of the oldest item examined so far


class DynamoDBLedger(DynamoDBStats):
    """Decisions, spend per key and period, retention."""

    # -- decisions ----------------------------------------------------------------

    def append_decision(self, decision: dict[str, Any]) -> None:
        row = dec.decision_row(decision)
        if not self._put_decision(row):
            raise ConflictError(f"decision {row.request_id} is already recorded")
        self._count_stats([row])
        self.flush_stats_when_due()

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
        self._finish_batch(batch, recorded, spend, unwritten, failure)

    def _finish_batch(self, batch: LedgerBatch, recorded: list[dec.DecisionRow],
                      spend: dict[tuple[str, str], float], unwritten: LedgerBatch,
                      failure: StoreError | None) -> None:
        """After a batch's decisions: their stats, the batch's spend, and one
        ``LedgerWriteError`` naming everything unwritten (with the first failure)."""
        self._count_stats(recorded)
        for (key_id, period), usd in spend.items():
            try:
                self.add_spend(key_id, period, usd)
            except StoreError as exc:
                failure = failure or exc
                unwritten.spend[(key_id, period)] = usd
        self.flush_stats_when_due()
        if failure is not None:
            raise LedgerWriteError.of(f"{len(unwritten)} of {len(batch)} ledger writes "
                                      f"failed: {failure}", unwritten, failure) from failure

    def _put_decision(self, row: dec.DecisionRow) -> bool:
        """Write the decision item; False when its request id is already recorded."""
        if request_time(row.request_id) is None and self._find_foreign(row.request_id):
            return False  # an id without its time: its key depends on ts, so look first
        try:
            self._call("put_item", TableName=self.ledger_table, Item=self._decision_item(row),
                       ConditionExpression="attribute_not_exists(pk)")
        except ConditionFailed:
            return False
        return True

    def _decision_item(self, row: dec.DecisionRow) -> Item:
        item: Item = {**decision_key(row.request_id, row.ts),
                      TTL_ATTRIBUTE: self._expiry(row.ts)}
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
        filters = {name: value for name, value in (("route", route), ("rule", rule),
                                                   ("outcome", outcome), ("key_id", key_id))
                   if value is not None}
        now = self._clock.now()
        newest = day_of(after[0]) if after else day_of(now + CLOCK_SKEW_SECS)
        oldest = day_of(since) if since is not None else day_of(now - self.retention_secs) - 1
        upper = f"{ts_key(after[0])}#{after[1]}" if after else None
        lower = ts_key(since) if since is not None else None
        if upper is not None and lower is not None and lower > upper:
            return [], None  # the cursor is older than ``since``: nothing left
        found: list[tuple[str, Item]] = []
        budget = LIST_EXAMINED_ITEMS
        for day in range(newest, oldest - 1, -1):
            if budget <= 0:  # the walk stops between two days
                return _page(found), dec.encode_cursor((day + 1) * DAY, "")
            matched, stopped, budget = self._list_day(day, filters, upper, lower,
                                                      limit + 1 - len(found), budget)
            found += matched
            if len(found) > limit:
                break
            if stopped is not None:  # the walk stops inside this day
                return _page(found), dec.encode_cursor(*sort_position(stopped))
        page = found[:limit]
        more = len(found) > limit
        return _page(page), dec.encode_cursor(*sort_position(page[-1][0])) if more else None

    def _list_day(self, day: int, filters: dict[str, str], upper: str | None,
                  lower: str | None, want: int, budget: int,
                  ) -> tuple[list[tuple[str, Item]], str | None, int]:
        """The newest ``want`` matches of one day, newest first, reading at most ``budget``
        items: (matches, None, budget left), or, when the budget ran out first, (every
        match at or above the stopping point, the stopping point, 0). The stopping point
        is the sort key above which every shard has been read."""
        shards = [_Shard(partition(day, s)) for s in range(DECISION_SHARDS)]
        matches: list[tuple[str, Item]] = []
        size = want if not filters else min(max(want * 4, 100), 1000)
        while True:
            running = [sh for sh in shards if not sh.done]
            for sh in running:
                limit = max(1, min(size, budget // len(running)))
                budget -= self._list_page(sh, filters, upper, lower, limit, matches)
            running = [sh for sh in shards if not sh.done]
            frontier = max((sh.low or "") for sh in running) if running else ""
            final = sorted((m for m in matches if m[0] >= frontier), reverse=True)
            if not running or len(final) >= want:
                return final[:want], None, max(0, budget)
            if budget <= 0:
                return final, frontier, 0

    def _list_page(self, shard: _Shard, filters: dict[str, str], upper: str | None,
                   lower: str | None, limit: int, matches: list[tuple[str, Item]]) -> int:
        """Read one page of ``shard`` (newest first, ``lower <= sk < upper``), add what
        matched to ``matches``; the number of items read."""
        names = {"#p": "pk"}
        values: dict[str, Any] = {":p": S(shard.pk)}
        cond = "#p = :p"
        if upper is not None or lower is not None:
            names["#s"] = "sk"
        if upper is not None and lower is not None:
            cond += " AND #s BETWEEN :lo AND :up"  # inclusive: the cursor's own item is dropped
            values.update({":lo": S(lower), ":up": S(upper)})
        elif upper is not None:
            cond += " AND #s < :up"
            values[":up"] = S(upper)
        elif lower is not None:
            cond += " AND #s >= :lo"
            values[":lo"] = S(lower)
        kwargs: dict[str, Any] = {"TableName": self.ledger_table, "KeyConditionExpression": cond,
                                  "ScanIndexForward": False, "ConsistentRead": True,
                                  "Limit": limit}
        if filters:
            clauses = []
            for i, (name, value) in enumerate(sorted(filters.items())):
                names[f"#f{i}"] = name
                values[f":f{i}"] = S(value)
                clauses.append(f"#f{i} = :f{i}")
            kwargs["FilterExpression"] = " AND ".join(clauses)
        if shard.start is not None:
            kwargs["ExclusiveStartKey"] = shard.start
        kwargs.update(ExpressionAttributeNames=names, ExpressionAttributeValues=values)
        page = self._call("query", **kwargs)
        items = page.get("Items", [])
        for item in items:
            sort = as_str(item, "sk") or ""
            if sort != upper:
                matches.append((sort, item))
        last = page.get("LastEvaluatedKey")
        shard.start = last or None
        shard.done = not last
        if last:
            shard.low = as_str(last, "sk")
        return int(page.get("ScannedCount", len(items)))

    def get_decision(self, request_id: str) -> dict[str, Any] | None:
        when = request_time(request_id)
        if when is not None:  # one of the gateway's ids: it says where the decision is
            found = self._call("get_item", TableName=self.ledger_table,
                               Key=decision_key(request_id, when), ConsistentRead=True).get("Item")
            return None if found is None else body_of(found)
        found = self._call("get_item", TableName=self.ledger_table,
                           Key=legacy_decision_key(request_id), ConsistentRead=True).get("Item")
        if found is None:
            found = self._find_foreign(request_id)
        return None if found is None else body_of(found)

    def _find_foreign(self, request_id: str) -> Item | None:
        """The decision of an id that carries no time: looked for among the newest
        ``FOREIGN_WALK_ITEMS`` decisions of its shard, newest day first."""
        shard = shard_of(request_id)
        now = self._clock.now()
        budget = FOREIGN_WALK_ITEMS
        suffix = f"#{request_id}"
        for day in range(day_of(now + CLOCK_SKEW_SECS), day_of(now - self.retention_secs) - 2,
                         -1):
            start: Item | None = None
            while budget > 0:
                kwargs: dict[str, Any] = {
                    "TableName": self.ledger_table, "KeyConditionExpression": "#p = :p",
                    "ExpressionAttributeNames": {"#p": "pk"},
                    "ExpressionAttributeValues": {":p": S(partition(day, shard))},
                    "ScanIndexForward": False, "ConsistentRead": True,
                    "Limit": min(budget, 500)}
                if start is not None:
                    kwargs["ExclusiveStartKey"] = start
                page = self._call("query", **kwargs)
                items = page.get("Items", [])
                budget -= max(1, len(items))
                for item in items:
                    if (as_str(item, "sk") or "").endswith(suffix):
                        return item
                start = page.get("LastEvaluatedKey")
                if not start:
                    break
            if budget <= 0:
                return None
        return None

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
        keys: list[Item] = []
        for day in range(newest, day_of(horizon) - 1, -1):
            for shard in range(DECISION_SHARDS):
                keys += [key_of(i) for i in self._query(
                    TableName=self.ledger_table, KeyConditionExpression="#p = :p AND #s < :c",
                    ProjectionExpression="#p, #s",
                    ExpressionAttributeNames={"#p": "pk", "#s": "sk"},
                    ExpressionAttributeValues={":p": S(partition(day, shard)),
                                               ":c": S(ts_key(before))})]
        self._delete_keys(self.ledger_table, keys)
        return len(keys)


def _page(found: list[tuple[str, Item]]) -> list[dict[str, Any]]:
    return [body_of(item) for _, item in found]

"""The ``LedgerStore`` half of ``DynamoDBStore``: decisions, spend, stats and purge.

A decision is one ``TransactWriteItems``: the decision item (conditional on
its request id being new) and one ``ADD`` per stats group in its hour, so a
decision and its stats land together or not at all. Stats items are split
over ``STATS_SHARDS`` per group and hour (picked by request id) so that
concurrent transactions rarely touch the same item; ``stats`` sums them.
Listing walks the day partitions of one GSI newest first (see
``dynamodb_schema``); nothing here ever scans.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from humpyard.errors import ConflictError
from humpyard.store import aggregates as agg
from humpyard.store import decisions as dec
from humpyard.store.dynamodb_base import (
    CLOCK_SKEW_SECS,
    Cancelled,
    DynamoDBBase,
    Item,
    N,
    S,
    as_float,
    as_int,
    as_str,
    day_label,
    day_of,
    int_key,
    key_of,
    ts_key,
)
from humpyard.store.dynamodb_schema import DECISION_INDEXES, SORT_ATTRIBUTE, TTL_ATTRIBUTE
from humpyard.store.rows import check_usd

STATS_SHARDS = 4
MAX_TRANSACTION = 100
SPEND_TTL_SECS = 400 * 86_400
MAX_HOUR = 10**12 - 1
_FILTER_ORDER = ("key_id", "route", "rule", "outcome")  # likeliest to be selective first
_COUNTERS = ("requests", "failures", "cost_usd", "input_tokens", "output_tokens")


def decision_key(request_id: str) -> Item:
    return {"pk": S(f"decision#{request_id}"), "sk": S("decision")}


def stats_pk(dim: str) -> dict[str, str]:
    return S(f"stats#{dim}")


def spend_key(key_id: str, period: str) -> Item:
    return {"pk": S(f"spend#{key_id}"), "sk": S(period)}


def _index_value(value: str | None, day: int) -> str:
    return f"decisions#{day_label(day)}" if value is None else f"{value}#{day_label(day)}"


@dataclass(frozen=True, slots=True)
class _Listed:
    ts: float
    request_id: str


class DynamoDBLedger(DynamoDBBase):
    """Decisions with their stats, spend per key and period, retention."""

    # -- decisions ----------------------------------------------------------------

    def append_decision(self, decision: dict[str, Any]) -> None:
        row = dec.decision_row(decision)
        put = {"Put": {"TableName": self.ledger_table, "Item": self._decision_item(row),
                       "ConditionExpression": "attribute_not_exists(pk)"}}
        updates = self._stats_updates(row)
        first = [put, *updates[:MAX_TRANSACTION - 1]]
        try:
            self._call("transact_write_items", TransactItems=first,
                       ClientRequestToken=uuid4().hex)
        except Cancelled as exc:
            raise ConflictError(f"decision {row.request_id} is already recorded") from exc
        for extra in updates[MAX_TRANSACTION - 1:]:  # a failover over ~50 targets
            self._call("update_item", **extra["Update"])

    def _decision_item(self, row: dec.DecisionRow) -> Item:
        day = day_of(row.ts)
        item: Item = {
            **decision_key(row.request_id), "ts": N(row.ts), "body": S(row.body),
            TTL_ATTRIBUTE: self._expiry(row.ts),
            SORT_ATTRIBUTE: S(f"{ts_key(row.ts)}#{row.request_id}"),
            DECISION_INDEXES[None][1]: S(_index_value(None, day)),
        }
        for field in _FILTER_ORDER:
            value = getattr(row, field)
            if value is not None:
                item[field] = S(value)
                item[DECISION_INDEXES[field][1]] = S(_index_value(value, day))
        for field in ("input_tokens", "output_tokens", "prompt_tokens"):
            if getattr(row, field) is not None:
                item[field] = N(getattr(row, field))
        return item

    def _stats_updates(self, row: dec.DecisionRow) -> list[dict[str, Any]]:
        hour = agg.hour_of(row.ts)
        shard = zlib.crc32(row.request_id.encode()) % STATS_SHARDS
        expires = self._expiry(hour + agg.HOUR)
        out = []
        for (dim, gkey), share in sorted(agg.contributions(row).items()):
            names = {"#ttl": TTL_ATTRIBUTE, "#hour": "hour"}
            values: dict[str, Any] = {":ttl": expires, ":hour": N(hour)}
            adds = []
            for i, counter in enumerate(_COUNTERS):
                names[f"#c{i}"] = counter
                values[f":c{i}"] = N(getattr(share, counter))
                adds.append(f"#c{i} :c{i}")
            for b, n in sorted(share.hist.items()):
                names[f"#h{b}"] = f"h{b}"
                values[f":h{b}"] = N(n)
                adds.append(f"#h{b} :h{b}")
            sets = "#ttl = :ttl, #hour = :hour"
            if gkey:
                names["#g"] = "gkey"
                values[":g"] = S(gkey)
                sets += ", #g = :g"
            out.append({"Update": {
                "TableName": self.state_table,
                "Key": {"pk": stats_pk(dim), "sk": S(f"{int_key(hour)}#{shard}#{gkey}")},
                "UpdateExpression": f"ADD {', '.join(adds)} SET {sets}",
                "ExpressionAttributeNames": names, "ExpressionAttributeValues": values}})
        return out

    def list_decisions(
        self, *, route: str | None = None, rule: str | None = None,
        outcome: str | None = None, key_id: str | None = None,
        since: float | None = None, limit: int = 50, cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        limit = dec.page_limit(limit)
        after = dec.decode_cursor(cursor) if cursor else None
        wanted = {"key_id": key_id, "route": route, "rule": rule, "outcome": outcome}
        lead = next((f for f in _FILTER_ORDER if wanted[f] is not None), None)
        others = {f: v for f, v in wanted.items() if v is not None and f != lead}
        now = self._clock.now()
        newest = day_of(after[0]) if after else day_of(now + CLOCK_SKEW_SECS)
        oldest = day_of(since) if since is not None else day_of(now - self.retention_secs) - 1
        upper = f"{ts_key(after[0])}#{after[1]}" if after else None
        lower = ts_key(since) if since is not None else None
        found: list[_Listed] = []
        if upper is not None and lower is not None and lower > upper:
            oldest = newest + 1  # the cursor is older than ``since``: nothing left
        for day in range(newest, oldest - 1, -1):
            pk = _index_value(None if lead is None else wanted[lead], day)
            found += self._index_page(lead, pk, upper, lower, others, limit + 1 - len(found))
            if len(found) > limit:
                break
        page = found[:limit]
        bodies = self._bodies([f.request_id for f in page])
        decisions = [bodies[f.request_id] for f in page if f.request_id in bodies]
        more = len(found) > limit
        return decisions, dec.encode_cursor(page[-1].ts, page[-1].request_id) if more else None

    def _index_page(self, lead: str | None, pk: str, upper: str | None, lower: str | None,
                    others: dict[str, str], want: int) -> list[_Listed]:
        """Up to ``want`` entries of one day partition, newest first, ``lower <= g_sk < upper``."""
        index, attr = DECISION_INDEXES[lead]
        names = {"#p": attr}
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
        kwargs: dict[str, Any] = {"TableName": self.ledger_table, "IndexName": index,
                                  "KeyConditionExpression": cond, "ScanIndexForward": False,
                                  "Limit": want}
        if others:
            clauses = []
            for i, (field, value) in enumerate(sorted(others.items())):
                names[f"#f{i}"] = field
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
            out.append(_Listed(as_float(item, "ts"), sort.split("#", 1)[1]))
            if len(out) >= want:
                break
        return out

    def _bodies(self, request_ids: list[str]) -> dict[str, dict[str, Any]]:
        items = self._batch_get(self.ledger_table, [decision_key(r) for r in request_ids])
        return {(as_str(i, "pk") or "").split("#", 1)[1]: json.loads(as_str(i, "body") or "{}")
                for i in items}

    def get_decision(self, request_id: str) -> dict[str, Any] | None:
        found = self._call("get_item", TableName=self.ledger_table,
                           Key=decision_key(request_id), ConsistentRead=True).get("Item")
        return None if found is None else json.loads(as_str(found, "body") or "{}")

    # -- spend ----------------------------------------------------------------------

    def add_spend(self, key_id: str, period: str, usd: float) -> float:
        usd = check_usd(usd)
        answer = self._call(
            "update_item", TableName=self.state_table, Key=spend_key(key_id, period),
            UpdateExpression="ADD #u :u SET #ttl = :ttl",
            ExpressionAttributeNames={"#u": "usd", "#ttl": TTL_ATTRIBUTE},
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

    # -- stats ------------------------------------------------------------------------

    def stats(self, group_by: str, since: float, until: float) -> list[dict[str, Any]]:
        dim = agg.check_group_by(group_by)
        low = max(0, agg.hour_of(since))
        high = min(math.ceil(until), MAX_HOUR)  # hours h < until, as whole seconds
        groups: dict[str, agg.Aggregate] = {}
        if high <= low:
            return []
        for item in self._query(
                TableName=self.state_table, ConsistentRead=True,
                KeyConditionExpression="pk = :p AND sk BETWEEN :lo AND :hi",
                ExpressionAttributeValues={":p": stats_pk(dim), ":lo": S(int_key(low)),
                                           ":hi": S(int_key(high))}):
            group = groups.setdefault(as_str(item, "gkey") or "", agg.Aggregate())
            group.merge(_aggregate(item))
        return agg.stats_rows(groups)

    # -- retention --------------------------------------------------------------------

    def _purge_ledger(self, before: float) -> int:
        """Decisions and stats buckets older than ``before``; the number of decisions."""
        decisions = self._purge_decisions(before)
        cut = int_key(max(0, math.floor(before - agg.HOUR) + 1))  # hour + HOUR <= before
        for dim in agg.STATS_GROUPS:
            self._delete_keys(self.state_table, [key_of(i) for i in self._query(
                TableName=self.state_table, ProjectionExpression="pk, sk",
                KeyConditionExpression="pk = :p AND sk < :c",
                ExpressionAttributeValues={":p": stats_pk(dim), ":c": S(cut)})])
        return decisions

    def _purge_decisions(self, before: float) -> int:
        # From the newest day a decision can be on, back past the TTL horizon (TTL
        # deletes within about two days of expiry).
        now = self._clock.now()
        newest = day_of(min(before, now + CLOCK_SKEW_SECS))
        horizon = min(before, now) - self.retention_secs - 3 * 86_400
        keys: list[Item] = []
        for day in range(newest, day_of(horizon) - 1, -1):
            index, attr = DECISION_INDEXES[None]
            keys += [key_of(i) for i in self._query(
                TableName=self.ledger_table, IndexName=index,
                KeyConditionExpression="#p = :p AND #s < :c",
                ExpressionAttributeNames={"#p": attr, "#s": SORT_ATTRIBUTE},
                ExpressionAttributeValues={":p": S(_index_value(None, day)),
                                           ":c": S(ts_key(before))})]
        self._delete_keys(self.ledger_table, keys)
        return len(keys)


def _aggregate(item: Item) -> agg.Aggregate:
    hist = {int(name[1:]): as_int(item, name) for name in item
            if name.startswith("h") and name[1:].isdigit()}
    return agg.Aggregate(requests=as_int(item, "requests"), failures=as_int(item, "failures"),
                         cost_usd=as_float(item, "cost_usd"),
                         input_tokens=as_int(item, "input_tokens"),
                         output_tokens=as_int(item, "output_tokens"), hist=hist)

"""Stats of ``DynamoDBStore``: summed in the instance, written as batched ``ADD``s.

A decision's stats (``aggregates.contributions``) are not written with it.
They are added to this store object's pending aggregates, one per
``(group_by, hour, group key)``, and written by ``flush_stats``: one
``UpdateItem`` with ``ADD`` per pending item, whatever the number of
decisions behind it. A flush happens when ``stats_flush_secs`` have passed
since the last one (checked after every decision write and, in a ``serve``
process, on a timer, so an idle process's sums reach the table too), on
``close`` and on ``purge``. So an instance serving one request a second writes about five
stats items a minute instead of four per request, and never in a
transaction.

``stats`` sums the stored items and this store's pending ones, so an
instance sees its own decisions at once; other instances see them after
its next flush. A flush that fails keeps what it could not write pending
for the next one; an instance that is reaped without ``close`` loses at
most ``stats_flush_secs`` of its own stats (never a decision).

Items live in the state table under ``stats#<dimension>#<shard>`` (the
``group_by`` values and the scoped ``key.route``, ``key.target``,
``key.provider`` of ``aggregates.SCOPED``) (shard
0..``STATS_SHARDS``-1, drawn per item and flush) with sort key
``<hour>#<group key>``, so a group's writes spread over the shards and a
read is one Query per shard.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

from humpyard.errors import StoreError
from humpyard.store import aggregates as agg
from humpyard.store import decisions as dec
from humpyard.store.dynamodb_base import (
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

logger = logging.getLogger("humpyard.store")

STATS_SHARDS = 4
MAX_HOUR = 10**12 - 1
_COUNTERS = ("requests", "failures", "cost_usd", "input_tokens", "output_tokens",
             "cache_read_tokens", "cache_write_tokens")

StatsKey = tuple[str, int, str]  # (group_by, hour, group key)


def stats_pk(dim: str, shard: int) -> dict[str, str]:
    return S(f"stats#{dim}#{shard}")


class DynamoDBStats(DynamoDBBase):
    """Pending stats of this instance, their flush, and the ``stats`` read."""

    _stats_lock: threading.Lock
    _pending_stats: dict[StatsKey, agg.Aggregate]
    _stats_flushed_at: float

    def _stats_state(self) -> None:
        """Set up the pending aggregates (called once from the constructor)."""
        self._stats_lock = threading.Lock()
        self._pending_stats = {}
        self._stats_flushed_at = self._clock.monotonic()

    def _count_stats(self, rows: list[dec.DecisionRow]) -> None:
        """Add the stats of ``rows`` (decisions just recorded) to the pending aggregates."""
        with self._stats_lock:
            agg.add_into(self._pending_stats, rows)

    @property
    def pending_stats(self) -> int:
        """Stats items waiting for the next flush."""
        with self._stats_lock:
            return len(self._pending_stats)

    def flush_stats(self, *, due_only: bool = False) -> int:
        """Write the pending stats (only when due, with ``due_only``); the items written.

        Raises ``StoreError`` after writing what it could; the rest stays
        pending for the next flush.
        """
        with self._stats_lock:
            if due_only and not (self._pending_stats and self._clock.monotonic()
                                 - self._stats_flushed_at >= self.stats_flush_secs):
                return 0
            pending, self._pending_stats = self._pending_stats, {}
            self._stats_flushed_at = self._clock.monotonic()
        written = 0
        failure: StoreError | None = None
        for key in sorted(pending):
            if failure is None:
                try:
                    self._call("update_item", **self._stats_update(key, pending[key]))
                    written += 1
                    continue
                except StoreError as exc:
                    failure = exc
            with self._stats_lock:  # kept for the next flush
                self._pending_stats.setdefault(key, agg.Aggregate()).merge(pending[key])
        if failure is not None:
            raise failure
        return written

    def flush_stats_when_due(self) -> None:
        """Flush if due (after a decision write, and on a long-lived process's timer,
        ``background.py``); a failure is logged in one line, the stats kept."""
        try:
            self.flush_stats(due_only=True)
        except StoreError as exc:
            logger.warning("stats flush failed; %d items kept for the next one: %s",
                           self.pending_stats, exc)

    def _stats_update(self, key: StatsKey, share: agg.Aggregate) -> dict[str, Any]:
        dim, hour, gkey = key
        names = {"#ttl": TTL_ATTRIBUTE, "#hour": "hour"}
        values: dict[str, Any] = {":ttl": self._expiry(hour + agg.HOUR), ":hour": N(hour)}
        adds = []
        for i, counter in enumerate(_COUNTERS):
            amount = getattr(share, counter)
            if amount or counter == "requests":
                names[f"#c{i}"] = counter
                values[f":c{i}"] = N(amount)
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
        return {"TableName": self.state_table,
                "Key": {"pk": stats_pk(dim, self._rng.randrange(STATS_SHARDS)),
                        "sk": S(f"{int_key(hour)}#{gkey}")},
                "UpdateExpression": f"ADD {', '.join(adds)} SET {sets}",
                "ExpressionAttributeNames": names, "ExpressionAttributeValues": values}

    def stats(self, group_by: str, since: float, until: float, *, key_id: str | None = None,
              series: str | None = None) -> list[dict[str, Any]]:
        query = agg.StatsQuery(group_by, key_id, series)
        dim = query.dim
        low = max(0, agg.hour_of(since))
        high = min(math.ceil(until), MAX_HOUR)  # hours h < until, as whole seconds
        if high <= low:
            return []
        for shard in range(STATS_SHARDS):
            for item in self._query(
                    TableName=self.state_table, ConsistentRead=True,
                    KeyConditionExpression="pk = :p AND sk BETWEEN :lo AND :hi",
                    ExpressionAttributeValues={":p": stats_pk(dim, shard),
                                               ":lo": S(int_key(low)),
                                               ":hi": S(int_key(high))}):
                query.add(as_str(item, "gkey") or "", as_int(item, "hour"), _aggregate(item))
        with self._stats_lock:
            for (d, hour, gkey), share in self._pending_stats.items():
                if d == dim and low <= hour < until:
                    query.add(gkey, hour, share)
        return query.rows()

    def _purge_stats(self, before: float) -> None:
        """Stats buckets whose hour ended by ``before`` (pending ones are flushed first)."""
        self.flush_stats()
        cut = int_key(max(0, math.floor(before - agg.HOUR) + 1))  # hour + HOUR <= before
        for dim in agg.STATS_DIMS:
            for shard in range(STATS_SHARDS):
                self._delete_keys(self.state_table, [key_of(i) for i in self._query(
                    TableName=self.state_table, ProjectionExpression="pk, sk",
                    KeyConditionExpression="pk = :p AND sk < :c",
                    ExpressionAttributeValues={":p": stats_pk(dim, shard), ":c": S(cut)})])


def _aggregate(item: Item) -> agg.Aggregate:
    hist = {int(name[1:]): as_int(item, name) for name in item
            if name.startswith("h") and name[1:].isdigit()}
    return agg.Aggregate(requests=as_int(item, "requests"), failures=as_int(item, "failures"),
                         cost_usd=as_float(item, "cost_usd"),
                         input_tokens=as_int(item, "input_tokens"),
                         output_tokens=as_int(item, "output_tokens"),
                         cache_read_tokens=as_int(item, "cache_read_tokens"),
                         cache_write_tokens=as_int(item, "cache_write_tokens"), hist=hist)

"""``DynamoDBStore``: the ``Store`` every Lambda instance shares, on two DynamoDB tables.

The layout (keys, TTL; no index) is in ``dynamodb_schema`` and
``docs/decisions/0002-dynamodb-layout.md`` (decisions: ADR 0019); ``create_tables`` builds it for
tests and local emulators, ``template.yaml`` for AWS. The parts:

- ``dynamodb_ledger``: decisions (one conditional put each, keyed by day
  and shard, no index entry), ``write_batch``, spend, listing over the day
  shards;
- ``dynamodb_stats``: stats summed in the instance and flushed as batched
  ``ADD``s;
- ``dynamodb_state``: overrides (atomic id counter, audited changes) and
  quota snapshots and history;
- ``dynamodb_leases`` and ``dynamodb_limits``: budget leases on the spend
  item, per-key limit blocks and in-flight slots on the key's limits item;
- ``dynamodb_live``: breakers (one item, compare-and-set per endpoint) and
  latency buckets (atomic ``ADD``, sharded);
- ``dynamodb_base``: the client, retries through the injected clock, typed
  values, sortable keys.

``read_shared`` is the instance's one read of the shared state (breakers,
the overrides' version, spend, latency) — see ``humpyard.shared_state``.

Every read that the contract says must see the last write is strongly
consistent, decision listing included (it queries the table itself).
Stats of this store's own decisions count at once; another instance's after its next stats flush.
"""

from __future__ import annotations

import logging
from typing import Any

from humpyard.errors import StoreError
from humpyard.store.dynamodb_base import S, as_float, as_int, as_str
from humpyard.store.dynamodb_keys import spend_key
from humpyard.store.dynamodb_leases import DynamoDBLeases
from humpyard.store.dynamodb_ledger import DynamoDBLedger, LedgerWriteError
from humpyard.store.dynamodb_limits import DynamoDBLimits
from humpyard.store.dynamodb_live import (
    LATENCY_SHARDS,
    LIVE_KEY,
    OVERRIDES_VERSION,
    DynamoDBLive,
    breakers_of,
    latency_key,
    latency_of,
)
from humpyard.store.dynamodb_schema import LEDGER_TABLE, STATE_TABLE, create_tables
from humpyard.store.dynamodb_state import DynamoDBOverrides, DynamoDBQuota, _override
from humpyard.store.sharing import SharedRead, SharedRequest

__all__ = ["LEDGER_TABLE", "STATE_TABLE", "DynamoDBStore", "LedgerWriteError", "create_tables"]

logger = logging.getLogger("humpyard.store")


class DynamoDBStore(DynamoDBLedger, DynamoDBOverrides, DynamoDBQuota, DynamoDBLive,
                    DynamoDBLeases, DynamoDBLimits):
    """A ``Store`` on the tables ``state_table`` and ``ledger_table``.

    ``DynamoDBStore(state_table, ledger_table, *, clock, client,
    retention_days=30)``: ``client`` is a boto3/botocore DynamoDB client,
    given by the caller (``aws.clients.dynamodb_client`` in Lambda: botocore's
    retries off, because the store retries itself); ``clock`` stamps TTLs and
    write-order tie-breakers and provides the backoff sleep; ``retention_days`` sets the TTL of
    decisions, stats, quota history and the audit (overrides live until
    ``expires_at`` plus the retention). Optional keywords: ``max_attempts``
    (4) per call on throttling or 5xx, ``sleep`` and ``rng`` for the backoff
    and the shards, ``stats_flush_secs`` (60; 0 writes stats with every
    decision), ``on_conflict`` (called per transaction conflict).

    Nothing is read or written at construction. Safe to share between
    threads (boto3 clients are). ``close`` writes the pending stats, then
    makes later calls raise ``StoreError``; the client itself is not closed.
    """

    kind = "dynamodb"
    has_ledger = True
    shares_live = True  # breakers and latency are shared (the gateway picks SharedHealth)

    def __init__(self, state_table: str, ledger_table: str, **kwargs: Any) -> None:
        super().__init__(state_table, ledger_table, **kwargs)
        self._stats_state()
        self._leases_state()
        self._limits_state()

    def read_shared(self, request: SharedRequest) -> SharedRead:
        """One strongly consistent ``BatchGetItem`` of the live item, the spend items and the
        latency buckets asked for; plus one Query of the overrides when their version moved."""
        keys = [LIVE_KEY, *(spend_key(k, p) for k, p in request.spend.items()),
                *(latency_key(shard, bucket) for bucket in request.latency_buckets
                  for shard in range(LATENCY_SHARDS))]
        live = None
        spend: dict[tuple[str, str], float] = {}
        latency = []
        for item in self._batch_get(self.state_table, keys):
            pk = as_str(item, "pk") or ""
            if pk == "live":
                live = item
            elif pk.startswith("spend#"):
                spend[(pk[len("spend#"):], as_str(item, "sk") or "")] = as_float(item, "usd")
            else:
                latency.append(item)
        version = as_int(live or {}, OVERRIDES_VERSION)
        overrides = None
        if request.overrides_version != version:
            overrides = [_override(i) for i in self._override_items()]
        return SharedRead(
            breakers=breakers_of(live),
            spend={k: spend.get((k, p), 0.0) for k, p in request.spend.items()},
            latency=latency_of(latency), overrides_version=version, overrides=overrides)

    def ping(self) -> None:
        """One eventually consistent ``BatchGetItem`` of a key that is never written
        (``live``/``readyz``, in the partition every function may read): the state
        table answers, or ``StoreError``. Half a read unit."""
        self._batch_get(self.state_table, [{"pk": S("live"), "sk": S("readyz")}],
                        consistent=False)

    def ping_ledger(self) -> None:
        """``ping`` of the ledger table: one eventually consistent ``BatchGetItem`` of a
        key that is never written there (in the ``live`` partition, as ``ping``'s), or
        ``StoreError``. Half a read unit; ``serve`` asks it once, at start."""
        self._batch_get(self.ledger_table, [{"pk": S("live"), "sk": S("readyz")}],
                        consistent=False)

    def purge(self, before: float) -> int:
        """Delete what is older than ``before`` (TTL does the same, late); return decisions.

        Walks the day partitions back past the TTL horizon, so a purge costs
        one Query per decision shard and day of retention even when there is
        nothing to delete.
        """
        decisions = self._purge_ledger(before)
        self._purge_overrides(before)
        self._purge_quota(before)
        return decisions

    def close(self) -> None:
        """Write the pending stats (a failure is logged), then refuse further calls."""
        if not self._closed and self.pending_stats:
            try:
                self.flush_stats()
            except StoreError as exc:
                logger.error("stats lost at close: %d items could not be written: %s",
                             self.pending_stats, exc)
        super().close()

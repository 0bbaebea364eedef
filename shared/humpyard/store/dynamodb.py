"""``DynamoDBStore``: the ``Store`` every Lambda instance shares, on two DynamoDB tables.

The layout (keys, GSIs, TTL) is in ``dynamodb_schema`` and
``docs/decisions/0002-dynamodb-layout.md``; ``create_tables`` builds it for
tests and local emulators, ``template.yaml`` for AWS. The parts:

- ``dynamodb_ledger``: decisions with their stats (one transaction), spend,
  stats from hourly counters, listing through the day-partitioned GSIs;
- ``dynamodb_state``: overrides (atomic id counter, audited changes) and
  quota snapshots and history;
- ``dynamodb_live``: breakers (compare-and-set on ``version``) and latency
  buckets (atomic ``ADD``);
- ``dynamodb_base``: the client, retries through the injected clock, typed
  values, sortable keys.

Every read that the contract says must see the last write is strongly
consistent, except decision listing: GSIs are eventually consistent, so a
decision may take a moment (typically well under a second) to be listed,
while ``get_decision`` sees it at once.
"""

from __future__ import annotations

from humpyard.store.dynamodb_ledger import DynamoDBLedger
from humpyard.store.dynamodb_live import DynamoDBLive
from humpyard.store.dynamodb_schema import LEDGER_TABLE, STATE_TABLE, create_tables
from humpyard.store.dynamodb_state import DynamoDBOverrides, DynamoDBQuota

__all__ = ["LEDGER_TABLE", "STATE_TABLE", "DynamoDBStore", "create_tables"]


class DynamoDBStore(DynamoDBLedger, DynamoDBOverrides, DynamoDBQuota, DynamoDBLive):
    """A ``Store`` on the tables ``state_table`` and ``ledger_table``.

    ``DynamoDBStore(state_table, ledger_table, *, clock, client,
    retention_days=30)``: ``client`` is a boto3/botocore DynamoDB client,
    given by the caller (``aws.clients.dynamodb_client`` in Lambda: botocore's
    retries off, because the store retries itself); ``clock`` stamps TTLs and
    write-order tie-breakers and provides the backoff sleep; ``retention_days`` sets the TTL of
    decisions, stats, quota history and the audit (overrides live until
    ``expires_at`` plus the retention). Optional keywords: ``max_attempts``
    (4) per call on throttling or 5xx, ``sleep`` and ``rng`` for the backoff.

    Nothing is read or written at construction. Safe to share between
    threads (boto3 clients are). ``close`` makes later calls raise
    ``StoreError``; the client itself is not closed.
    """

    kind = "dynamodb"
    has_ledger = True

    def purge(self, before: float) -> int:
        """Delete what is older than ``before`` (TTL does the same, late); return decisions.

        Walks the day partitions back past the TTL horizon, so a purge costs
        one Query per day of retention even when there is nothing to delete.
        """
        decisions = self._purge_ledger(before)
        self._purge_overrides(before)
        self._purge_quota(before)
        return decisions

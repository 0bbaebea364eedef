"""``BatchedDynamoDBStore``: the Lambda functions' ``DynamoDBStore``, for a long-lived process.

A Lambda instance writes each request's decision before its last byte (it may
be frozen afterwards), so its batches hold one decision and a conditional
``PutItem`` each is the natural write. ``humpyard serve`` on DynamoDB
(``[store] backend = "dynamodb"``, ``humpyard.fleet``) hands its decisions to
the ``BackgroundWriter``, which gathers them for ``[store] batch_ms``; this
store writes such a batch with ``BatchWriteItem``, 25 decisions a call, so at
a steady load a process makes fewer write calls than it serves requests.
Everything else (the item, its index keys, spend, stats, breakers, latency,
overrides) is ``DynamoDBStore``'s own code.

What changes with the batch: a ``BatchWriteItem`` put has no condition. The
store's contract (a request id already recorded is skipped, its first
decision kept) is kept by one strongly consistent ``BatchGetItem`` of the
batch's keys first (up to 100 a call, only the key projected; one read unit
per decision), and only the ids not found are put. Request ids are the
gateway's own (a per-process random prefix and a counter), so two processes
never write the same id and the read cannot race another writer; a call the
store retries after its first attempt landed puts the same item again, and
stats are counted once, after the write succeeds. Items DynamoDB leaves
unprocessed (throttling) are retried with the store's backoff, then
reported as unwritten (``LedgerWriteError``), so the writer logs them whole.
Write units are the same as one ``PutItem`` per decision (DynamoDB bills per
item); the batch saves round trips, threads and CPU, not units.

A long-lived process never waits for a read of the shared view
(``stale_reads_ok``, as the workers' SQLite file): its background refresh
re-reads it every half ``state_refresh_ms``, so while the tables answer the
view is as fresh as a Lambda instance's, and when they do not (a partition:
each read waits for the client's timeouts) requests are served on the last
view instead of the event loop waiting on the network. A Lambda instance,
which serves one request at a time and may have been frozen for minutes,
waits for a view older than ``state_refresh_ms`` (``shared_state.py``).

``before_close`` callables run first in ``close`` (the gateway closes the
store last, after its writer): the serve wiring flushes the pending latency
samples there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from humpyard.errors import StoreError, StoreUnavailable
from humpyard.records import request_time
from humpyard.store import decisions as dec
from humpyard.store.base import LedgerBatch
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_base import MAX_BATCH_WRITE
from humpyard.store.dynamodb_keys import decision_key
from humpyard.store.dynamodb_ledger import LedgerWriteError
from humpyard.store.rows import check_usd

logger = logging.getLogger("humpyard.store")


class BatchedDynamoDBStore(DynamoDBStore):
    """``DynamoDBStore`` whose ``write_batch`` puts decisions 25 to a ``BatchWriteItem``,
    and whose shared view is never waited for (``stale_reads_ok``)."""

    stale_reads_ok = True

    def __init__(self, state_table: str, ledger_table: str, **kwargs: Any) -> None:
        super().__init__(state_table, ledger_table, **kwargs)
        self.before_close: list[Callable[[], None]] = []

    def write_batch(self, batch: LedgerBatch) -> None:
        # Everything is checked before anything is written (ValueError names the item).
        rows = [dec.decision_row(d) for d in batch.decisions]
        spend = {key: check_usd(usd) for key, usd in batch.spend.items()}
        unwritten = LedgerBatch()
        failure: StoreError | None = None
        by_id: dict[str, tuple[dec.DecisionRow, dict[str, Any]]] = {}
        for row, decision in zip(rows, batch.decisions, strict=True):
            by_id.setdefault(row.request_id, (row, decision))  # a batch names an item once
        try:
            known = self._recorded([row for row, _ in by_id.values()])
        except StoreError as exc:
            raise LedgerWriteError.of(f"{len(batch)} ledger writes failed: {exc}",
                                      batch, exc) from exc
        pending = [v for k, v in by_id.items() if k not in known]
        recorded: list[dec.DecisionRow] = []
        for start in range(0, len(pending), MAX_BATCH_WRITE):
            chunk = pending[start:start + MAX_BATCH_WRITE]
            try:
                left = self._put_chunk([row for row, _ in chunk])
            except StoreError as exc:
                failure = failure or exc
                unwritten.decisions.extend(d for _, d in chunk)
                continue
            for row, decision in chunk:
                if row.request_id in left:
                    unwritten.decisions.append(decision)
                else:
                    recorded.append(row)
            if left and failure is None:  # throttled past the retries
                failure = StoreUnavailable(f"dynamodb batch_write_item left {len(left)} "
                                           "decisions unprocessed")
        self._finish_batch(batch, recorded, spend, unwritten, failure)

    def _recorded(self, rows: list[dec.DecisionRow]) -> set[str]:
        """The request ids among ``rows`` whose decision is stored (strongly
        consistent ``BatchGetItem``s of the keys alone, 100 a call)."""
        # An id without its time (not one the gateway issued): its key depends on ts,
        # so it is looked for among its shard's newest decisions (ADR 0019).
        found = {r.request_id for r in rows
                 if request_time(r.request_id) is None and self._find_foreign(r.request_id)}
        # A projection would not lower the read units (DynamoDB bills the whole item).
        keys = [decision_key(r.request_id, r.ts) for r in rows]
        for item in self._batch_get(self.ledger_table, keys, consistent=True):
            found.add(item["sk"]["S"].partition("#")[2])  # <time key>#<request id>
        return found

    def _put_chunk(self, rows: list[dec.DecisionRow]) -> set[str]:
        """Put up to 25 decisions in one ``BatchWriteItem``, retrying what DynamoDB leaves
        unprocessed; returns the request ids still unwritten after the retries."""
        table = self.ledger_table
        ids = {}
        requests = []
        for row in rows:
            item = self._decision_item(row)
            ids[item["pk"]["S"], item["sk"]["S"]] = row.request_id
            requests.append({"PutRequest": {"Item": item}})
        pending: dict[str, Any] = {table: requests}
        for attempt in range(1, self._max_attempts + 2):
            answer = self._call("batch_write_item", RequestItems=pending)
            pending = answer.get("UnprocessedItems") or {}
            if not pending.get(table):
                return set()
            if attempt <= self._max_attempts:
                self._sleep(self._backoff(attempt))
        return {ids[r["PutRequest"]["Item"]["pk"]["S"], r["PutRequest"]["Item"]["sk"]["S"]]
                for r in pending[table]}

    def close(self) -> None:
        """Run ``before_close`` (failures are logged), then ``DynamoDBStore.close``."""
        if not self._closed:
            for fn in self.before_close:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - closing must finish
                    logger.exception("store close: a pending write could not be made")
        super().close()

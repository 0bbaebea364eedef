"""``SQLiteStore``: the local ``Store``, one SQLite file in WAL mode.

The ledger (decisions, usage, spend, stats), overrides with their audit and
quota snapshots/history are in the file (see ``sqlite_schema`` for the
tables, migrated forward on open). Endpoint health and latency figures are
kept in process memory, as the design has it for a local gateway: a restart
starts every endpoint healthy.
"""

from __future__ import annotations

import logging
from typing import Any

from humpyard.clock import Clock
from humpyard.errors import StoreError
from humpyard.store.base import LedgerBatch
from humpyard.store.live import LiveState, LiveStateDelegate
from humpyard.store.memory import NO_LEDGER_MAX_DECISIONS
from humpyard.store.sqlite_base import BUSY_TIMEOUT_SECS
from humpyard.store.sqlite_leases import SQLiteLeases
from humpyard.store.sqlite_ledger import SQLiteLedger
from humpyard.store.sqlite_live import SQLiteLive
from humpyard.store.sqlite_schema import migrate
from humpyard.store.sqlite_state import SQLiteOverrides, SQLiteQuota

logger = logging.getLogger("humpyard.store")

TRIM_EVERY = 1_000
"""Decisions a process writes between two trims of a capped file."""
_TRIM_DECISIONS = """DELETE FROM decisions WHERE (ts, request_id) <= (
    SELECT ts, request_id FROM decisions ORDER BY ts DESC, request_id DESC LIMIT 1 OFFSET ?)"""
_TRIM_USAGE = "DELETE FROM usage WHERE request_id NOT IN (SELECT request_id FROM decisions)"


class SQLiteStore(SQLiteLedger, SQLiteOverrides, SQLiteQuota, SQLiteLeases,
                  LiveStateDelegate):
    """A ``Store`` on the SQLite file at ``path`` (``":memory:"`` for a private one).

    Opening creates the file if needed and applies pending migrations;
    failure raises ``humpyard.errors.StoreError`` naming the file. Safe to share between
    threads. ``clock`` stamps bookkeeping columns (migration and snapshot
    times) only; every recorded time comes from the caller.
    """

    kind = "sqlite"
    has_ledger = True

    def __init__(self, path: str, clock: Clock, *,
                 busy_timeout_secs: float = BUSY_TIMEOUT_SECS) -> None:
        super().__init__(path, clock, busy_timeout_secs=busy_timeout_secs)
        self._live = LiveState()
        try:
            with self._lock:
                self.schema_version = migrate(self._connection(), clock.now())
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the file and refuse further calls; idempotent."""
        super().close()
        self._live.close()


class SharedSQLiteStore(SQLiteLedger, SQLiteOverrides, SQLiteQuota, SQLiteLeases, SQLiteLive):
    """A ``SQLiteStore`` whose live state (breakers, latency) is in the file too, for
    several processes on one file (``humpyard serve --workers N``, ``sqlite_live``).

    It reads the shared state in one call (``read_shared``), so the gateway
    serves it through ``SharedState`` like the DynamoDB store, except that
    a view past its age is served while a thread re-reads it
    (``stale_reads_ok``): a read of a local file is never worth a request's wait.
    Budget leases and per-key limit counters are in the file as for ``SQLiteStore``
    (``sqlite_leases``), so the workers' limits and reservations are exact across them.

    ``ledger=False`` is the private file of workers whose configuration names no
    ledger (``workers.py``): as ``MemoryStore(ledger=False)`` for one process,
    ``has_ledger`` is False (overrides are refused) and only about the newest
    ``max_decisions`` decisions are kept (``NO_LEDGER_MAX_DECISIONS``; each
    process trims the file after every ``TRIM_EVERY`` decisions it writes, so it
    holds at most that many more per process in between). Trimming leaves the
    stats in place.
    """

    kind = "sqlite"
    shares_live = True
    stale_reads_ok = True

    def __init__(self, path: str, clock: Clock, *,
                 busy_timeout_secs: float = BUSY_TIMEOUT_SECS, ledger: bool = True,
                 max_decisions: int | None = None) -> None:
        super().__init__(path, clock, busy_timeout_secs=busy_timeout_secs)
        self.has_ledger = ledger
        self._max_decisions = max_decisions if max_decisions is not None else (
            None if ledger else NO_LEDGER_MAX_DECISIONS)
        self._untrimmed = 0  # decisions this process wrote since it last trimmed
        try:
            with self._lock:
                self.schema_version = migrate(self._connection(), clock.now())
            self._create_live()
        except BaseException:
            self.close()
            raise

    def write_batch(self, batch: LedgerBatch) -> None:
        super().write_batch(batch)
        self._wrote(len(batch.decisions))

    def append_decision(self, decision: dict[str, Any]) -> None:
        super().append_decision(decision)
        self._wrote(1)

    def _wrote(self, n: int) -> None:
        """Trim a capped file once this process has written ``TRIM_EVERY`` more."""
        cap = self._max_decisions
        if cap is None or n == 0:
            return
        self._untrimmed += n
        if self._untrimmed >= min(TRIM_EVERY, cap):
            try:  # the batch is committed: a failed trim must not fail it (it would be
                self.trim_decisions(cap)  # written again, its spend counted twice)
            except StoreError as exc:
                logger.warning("ledger %s: trimming to %d decisions failed (%s); tried "
                               "again after the next write", self.path, cap, exc)
                return
            self._untrimmed = 0

    def trim_decisions(self, keep: int) -> int:
        """Delete all but the newest ``keep`` decisions (and their usage rows); returns
        how many were deleted."""
        with self._tx() as conn:
            deleted = conn.execute(_TRIM_DECISIONS, (keep,)).rowcount
            if deleted:
                conn.execute(_TRIM_USAGE)
        return int(deleted)

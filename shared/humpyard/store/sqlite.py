"""``SQLiteStore``: the local ``Store``, one SQLite file in WAL mode.

The ledger (decisions, usage, spend, stats), overrides with their audit and
quota snapshots/history are in the file (see ``sqlite_schema`` for the
tables, migrated forward on open). Endpoint health and latency figures are
kept in process memory, as the design has it for a local gateway: a restart
starts every endpoint healthy.
"""

from __future__ import annotations

from humpyard.clock import Clock
from humpyard.store.live import LiveState, LiveStateDelegate
from humpyard.store.sqlite_base import BUSY_TIMEOUT_SECS
from humpyard.store.sqlite_leases import SQLiteLeases
from humpyard.store.sqlite_ledger import SQLiteLedger
from humpyard.store.sqlite_live import SQLiteLive
from humpyard.store.sqlite_schema import migrate
from humpyard.store.sqlite_state import SQLiteOverrides, SQLiteQuota


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


class SharedSQLiteStore(SQLiteLedger, SQLiteOverrides, SQLiteQuota, SQLiteLive):
    """A ``SQLiteStore`` whose live state (breakers, latency) is in the file too, for
    several processes on one file (``humpyard serve --workers N``, ``sqlite_live``).

    It reads the shared state in one call (``read_shared``), so the gateway
    serves it through ``SharedState`` like the DynamoDB store, except that
    a view past its age is served while a thread re-reads it
    (``stale_reads_ok``): a read of a local file is never worth a request's wait.
    """

    kind = "sqlite"
    has_ledger = True
    shares_live = True
    stale_reads_ok = True

    def __init__(self, path: str, clock: Clock, *,
                 busy_timeout_secs: float = BUSY_TIMEOUT_SECS) -> None:
        super().__init__(path, clock, busy_timeout_secs=busy_timeout_secs)
        try:
            with self._lock:
                self.schema_version = migrate(self._connection(), clock.now())
            self._create_live()
        except BaseException:
            self.close()
            raise

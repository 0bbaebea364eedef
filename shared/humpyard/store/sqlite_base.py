"""The SQLite connection every ``SQLiteStore`` part shares.

One connection (``check_same_thread=False``) guarded by one lock: SQLite
serialises writers anyway, and the gateway's writes come from one
background thread. Writes run in ``BEGIN IMMEDIATE`` transactions so that a
second process on the same file (``sqlite3 humpyard.db``, another gateway)
waits for the lock instead of failing half-way; WAL mode lets such readers
run while the gateway writes. ``sqlite3.Error`` never escapes: it becomes
``StoreError`` naming the file.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from humpyard.clock import Clock
from humpyard.errors import StoreError

logger = logging.getLogger("humpyard.store")

BUSY_TIMEOUT_SECS = 5.0


def _create_private(path: str) -> None:
    """Create a new ledger file readable by its owner only (SQLite gives its
    ``-wal`` and ``-shm`` files the same mode). An existing file keeps its mode;
    an error here is left for ``sqlite3.connect`` to report."""
    if path == ":memory:" or path.startswith("file:"):
        return
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    except OSError:
        pass


def _identity(path: str, *, strict: bool = False) -> tuple[int, int] | None:
    """(device, inode) of the ledger file; None for an in-memory or URI database
    (or, unless ``strict``, a file that cannot be looked at)."""
    if path == ":memory:" or path.startswith("file:"):
        return None
    try:
        st = os.stat(path)
    except OSError:
        if strict:
            raise
        return None
    return (st.st_dev, st.st_ino)


class SQLiteBase:
    """Owns the connection; subclasses run SQL only inside ``_tx`` or ``_read``."""

    def __init__(self, path: str, clock: Clock) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.RLock()
        _create_private(path)
        try:
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_SECS, isolation_level=None,
                check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open ledger {path}: {exc}") from exc
        try:
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self._conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            self.close()
            raise StoreError(f"cannot open ledger {path}: {exc}") from exc
        if mode != "wal" and path != ":memory:":
            logger.warning("ledger %s runs in journal mode %s, not WAL", path, mode)
        self._identity = _identity(path)

    def ping(self) -> None:
        """``StoreError`` unless the connection answers and the file at ``path`` is still
        the one it opened: a ledger whose file (or directory) was removed or replaced
        keeps accepting writes into a file nobody will ever read again."""
        with self._read() as conn:
            conn.execute("SELECT 1").fetchone()
        if self._identity is None:
            return
        try:
            now = _identity(self.path, strict=True)
        except OSError as exc:
            raise StoreError(f"ledger {self.path} is gone: {exc.strerror}") from exc
        if now != self._identity:
            raise StoreError(f"ledger {self.path} was replaced by another file")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"ledger {self.path} is closed")
        return self._conn

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute(begin)
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"ledger {self.path}: {exc}") from exc
                raise

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction: committed when the block ends, rolled back if it raises."""
        return self._transaction("BEGIN IMMEDIATE")

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        """A read transaction: every statement in the block sees one snapshot."""
        return self._transaction("BEGIN")

    def close(self) -> None:
        """Close the connection; idempotent. Later calls raise ``StoreError``."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

"""The SQLite connections every ``SQLiteStore`` part shares.

Writes use one connection (``check_same_thread=False``) guarded by one
lock: SQLite serialises writers anyway, and the gateway's writes come from
one background thread. Writes run in ``BEGIN IMMEDIATE`` transactions so
that a second process on the same file (``sqlite3 humpyard.db``, another
gateway) waits for the lock instead of failing half-way.

Reads use connections of their own (``query_only``), taken from a small
pool, never the write lock: in WAL mode a reader sees the last committed
state and neither waits for a writer nor holds one up, so a read is never
stuck behind a batch the writer is waiting to commit (another process
holding the file's write lock), and a long read (a filtered page of
``/v1/decisions`` on a big ledger) never holds up the writer. A private
``":memory:"`` database has one connection only, so there reads share the
write connection and its lock. ``sqlite3.Error`` never escapes: it becomes
``StoreError`` naming the file, ``StoreUnavailable`` when the disk failed or is
full (the same call may succeed later: the ledger writer keeps the batch and
tries again) and ``StoreBusy`` when the write lock was held past the busy wait.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from humpyard.clock import Clock
from humpyard.errors import StoreBusy, StoreError, StoreUnavailable

logger = logging.getLogger("humpyard.store")

BUSY_TIMEOUT_SECS = 5.0
_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
_UNAVAILABLE_CODES = frozenset({10, 13})  # SQLITE_IOERR, SQLITE_FULL
"""Primary result codes of a file system that failed a read or a write (a full disk, a
file size limit, an I/O error): nothing is wrong with what was asked, and SQLite has
rolled the transaction back, so the same call may succeed once the disk has room."""
IDLE_READERS = 4
"""Read connections kept open between reads; more are opened when more threads read
at once (the gateway reads on a bounded pool of threads: ``store.reads``)."""


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

    def __init__(self, path: str, clock: Clock, *,
                 busy_timeout_secs: float = BUSY_TIMEOUT_SECS) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.RLock()
        self._readers: list[sqlite3.Connection] = []  # idle read connections
        self._readers_lock = threading.Lock()
        self._shared_reads = path == ":memory:" or "mode=memory" in path
        _create_private(path)
        try:
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                path, timeout=busy_timeout_secs, isolation_level=None,
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
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:  # SQLite rolled it back itself (an I/O error)
                        pass
                if isinstance(exc, sqlite3.Error):
                    raise self._failure(exc) from exc
                raise

    def _failure(self, exc: sqlite3.Error) -> StoreError:
        """The ``StoreError`` for ``exc``, by its result code: ``StoreBusy`` for a lock
        held past the busy wait, ``StoreUnavailable`` for a disk that failed or is full,
        a plain ``StoreError`` for the rest (a refused statement, a corrupt file)."""
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        name = getattr(exc, "sqlite_errorname", None)
        what = f"ledger {self.path}: {exc}" + (f" ({name})" if name else "")
        if primary in _BUSY_CODES:
            return StoreBusy(what)
        if primary in _UNAVAILABLE_CODES:
            return StoreUnavailable(what)
        return StoreError(what)

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction: committed when the block ends, rolled back if it raises."""
        return self._transaction("BEGIN IMMEDIATE")

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        """A read transaction: every statement in the block sees one snapshot.

        On a read connection of its own (see the module docstring), so it
        sees every write committed before it began and never takes the write
        lock."""
        if self._shared_reads:
            return self._transaction("BEGIN")
        return self._reading()

    def _reader(self) -> sqlite3.Connection:
        with self._readers_lock:
            self._connection()  # refuses once closed
            if self._readers:
                return self._readers.pop()
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECS, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA query_only=1")
            conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            raise StoreError(f"ledger {self.path}: cannot open a reader: {exc}") from exc
        return conn

    def _put_back(self, conn: sqlite3.Connection) -> None:
        with self._readers_lock:
            if self._conn is not None and len(self._readers) < IDLE_READERS:
                self._readers.append(conn)
                return
        conn.close()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        conn = self._reader()
        try:
            conn.execute("BEGIN")
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                conn.close()
                raise StoreError(f"ledger {self.path}: {exc}") from exc
            if isinstance(exc, sqlite3.Error):
                conn.close()
                raise self._failure(exc) from exc
            self._put_back(conn)
            raise
        self._put_back(conn)

    def close(self) -> None:
        """Close the connections; idempotent. Later calls raise ``StoreError``."""
        with self._lock:
            with self._readers_lock:
                readers, self._readers = self._readers, []
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            for conn in readers:
                conn.close()

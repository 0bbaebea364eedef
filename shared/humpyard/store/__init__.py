"""Where the gateway keeps state: the ``Store`` contract and its backends.

``open_store`` picks the backend from ``[ledger] path``: none gives an
in-memory store without a ledger, a path (or ``":memory:"``) the SQLite
store. The DynamoDB backend is built by the Lambda entry points. Writes go
through ``BackgroundWriter`` and reads through ``run`` so the event loop
never waits on a disk.

``SQLiteStore`` (and ``sqlite3``) is imported on first use: the Lambda
functions never open a SQLite file, so their cold start does not pay for it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from humpyard.clock import Clock
from humpyard.store.base import (
    LedgerBatch,
    LedgerStore,
    LiveStateStore,
    OverrideStore,
    QuotaStore,
    Store,
)
from humpyard.store.memory import MemoryStore
from humpyard.store.writer import BackgroundWriter, run

if TYPE_CHECKING:
    from humpyard.store.sqlite import SQLiteStore

__all__ = [
    "BackgroundWriter", "LedgerBatch", "LedgerStore", "LiveStateStore", "MemoryStore",
    "OverrideStore", "QuotaStore", "SQLiteStore", "Store", "file_on_disk", "open_store", "run",
]


def file_on_disk(config_ledger_path: str | None) -> bool:
    """Whether ``[ledger] path`` names a SQLite file other processes can open too (not
    ``":memory:"`` or a ``file:`` URI): what ``serve --workers`` and a console share."""
    return (config_ledger_path is not None and config_ledger_path != ":memory:"
            and not config_ledger_path.startswith("file:"))


def open_store(config_ledger_path: str | None, clock: Clock, *, shared: bool = False) -> Store:
    """The store for ``[ledger] path``: None → ``MemoryStore(ledger=False)``, else SQLite.

    ``shared`` (``serve --workers N``): the SQLite store keeps breakers and latency in
    the file as well (``SharedSQLiteStore``), so every process on it shares them.

    ``~`` is expanded; the file is created (not its directory) and migrated.
    Raises ``humpyard.errors.StoreError`` when the file cannot be opened.
    """
    if config_ledger_path is None:
        return MemoryStore(ledger=False)
    path = config_ledger_path if config_ledger_path == ":memory:" else os.path.expanduser(
        config_ledger_path)
    from humpyard.store.sqlite import SharedSQLiteStore, SQLiteStore
    if shared:
        return SharedSQLiteStore(path, clock)
    return SQLiteStore(path, clock)


def __getattr__(name: str) -> Any:
    if name == "SQLiteStore":
        from humpyard.store.sqlite import SQLiteStore
        return SQLiteStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The store backends the contract suite runs against.

Every test in this folder that takes the ``store`` fixture runs once per
entry of ``STORE_FACTORIES``. A factory is a context manager that yields an
empty store and cleans up after it; adding a backend (DynamoDB against a
local emulator) is one more entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from humpyard.clock import FakeClock
from humpyard.store import MemoryStore, SQLiteStore, Store
from tests.unit.aws.moto_support import batched_dynamodb_store, dynamodb_store


@contextmanager
def memory_store(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    store = MemoryStore()
    try:
        yield store
    finally:
        store.close()


@contextmanager
def sqlite_store(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    store = SQLiteStore(str(tmp_path / "humpyard.db"), clock)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def shared_sqlite_store(tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    from humpyard.store.sqlite import SharedSQLiteStore
    store = SharedSQLiteStore(str(tmp_path / "humpyard.db"), clock)
    try:
        yield store
    finally:
        store.close()


StoreFactory = Callable[[Path, FakeClock], AbstractContextManager[Store]]

STORE_FACTORIES: dict[str, StoreFactory] = {
    "memory": memory_store,
    "sqlite": sqlite_store,
    "sqlite-shared": shared_sqlite_store,  # serve --workers N: live state in the file
    "dynamodb": dynamodb_store,  # moto in-process
    "dynamodb_batched": batched_dynamodb_store,  # humpyard serve's: decisions batched
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=list(STORE_FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    with STORE_FACTORIES[request.param](tmp_path, clock) as made:
        yield made

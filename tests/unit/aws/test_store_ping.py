"""``Store.ping`` on every backend: what ``GET /readyz`` asks (http/probes.py).

The memory and SQLite stores are real; DynamoDB is moto's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.errors import StoreError
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter
from humpyard.store.memory import MemoryStore
from humpyard.store.sqlite import SQLiteStore
from humpyard.store.writer import BackgroundWriter, InlineWriter
from tests.unit.aws.moto_support import LEDGER, STATE


def test_memory_store_answers_until_closed():
    store = MemoryStore()
    store.ping()
    store.close()
    with pytest.raises(StoreError):
        store.ping()


def test_sqlite_store_answers_until_closed(tmp_path: Path):
    store = SQLiteStore(str(tmp_path / "l.db"), FakeClock())
    store.ping()
    store.close()
    with pytest.raises(StoreError):
        store.ping()


def test_sqlite_store_notices_its_file_removed(tmp_path: Path):
    store = SQLiteStore(str(tmp_path / "l.db"), FakeClock())
    try:
        (tmp_path / "l.db").unlink()
        with pytest.raises(StoreError):
            store.ping()
    finally:
        store.close()


def test_an_in_memory_sqlite_ledger_answers():
    store = SQLiteStore(":memory:", FakeClock())
    store.ping()
    store.close()


def test_dynamodb_store_reads_one_missing_item_of_the_state_table(counted: CallCounter,
                                                                  clock: FakeClock):
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=counted)
    counted.delta()
    store.ping()
    assert counted.delta() == {"BatchGetItem": 1}
    store.close()
    with pytest.raises(StoreError):
        store.ping()


def test_dynamodb_store_without_its_table_is_unreachable(client: Any, clock: FakeClock):
    store = DynamoDBStore("no-such-table", LEDGER, clock=clock, client=client, max_attempts=1)
    with pytest.raises(StoreError):
        store.ping()


def test_writers_say_whether_they_run(tmp_path: Path):
    assert InlineWriter(MemoryStore()).running
    store = SQLiteStore(str(tmp_path / "l.db"), FakeClock())
    writer = BackgroundWriter(store)
    assert writer.running
    writer.close(5)
    assert not writer.running
    store.close()

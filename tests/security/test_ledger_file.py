"""The SQLite ledger is private to the user running the gateway.

It holds no key and no prompt, but it does hold key ids, models, session ids
and upstream error messages, so a new ledger (and its ``-wal``/``-shm``
files) is created ``0600`` whatever the umask; an existing file keeps the
mode its owner gave it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from humpyard.clock import SystemClock
from humpyard.store import SQLiteStore


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture
def open_umask():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_a_new_ledger_and_its_wal_are_owner_only(tmp_path: Path, open_umask) -> None:
    db = tmp_path / "ledger.db"
    store = SQLiteStore(str(db), SystemClock())
    try:
        store.append_decision({"request_id": "req_1", "ts": 1.0, "body": "x", "status": 200})
        files = sorted(tmp_path.glob("ledger.db*"))
        assert {f.name for f in files} >= {"ledger.db", "ledger.db-wal", "ledger.db-shm"}
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    finally:
        store.close()


def test_an_existing_ledger_keeps_its_mode(tmp_path: Path, open_umask) -> None:
    db = tmp_path / "ledger.db"
    db.touch(mode=0o640)
    os.chmod(db, 0o640)
    SQLiteStore(str(db), SystemClock()).close()
    assert mode(db) == 0o640

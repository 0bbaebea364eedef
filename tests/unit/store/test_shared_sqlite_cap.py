"""The private state file of ``serve --workers N`` without a ledger
(``SharedSQLiteStore(ledger=False)``): as ``MemoryStore(ledger=False)`` for one process,
it refuses overrides (``has_ledger`` False) and keeps only about the newest
``max_decisions`` decisions, however many processes write to it, while the stats keep
counting every decision."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from humpyard.clock import FakeClock
from humpyard.store.base import LedgerBatch
from humpyard.store.sqlite import SharedSQLiteStore

T0 = 1_800_000_000.0


def decision(rid: str, ts: float) -> dict[str, Any]:
    return {"request_id": rid, "ts": ts, "route": "auto", "rule": "default", "outcome": "ok",
            "key_id": None, "status": 200, "target": "t", "provider": "p",
            "latency_ms": 10.0, "cost_usd": 0.0, "usage": {"input_tokens": 3,
                                                          "output_tokens": 4}}


def rows(path: Path, table: str) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_a_private_file_keeps_the_newest_decisions_and_every_stat(tmp_path: Path):
    path = tmp_path / "state.db"
    clock = FakeClock(T0)
    a = SharedSQLiteStore(str(path), clock, ledger=False, max_decisions=5)
    b = SharedSQLiteStore(str(path), clock, ledger=False, max_decisions=5)  # another worker
    try:
        assert not a.has_ledger
        for i in range(10):  # two processes, five decisions each
            (a if i % 2 else b).write_batch(LedgerBatch(
                decisions=[decision(f"r{i:02d}", T0 + i)]))
        a.append_decision(decision("r10", T0 + 10))
        before = rows(path, "decisions")
        assert 5 <= before <= 5 + 2 * 5  # at most a trim's worth more per process
        assert a.trim_decisions(5) == before - 5
        kept, _ = a.list_decisions(limit=100)
        assert [d["request_id"] for d in kept] == ["r10", "r09", "r08", "r07", "r06"]
        assert rows(path, "usage") == 5  # the usage of the trimmed ones went with them
        groups = b.stats("route", T0 - 3600, T0 + 3600)
        assert [g["requests"] for g in groups] == [11]
    finally:
        a.close()
        b.close()


def test_each_process_trims_after_its_own_writes(tmp_path: Path):
    path = tmp_path / "state.db"
    store = SharedSQLiteStore(str(path), FakeClock(T0), ledger=False, max_decisions=3)
    try:
        store.write_batch(LedgerBatch(decisions=[decision(f"r{i}", T0 + i) for i in range(7)]))
        assert rows(path, "decisions") == 3  # seven written in one batch, trimmed to three
    finally:
        store.close()


def test_a_file_with_a_ledger_keeps_everything(tmp_path: Path):
    path = tmp_path / "ledger.db"
    store = SharedSQLiteStore(str(path), FakeClock(T0))
    try:
        assert store.has_ledger
        store.write_batch(LedgerBatch(decisions=[decision(f"r{i}", T0 + i)
                                                 for i in range(2_500)]))
        assert rows(path, "decisions") == 2_500
    finally:
        store.close()


def test_a_trim_that_fails_does_not_fail_the_batch_it_follows(tmp_path: Path, caplog):
    """The batch is committed before the trim: were the trim's failure the batch's, the
    ledger writer would write the batch again and add its spend twice. The trim is
    refused here by a trigger put in the file from outside; it is tried again after the
    next write."""
    path = tmp_path / "state.db"
    store = SharedSQLiteStore(str(path), FakeClock(T0), ledger=False, max_decisions=3)
    period = "day:2027-01-15"
    try:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TRIGGER refuse_trim BEFORE DELETE ON decisions "
                       "BEGIN SELECT RAISE(ABORT, 'no trim now'); END")
        store.write_batch(LedgerBatch(decisions=[decision(f"r{i}", T0 + i) for i in range(7)],
                                      spend={("k", period): 1.5}))
        assert rows(path, "decisions") == 7  # written, not trimmed
        assert store.get_spend("k", period) == 1.5
        assert "trimming to 3 decisions failed" in caplog.text
        with sqlite3.connect(path) as db:
            db.execute("DROP TRIGGER refuse_trim")
        store.write_batch(LedgerBatch(decisions=[decision("r7", T0 + 7)],
                                      spend={("k", period): 1.5}))
        assert rows(path, "decisions") == 3  # the next write trims
        assert store.get_spend("k", period) == 3.0
    finally:
        store.close()

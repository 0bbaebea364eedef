"""``BackgroundWriter`` over a real SQLite store: drains in order, logs what it cannot write."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.store import BackgroundWriter, SQLiteStore, run

from .test_store_contract import T0, decision


@pytest.fixture
def db(tmp_path: Path, clock: FakeClock) -> Iterator[SQLiteStore]:
    store = SQLiteStore(str(tmp_path / "humpyard.db"), clock)
    yield store
    store.close()


@pytest.fixture
def writer(db: SQLiteStore) -> Iterator[BackgroundWriter]:
    w = BackgroundWriter(db)
    yield w
    w.close(timeout=5)


def test_the_writer_drains_every_submitted_call_in_order(
        db: SQLiteStore, writer: BackgroundWriter) -> None:
    for i in range(200):
        assert writer.submit("append_decision", decision(f"r{i:03d}", T0 + i))
        writer.submit("add_spend", "ci", "day:2027-01-15", 0.5)
    assert writer.flush(timeout=10)
    assert writer.pending == 0
    page, _ = db.list_decisions(limit=1000)
    assert [d["request_id"] for d in page] == [f"r{i:03d}" for i in reversed(range(200))]
    assert db.get_spend("ci", "day:2027-01-15") == 100.0


def test_a_failed_write_is_logged_with_its_decision_and_never_raises(
        db: SQLiteStore, writer: BackgroundWriter, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="humpyard.store")
    d = decision("dup", T0, note="keep me")
    writer.submit("append_decision", d)
    writer.submit("append_decision", d)  # ConflictError inside the writer thread
    writer.submit("append_decision", {"ts": T0})  # ValueError: no request_id
    writer.submit("no_such_method", 1)
    writer.submit("append_decision", decision("after", T0 + 1))
    assert writer.flush(timeout=10)
    errors = [r for r in caplog.records
              if r.name == "humpyard.store" and r.levelno == logging.ERROR]
    assert len(errors) == 3
    dup = errors[0].getMessage()
    assert "append_decision" in dup and "request_id=dup" in dup and "ConflictError" in dup
    assert json.loads(dup.split("unsaved: ", 1)[1]) == d
    assert "no_such_method" in errors[2].getMessage()
    assert db.get_decision("after") is not None


def test_a_full_queue_logs_instead_of_blocking(caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()

    class Slow:
        def wait(self) -> None:
            gate.wait(10)

        def append_decision(self, d: dict[str, Any]) -> None:
            pass

    caplog.set_level(logging.ERROR, logger="humpyard.store")
    writer = BackgroundWriter(Slow(), max_pending=2)
    try:
        assert writer.submit("wait") and writer.submit("append_decision", decision("a", T0))
        assert not writer.submit("append_decision", decision("dropped", T0))
        assert not writer.flush(timeout=0.05)
        assert "request_id=dropped" in caplog.records[-1].getMessage()
    finally:
        gate.set()
        assert writer.close(timeout=10)


def test_after_close_a_submitted_call_runs_inline(db: SQLiteStore) -> None:
    writer = BackgroundWriter(db)
    writer.submit("append_decision", decision("queued", T0))
    assert writer.close(timeout=10)
    assert writer.close(timeout=10)  # idempotent
    assert not writer.submit("append_decision", decision("late", T0 + 1))
    assert db.get_decision("queued") is not None and db.get_decision("late") is not None


def test_run_reads_off_the_event_loop(db: SQLiteStore) -> None:
    db.append_decision(decision("r1", T0))

    async def read() -> tuple[dict[str, Any] | None, str]:
        found = await run(db.get_decision, "r1")
        page, _ = await run(db.list_decisions, limit=5)
        return found, page[0]["request_id"]

    assert asyncio.run(read()) == (decision("r1", T0), "r1")


def test_the_memory_store_is_written_inline_and_failures_are_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    from humpyard.store import MemoryStore
    from humpyard.store.writer import InlineWriter, writer_for

    caplog.set_level(logging.ERROR, logger="humpyard.store")
    store = MemoryStore()
    writer = writer_for(store)
    assert isinstance(writer, InlineWriter)
    assert writer.submit("append_decision", decision("m1", T0))
    assert store.get_decision("m1") is not None  # at once, no thread involved
    assert writer.submit("append_decision", decision("m1", T0))  # a conflict: logged
    assert "request_id=m1" in caplog.records[-1].getMessage()
    assert writer.flush(0) and writer.pending == 0 and writer.close()


def test_a_store_with_io_gets_the_thread(db: SQLiteStore) -> None:
    from humpyard.store.writer import writer_for

    writer = writer_for(db)
    try:
        assert isinstance(writer, BackgroundWriter)
    finally:
        writer.close(timeout=5)

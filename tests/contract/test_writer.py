"""``BackgroundWriter`` over real stores: batches in order, bounded, nothing lost silently.

A stuck disk is made the way it happens in production: another connection
to the same SQLite file holds the write lock (``BEGIN IMMEDIATE``), so the
writer's transaction waits for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.metrics import GatewayMetrics, Metrics
from humpyard.store import BackgroundWriter, SQLiteStore, run
from tests.support.polling import until

from .test_store_contract import HOUR, T0, decision

DAY = "day:2027-01-15"


@pytest.fixture
def db(tmp_path: Path, clock: FakeClock) -> Iterator[SQLiteStore]:
    store = SQLiteStore(str(tmp_path / "humpyard.db"), clock)
    yield store
    store.close()


@pytest.fixture
def metrics() -> GatewayMetrics:
    return GatewayMetrics(Metrics())


@pytest.fixture
def writer(db: SQLiteStore, metrics: GatewayMetrics) -> Iterator[BackgroundWriter]:
    w = BackgroundWriter(db)
    w.use_metrics(metrics)
    yield w
    w.close(timeout=5)


@contextmanager
def write_lock_held(path: str) -> Iterator[None]:
    """Another connection holds the file's write lock (a stuck disk, as the writer sees it)."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "humpyard.store" and r.levelno == logging.ERROR]


def unsaved(message: str) -> Any:
    return json.loads(message.split("unsaved: ", 1)[1])


def test_the_writer_drains_everything_in_order_in_few_batches(
        db: SQLiteStore, writer: BackgroundWriter, metrics: GatewayMetrics) -> None:
    for i in range(3000):
        assert writer.submit_decision(decision(f"r{i:04d}", T0 + i / 10))
        assert writer.submit_spend("ci", DAY, 0.5)
    writer.submit_spend("ops", DAY, 0.25)
    assert writer.flush(timeout=20)
    assert writer.pending == 0 and writer.lag() == 0.0
    page, _ = db.list_decisions(limit=1000)
    assert [d["request_id"] for d in page] == [f"r{i:04d}" for i in reversed(range(2000, 3000))]
    assert db.stats("key", T0, T0 + HOUR)[0]["requests"] == 3000
    assert db.get_spend("ci", DAY) == 1500.0 and db.get_spend("ops", DAY) == 0.25
    [(counts, items, writes)] = metrics.ledger_batch_size.samples().values()
    # spend waits summed per key and period, so it is one item per batch, not 3000
    assert 3000 < items <= 3000 + 2 * writes
    assert writes < 300, f"{writes} writes for 3000 decisions: not batched"
    [(_, _, timed)] = metrics.ledger_write_seconds.samples().values()
    assert timed == writes


def test_a_bad_decision_is_logged_and_counted_and_the_rest_of_its_batch_written(
        db: SQLiteStore, writer: BackgroundWriter, metrics: GatewayMetrics,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="humpyard.store")
    bad = {"ts": T0, "note": "no request id"}
    with write_lock_held(db.path):  # so that all of these land in one batch
        writer.submit_decision(decision("before", T0))
        until(lambda: writer.queued == 0)
        writer.submit_decision(decision("a", T0, note="keep me"))
        writer.submit_decision(bad)
        writer.submit_decision(decision("a", T0 + 1))  # a repeat: skipped, not an error
        writer.submit_decision(decision("b", T0 + 2))
        writer.submit_spend("ci", DAY, 1.0)
        assert not writer.submit_spend("ci", DAY, float("nan"))  # refused at once
    assert writer.flush(timeout=10)
    assert db.get_decision("a") == decision("a", T0, note="keep me")
    assert db.get_decision("b") is not None and db.get_decision("before") is not None
    assert db.get_spend("ci", DAY) == 1.0
    logged = errors(caplog)
    assert len(logged) == 2, logged
    nan = next(m for m in logged if "spend" in m)
    assert "key_id=ci" in nan and "period=day:2027-01-15" in nan
    assert unsaved(next(m for m in logged if "decision" in m)) == bad
    assert metrics.ledger_lost.value(kind="decision", reason="error") == 1
    assert metrics.ledger_lost.value(kind="spend", reason="error") == 1
    assert metrics.ledger_lost.value(kind="decision", reason="overload") == 0


def test_a_failed_write_loses_its_batch_loudly_and_the_writer_goes_on(
        tmp_path: Path, clock: FakeClock, metrics: GatewayMetrics,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="humpyard.store")
    store = SQLiteStore(str(tmp_path / "gone.db"), clock)
    writer = BackgroundWriter(store)
    writer.use_metrics(metrics)
    try:
        store.close()  # every write now raises StoreError
        writer.submit_decision(decision("r1", T0))
        writer.submit_spend("ci", DAY, 2.0)
        assert writer.flush(timeout=10)
        logged = errors(caplog)
        assert len(logged) == 2 and all("StoreError" in m for m in logged), logged
        assert unsaved(next(m for m in logged if "request_id=r1" in m)) == decision("r1", T0)
        assert unsaved(next(m for m in logged if "key_id=ci" in m)) == {
            "key_id": "ci", "period": DAY, "usd": 2.0}
        assert metrics.ledger_lost.value(kind="decision", reason="error") == 1
        assert metrics.ledger_lost.value(kind="spend", reason="error") == 1
        writer.submit_decision(decision("r2", T0))  # the thread is still there
        assert writer.flush(timeout=10)
        assert metrics.ledger_lost.value(kind="decision", reason="error") == 2
    finally:
        assert writer.close(timeout=10)


def test_past_its_bound_the_queue_sheds_new_decisions_counted_and_logged_but_never_spend(
        db: SQLiteStore, clock: FakeClock, metrics: GatewayMetrics,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="humpyard.store")
    writer = BackgroundWriter(db, max_pending=5, linger_secs=0, clock=clock)
    writer.use_metrics(metrics)
    try:
        with write_lock_held(db.path):
            assert writer.submit_decision(decision("r0", T0))
            until(lambda: writer.queued == 0)  # r0 is being written: stuck on the lock
            accepted = [writer.submit_decision(decision(f"r{i}", T0 + i)) for i in range(1, 9)]
            for _ in range(100):
                assert writer.submit_spend("ci", DAY, 0.01)
            assert accepted == [True] * 5 + [False] * 3
            assert writer.queued == 5 and writer.pending == 1 + 5 + 1
            clock.advance(7.5)
            writer.refresh_gauges()
            assert metrics.ledger_lag.value() == 7.5
            assert metrics.ledger_queue_depth.value() == 7
        assert writer.flush(timeout=10)
        writer.refresh_gauges()
        assert (metrics.ledger_lag.value(), metrics.ledger_queue_depth.value()) == (0, 0)
    finally:
        assert writer.close(timeout=10)
    stored = {d["request_id"] for d in db.list_decisions(limit=100)[0]}
    assert stored == {f"r{i}" for i in range(6)}
    assert db.get_spend("ci", DAY) == pytest.approx(1.0)
    assert metrics.ledger_lost.value(kind="decision", reason="overload") == 3
    assert metrics.ledger_lost.value(kind="spend", reason="overload") == 0
    shed = errors(caplog)
    assert [unsaved(m)["request_id"] for m in shed] == ["r6", "r7", "r8"]
    assert all("5 decisions already waiting" in m for m in shed)


def test_lag_is_the_age_of_the_oldest_unwritten_item(
        db: SQLiteStore, clock: FakeClock) -> None:
    writer = BackgroundWriter(db, linger_secs=0, clock=clock)
    try:
        assert writer.lag() == 0.0
        with write_lock_held(db.path):
            writer.submit_spend("ci", DAY, 1.0)
            clock.advance(2.0)
            writer.submit_decision(decision("r1", T0))
            clock.advance(1.0)
            assert writer.lag() == 3.0  # the spend, not the newer decision
        assert writer.flush(timeout=10)
        assert writer.lag() == 0.0
    finally:
        writer.close(timeout=10)


def test_after_close_a_submitted_item_is_written_inline(db: SQLiteStore) -> None:
    writer = BackgroundWriter(db)
    writer.submit_decision(decision("queued", T0))
    writer.submit_spend("ci", DAY, 1.0)
    assert writer.close(timeout=10)
    assert writer.close(timeout=10)  # idempotent
    assert not writer.submit_decision(decision("late", T0 + 1))
    assert not writer.submit_spend("ci", DAY, 2.0)
    assert db.get_decision("queued") is not None and db.get_decision("late") is not None
    assert db.get_spend("ci", DAY) == 3.0


def test_a_store_without_write_batch_is_written_item_by_item(
        tmp_path: Path, clock: FakeClock) -> None:
    from tests.unit.aws.moto_support import dynamodb_store

    with dynamodb_store(tmp_path, clock) as store:
        writer = BackgroundWriter(store)
        try:
            for i in range(5):
                writer.submit_decision(decision(f"r{i}", T0 + i))
            writer.submit_decision(decision("r0", T0))  # a repeat: counted once
            writer.submit_spend("ci", DAY, 0.5)
            writer.submit_spend("ci", DAY, 0.25)
            assert writer.flush(timeout=20)
        finally:
            writer.close(timeout=10)
        assert len(store.list_decisions(limit=10)[0]) == 5
        assert store.stats("route", T0, T0 + HOUR)[0]["requests"] == 5
        assert store.get_spend("ci", DAY) == 0.75


def test_run_reads_off_the_event_loop(db: SQLiteStore) -> None:
    db.append_decision(decision("r1", T0))

    async def read() -> tuple[dict[str, Any] | None, str]:
        found = await run(db.get_decision, "r1")
        page, _ = await run(db.list_decisions, limit=5)
        return found, page[0]["request_id"]

    assert asyncio.run(read()) == (decision("r1", T0), "r1")


def test_the_memory_store_is_written_inline_and_failures_are_counted(
        metrics: GatewayMetrics, caplog: pytest.LogCaptureFixture) -> None:
    from humpyard.store import MemoryStore
    from humpyard.store.writer import InlineWriter, writer_for

    caplog.set_level(logging.ERROR, logger="humpyard.store")
    store = MemoryStore()
    writer = writer_for(store)
    assert isinstance(writer, InlineWriter)
    writer.use_metrics(metrics)
    assert writer.submit_decision(decision("m1", T0))
    assert store.get_decision("m1") is not None  # at once, no thread involved
    writer.submit_spend("ci", DAY, 1.0)
    assert store.get_spend("ci", DAY) == 1.0
    writer.submit_decision({"ts": T0})
    assert "request_id=None" in errors(caplog)[-1]
    assert metrics.ledger_lost.value(kind="decision", reason="error") == 1
    assert writer.flush(0) and writer.pending == 0 and writer.close()


def test_a_store_with_io_gets_the_thread(db: SQLiteStore) -> None:
    from humpyard.store.writer import writer_for

    writer = writer_for(db)
    try:
        assert isinstance(writer, BackgroundWriter)
    finally:
        writer.close(timeout=5)


def test_a_write_lock_held_past_the_busy_wait_loses_nothing(
        tmp_path: Path, clock: FakeClock, metrics: GatewayMetrics,
        caplog: pytest.LogCaptureFixture) -> None:
    """The batch waits for the lock, however long another process holds it: the
    store says ``StoreBusy`` after its busy wait (0.1 s here, 5 s by default) and
    the writer keeps the batch and tries again, while new items queue behind it."""
    caplog.set_level(logging.WARNING, logger="humpyard.store")
    db = SQLiteStore(str(tmp_path / "humpyard.db"), clock, busy_timeout_secs=0.1)
    writer = BackgroundWriter(db, linger_secs=0)
    writer.use_metrics(metrics)
    try:
        with write_lock_held(db.path):
            writer.submit_decision(decision("r0", T0))
            writer.submit_spend("ci", DAY, 0.5)
            until(lambda: any("write lock is held elsewhere" in r.getMessage()
                              for r in caplog.records))
            writer.submit_decision(decision("r1", T0 + 1))  # queued behind the stuck batch
            until(lambda: sum("write lock is held elsewhere" in r.getMessage()
                              for r in caplog.records) == 1 and writer.pending == 3)
        assert writer.flush(timeout=10)
    finally:
        assert writer.close(timeout=10)
    assert {d["request_id"] for d in db.list_decisions(limit=10)[0]} == {"r0", "r1"}
    assert db.get_spend("ci", DAY) == 0.5
    assert metrics.ledger_lost.value(kind="decision", reason="error") == 0
    assert errors(caplog) == []
    db.close()


def test_a_full_file_loses_nothing_and_is_written_once_it_has_room(
        tmp_path: Path, clock: FakeClock, metrics: GatewayMetrics,
        caplog: pytest.LogCaptureFixture) -> None:
    """SQLite's ``SQLITE_FULL`` (here its page limit on the write connection; a full
    disk says the same) is ``StoreUnavailable``: the writer keeps the batch and tries
    again, and writes it once there is room. Before, it was lost (logged, counted)."""
    caplog.set_level(logging.WARNING, logger="humpyard.store")
    db = SQLiteStore(str(tmp_path / "humpyard.db"), clock)
    writer = BackgroundWriter(db, linger_secs=0)
    writer.use_metrics(metrics)
    conn = db._connection()  # the store's own write connection: the limit is per connection
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count={pages}")
    try:
        for i in range(50):
            writer.submit_decision(decision(f"r{i}", T0 + i))
        writer.submit_spend("ci", DAY, 0.5)
        until(lambda: any("SQLITE_FULL" in r.getMessage() for r in caplog.records))
        assert not writer.flush(timeout=10)  # returns at the failed try, written nothing
        assert metrics.ledger_lost.value(kind="decision", reason="error") == 0
        with db._lock:  # between two of the writer's tries
            conn.execute("PRAGMA max_page_count=1073741823")
        assert writer.flush(timeout=10)
    finally:
        assert writer.close(timeout=10)
    assert len(db.list_decisions(limit=100)[0]) == 50
    assert db.get_spend("ci", DAY) == 0.5
    assert metrics.ledger_lost.value(kind="decision", reason="error") == 0
    assert errors(caplog) == []
    db.close()


def test_closing_while_the_lock_is_held_loses_the_batch_logged_not_the_exit(
        tmp_path: Path, clock: FakeClock, metrics: GatewayMetrics,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="humpyard.store")
    db = SQLiteStore(str(tmp_path / "humpyard.db"), clock, busy_timeout_secs=0.1)
    writer = BackgroundWriter(db, linger_secs=0)
    writer.use_metrics(metrics)
    with write_lock_held(db.path):
        writer.submit_decision(decision("r0", T0))
        until(lambda: any("write lock is held elsewhere" in r.getMessage()
                          for r in caplog.records))
        assert writer.close(timeout=10)
    assert metrics.ledger_lost.value(kind="decision", reason="error") == 1
    assert [unsaved(m)["request_id"] for m in errors(caplog)] == ["r0"]
    said = [r.getMessage() for r in caplog.records]
    # before, this said "ledger write done after N tries" of a batch it had just lost
    assert not any("done after" in m for m in said), said
    assert any(m.startswith("ledger write given up after") for m in said), said
    db.close()

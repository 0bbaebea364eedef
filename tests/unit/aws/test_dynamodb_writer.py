"""``DynamoDBWriter``: bounded, batched, and nothing lost without a log line and a metric.

The store is the seam: ``DynamoDBStore`` on moto (throttled through
``Failing`` where needed), or ``HeldStore``, a ``write_batch`` that waits
for the test, to fill the queue while a batch is being written.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.errors import StoreError
from humpyard.metrics import GatewayMetrics, Metrics
from humpyard.store.base import LedgerBatch
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter
from humpyard.store.dynamodb_writer import DynamoDBWriter
from tests.unit.aws.moto_support import LEDGER, STATE, Failing

T0 = 1_800_000_000.0


def decision(rid: str, **fields: Any) -> dict[str, Any]:
    return {"request_id": rid, "ts": T0, "route": "auto", "outcome": "ok", "key_id": "ci",
            "target": "fast", "provider": "p", "latency_ms": 10.0, "cost_usd": 0.01,
            **fields}


class HeldStore:
    """``write_batch`` that records each batch and, while held, waits for ``release``."""

    def __init__(self) -> None:
        self.batches: list[LedgerBatch] = []
        self.open = threading.Event()
        self.open.set()
        self.writing = threading.Event()

    def write_batch(self, batch: LedgerBatch) -> None:
        self.writing.set()
        self.open.wait(10)
        if any(d.get("ts") is None for d in batch.decisions):
            raise ValueError("a decision needs ts")
        self.batches.append(batch)


def lost(metrics: GatewayMetrics, kind: str, reason: str) -> float:
    return metrics.ledger_lost.value(kind=kind, reason=reason)


@pytest.fixture
def metrics() -> GatewayMetrics:
    return GatewayMetrics(Metrics())


def test_what_queues_while_a_batch_is_written_goes_in_the_next_one(
        metrics: GatewayMetrics, clock: FakeClock) -> None:
    held = HeldStore()
    writer = DynamoDBWriter(held, clock=clock, metrics=metrics)
    held.open.clear()
    writer.submit_decision(decision("r0"))
    assert held.writing.wait(10)
    for i in range(1, 6):
        writer.submit_decision(decision(f"r{i}"))
        writer.submit_spend("ci", "day:x", 0.25)
    writer.submit("add_spend", "ops", "day:x", 1.0)  # callers that name the store call
    assert writer.pending == 12
    assert not writer.flush(timeout=0.01)
    clock.advance(3.0)
    writer.flush(timeout=0)  # the gauges, while it is stuck
    assert metrics.ledger_queue_depth.value() == 12
    assert metrics.ledger_lag_seconds.value() == 3.0
    held.open.set()
    assert writer.flush(timeout=10)
    assert [len(b.decisions) for b in held.batches] == [1, 5]
    assert held.batches[1].spend == {("ci", "day:x"): 1.25, ("ops", "day:x"): 1.0}
    assert (metrics.ledger_queue_depth.value(), metrics.ledger_lag_seconds.value()) == (0, 0)
    _, total, batches = metrics.ledger_batch_size.samples()[()]
    assert (batches, total) == (2, 12)  # queued writes: 1, then 5 decisions and 6 spends
    writer.close()


def test_a_full_queue_refuses_and_says_so(metrics: GatewayMetrics, clock: FakeClock,
                                          caplog: pytest.LogCaptureFixture) -> None:
    held = HeldStore()
    held.open.clear()
    writer = DynamoDBWriter(held, clock=clock, metrics=metrics, max_pending=3)
    assert writer.submit_decision(decision("r0"))
    assert held.writing.wait(10)
    assert writer.submit_decision(decision("r1")) and writer.submit_spend("ci", "d", 1.0)
    with caplog.at_level(logging.ERROR, logger="humpyard.store"):
        assert not writer.submit_decision(decision("r-dropped"))
        assert not writer.submit_spend("ci", "d", 2.0)
    assert lost(metrics, "decision", "overload") == 1
    assert lost(metrics, "spend", "overload") == 1
    unsaved = [r.getMessage() for r in caplog.records]
    assert any("r-dropped" in m and "already pending" in m for m in unsaved)
    held.open.set()
    assert writer.flush(timeout=10)
    assert [d["request_id"] for b in held.batches for d in b.decisions] == ["r0", "r1"]
    writer.close()


def test_what_the_store_could_not_write_is_counted_and_logged(
        client: Any, clock: FakeClock, metrics: GatewayMetrics,
        caplog: pytest.LogCaptureFixture) -> None:
    # DynamoDB throttles every spend ADD (all four attempts): the decision lands, the
    # spend is lost, and only the spend is counted.
    failing = Failing(client, times=4, operations=frozenset({"UpdateItem"}))
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=failing)
    writer = DynamoDBWriter(store, clock=clock, metrics=metrics)
    with caplog.at_level(logging.ERROR, logger="humpyard.store"):
        writer.submit_decision(decision("r1"))
        writer.submit_spend("ci", "day:x", 0.5)
        assert writer.flush(timeout=30)
    assert store.get_decision("r1") is not None
    assert lost(metrics, "spend", "error") == 1 and lost(metrics, "decision", "error") == 0
    [line] = [r.getMessage() for r in caplog.records if "add_spend" in r.getMessage()]
    assert "ThrottlingException" in line and json.dumps(["ci", "day:x", 0.5]).replace(
        " ", "") in line.replace(" ", "")
    writer.close()


def test_a_broken_decision_is_lost_alone(metrics: GatewayMetrics, clock: FakeClock) -> None:
    held = HeldStore()
    held.open.clear()
    writer = DynamoDBWriter(held, clock=clock, metrics=metrics)
    writer.submit_decision(decision("r0"))
    assert held.writing.wait(10)
    writer.submit_decision(decision("r1"))
    writer.submit_decision(decision("bad", ts=None))
    writer.submit_spend("ci", "d", 1.0)
    held.open.set()
    assert writer.flush(timeout=10)
    written = [d["request_id"] for b in held.batches for d in b.decisions]
    assert written == ["r0", "r1"]
    assert any(b.spend == {("ci", "d"): 1.0} for b in held.batches)
    assert lost(metrics, "decision", "error") == 1
    writer.close()


def test_an_unexpected_failure_does_not_stop_the_writer(metrics: GatewayMetrics,
                                                        clock: FakeClock) -> None:
    class Broken:
        calls = 0

        def write_batch(self, batch: LedgerBatch) -> None:
            self.calls += 1
            if self.calls == 1:
                raise StoreError("dynamodb put_item failed after 4 attempt(s)")

    store = Broken()
    writer = DynamoDBWriter(store, clock=clock, metrics=metrics)
    writer.submit_decision(decision("r0"))
    assert writer.flush(timeout=10)
    writer.submit_decision(decision("r1"))
    assert writer.flush(timeout=10)
    assert store.calls == 2 and lost(metrics, "decision", "error") == 1
    writer.close()


def test_a_repeated_decision_is_recorded_once(store: DynamoDBStore, counted: CallCounter,
                                              clock: FakeClock) -> None:
    writer = DynamoDBWriter(store, clock=clock)
    writer.submit_decision(decision("r1"))
    assert writer.flush(timeout=10)
    writer.submit_decision(decision("r1"))
    assert writer.flush(timeout=10)
    assert counted.calls["PutItem"] == 2
    assert store.stats("route", T0, T0 + 3600)[0]["requests"] == 1
    writer.close()


def test_after_close_writes_land_at_once(clock: FakeClock) -> None:
    held = HeldStore()
    writer = DynamoDBWriter(held, clock=clock)
    writer.submit_decision(decision("r0"))
    assert writer.close(timeout=10)
    assert not writer.submit_decision(decision("late"))  # written inline, not queued
    assert [d["request_id"] for b in held.batches for d in b.decisions] == ["r0", "late"]
    assert writer.pending == 0 and writer.flush(timeout=0)

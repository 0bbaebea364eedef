"""The ledger's ``BackgroundWriter`` on ``DynamoDBStore``: what only DynamoDB adds to it.

DynamoDB writes a batch item by item (no transaction), so a failure may
leave part of a batch written: only the part the store says is missing is
counted lost and logged. The batching, bound and overload behaviour of the
writer itself are in tests/contract/test_writer.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.metrics import GatewayMetrics, Metrics
from humpyard.records import new_request_id
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter
from humpyard.store.writer import BackgroundWriter
from tests.unit.aws.moto_support import LEDGER, STATE, Failing

T0 = 1_800_000_000.0


def decision(rid: str) -> dict[str, Any]:
    return {"request_id": rid, "ts": T0, "route": "auto", "outcome": "ok", "key_id": "ci",
            "target": "fast", "provider": "p", "latency_ms": 10.0, "cost_usd": 0.01}


def test_only_what_dynamodb_did_not_write_is_counted_lost(
        client: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    # The spend ADD is refused for good (not throttling: a retry would not help): the
    # decision lands, the spend does not, and only the spend is logged and counted.
    failing = Failing(client, times=1, code="ValidationException",
                      operations=frozenset({"UpdateItem"}))
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=failing)
    metrics = GatewayMetrics(Metrics())
    writer = BackgroundWriter(store, clock=clock)
    writer.use_metrics(metrics)
    with caplog.at_level(logging.ERROR, logger="humpyard.store"):
        writer.submit_decision(decision("r1"))
        writer.submit_spend("ci", "day:x", 0.5)
        assert writer.flush(timeout=30)
    assert store.get_decision("r1") is not None
    assert metrics.ledger_lost.value(kind="spend", reason="error") == 1
    assert metrics.ledger_lost.value(kind="decision", reason="error") == 0
    [line] = [r.getMessage() for r in caplog.records]
    assert "spend not written key_id=ci" in line and "ValidationException" in line
    writer.close()


def test_what_a_throttled_store_did_not_write_is_kept_and_written_later(
        client: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """Before: a spend ADD throttled through the store's four attempts was counted lost,
    so a busy table let keys spend past their budget."""
    failing = Failing(client, times=10**9, operations=frozenset({"UpdateItem"}))
    counted = CallCounter(failing)
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=counted)
    metrics = GatewayMetrics(Metrics())
    writer = BackgroundWriter(store, clock=clock)
    writer.use_metrics(metrics)
    with caplog.at_level(logging.WARNING, logger="humpyard.store"):
        writer.submit_decision(decision("r1"))
        writer.submit_spend("ci", "day:x", 0.5)
        assert not writer.flush(timeout=30)  # said at once: the store was unavailable
        assert writer.pending == 1  # the spend, kept
        failing.remaining = 0  # the store takes writes again
        # A flush makes the writer try again at once; one that began while a try was
        # failing returns at that try, so a second may be needed (never a third).
        assert writer.flush(timeout=30) or writer.flush(timeout=30)
    assert store.get_spend("ci", "day:x") == 0.5  # added once
    assert store.get_decision("r1") is not None
    assert counted.calls["PutItem"] == 1  # the decision was not tried again
    assert metrics.ledger_lost.value(kind="spend", reason="error") == 0
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("ledger write waiting: the store is unavailable")
    assert "ThrottlingException" in lines[0] and "1 items kept" in lines[0]
    assert lines[-1].startswith("ledger write done after ")
    writer.close()


def test_a_repeated_decision_is_recorded_once(store: DynamoDBStore, counted: CallCounter,
                                              clock: FakeClock) -> None:
    writer = BackgroundWriter(store, clock=clock)
    rid = new_request_id(T0)  # the gateway's id: its key, and so its repeats, known at once
    writer.submit_decision(decision(rid))
    writer.submit_decision(decision(rid))  # in the same batch
    assert writer.flush(timeout=10)
    writer.submit_decision(decision(rid))  # and in a later one
    assert writer.flush(timeout=10)
    assert counted.calls["PutItem"] == 3 and "Query" not in counted.calls
    assert store.stats("route", T0, T0 + 3600)[0]["requests"] == 1
    writer.close()

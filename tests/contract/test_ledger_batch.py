"""``LedgerStore.write_batch``: the ledger writer's one call, on every backend.

The oracle for what a batch adds is the same decisions appended one by one
with ``append_decision`` (itself checked by ``test_store_contract``): every
stats group, usage and spend must come out the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.records import new_request_id
from humpyard.store import LedgerBatch, MemoryStore, Store
from humpyard.store.aggregates import STATS_GROUPS

from .conftest import STORE_FACTORIES
from .test_store_contract import HOUR, T0, attempt, decision

BATCH_BACKENDS = list(STORE_FACTORIES)


@pytest.fixture(params=BATCH_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    with STORE_FACTORIES[request.param](tmp_path, clock) as made:
        yield made


def mixed(n: int) -> list[dict[str, Any]]:
    """Decisions over two hours, three routes, two keys, failures, failovers and refusals,
    with the gateway's request ids (an id that carries no time costs DynamoDB a walk of
    its shard's days before the put: ~0.1 s of moto each; those are tested with a few)."""
    out = []
    for i in range(n):
        ts = T0 + i * 37.0  # crosses an hour boundary after ~97 decisions
        rid = new_request_id(ts)
        if i % 7 == 0:
            out.append(decision(rid, ts, route="private", key_id=None,
                                outcome="budget_exhausted", status=429, target=None,
                                provider=None, cost_usd=None, usage=None, latency_ms=0.4))
        elif i % 5 == 0:
            out.append(decision(rid, ts, route="auto", key_id="ops",
                                latency_ms=900.0 + i, cost_usd=0.02, attempts=[
                                    attempt("deep", "openai", 500, 300.0, "server_error"),
                                    attempt("cheap", "local", 200, 500.0 + i)]))
        else:
            out.append(decision(rid, ts, route=("auto", "tools")[i % 2],
                                outcome="failed" if i % 11 == 0 else "ok",
                                latency_ms=50.0 + 3 * i))
    return out


def everything(store: Store, since: float = T0, until: float = T0 + 3 * HOUR) -> dict[str, Any]:
    return {g: store.stats(g, since, until) for g in STATS_GROUPS}


def test_a_batch_adds_what_the_same_decisions_appended_one_by_one_add(store: Store) -> None:
    decisions = mixed(150)
    store.write_batch(LedgerBatch(decisions=decisions, spend={
        ("ci", "day:2027-01-15"): 1.25, ("ops", "month:2027-01"): 0.5}))
    oracle = MemoryStore()
    for d in decisions:
        oracle.append_decision(d)
    assert everything(store) == everything(oracle)
    assert everything(store, T0 + HOUR, T0 + 2 * HOUR) == everything(
        oracle, T0 + HOUR, T0 + 2 * HOUR)
    ids = [d["request_id"] for d in decisions]
    assert store.get_decision(ids[35]) == decisions[35]
    page, _ = store.list_decisions(limit=1000)
    assert [d["request_id"] for d in page] == list(reversed(ids))
    assert store.get_spend("ci", "day:2027-01-15") == 1.25
    assert store.get_spend("ops", "month:2027-01") == 0.5


def test_batches_add_up_with_what_is_already_stored(store: Store) -> None:
    store.add_spend("ci", "day:2027-01-15", 1.0)
    store.append_decision(decision("first", T0))
    store.write_batch(LedgerBatch(decisions=[decision("second", T0 + 1)],
                                  spend={("ci", "day:2027-01-15"): 0.5}))
    store.write_batch(LedgerBatch(spend={("ci", "day:2027-01-15"): 0.25}))
    assert store.get_spend("ci", "day:2027-01-15") == 1.75
    [route] = store.stats("route", T0, T0 + HOUR)
    assert (route["requests"], route["input_tokens"]) == (2, 1800)


def test_a_recorded_request_id_is_skipped_and_the_rest_is_written(store: Store) -> None:
    store.append_decision(decision("r1", T0, route="auto"))
    store.write_batch(LedgerBatch(
        decisions=[decision("r0", T0 + 1), decision("r1", T0 + 2, route="other"),
                   decision("r2", T0 + 3)],
        spend={("ci", "day:2027-01-15"): 0.75}))
    assert store.get_decision("r1")["route"] == "auto"  # type: ignore[index]
    assert store.get_decision("r0") is not None and store.get_decision("r2") is not None
    assert [(g["key"], g["requests"]) for g in store.stats("route", T0, T0 + HOUR)] == [
        ("auto", 3)]
    assert store.get_spend("ci", "day:2027-01-15") == 0.75


def test_a_request_id_twice_in_one_batch_counts_once(store: Store) -> None:
    store.write_batch(LedgerBatch(decisions=[decision("r1", T0, note="first"),
                                             decision("r1", T0 + 1, note="second")]))
    assert store.get_decision("r1")["note"] == "first"  # type: ignore[index]
    assert store.stats("key", T0, T0 + HOUR)[0]["requests"] == 1
    store.write_batch(LedgerBatch(decisions=[decision("r1", T0 + 5)]))  # a retried batch
    assert store.stats("key", T0, T0 + HOUR)[0]["requests"] == 1


@pytest.mark.parametrize("bad", [
    LedgerBatch(decisions=[decision("ok", T0), {"ts": T0}]),
    LedgerBatch(decisions=[decision("ok", T0), {"request_id": "x", "ts": T0, "o": object()}]),
    LedgerBatch(decisions=[decision("ok", T0)], spend={("ci", "day:2027-01-15"): float("nan")}),
    LedgerBatch(decisions=[decision("ok", T0)], spend={("ci", "day:2027-01-15"): "1"}),  # type: ignore[dict-item]
], ids=["no-request-id", "not-json", "nan-spend", "string-spend"])
def test_an_unusable_item_refuses_the_whole_batch_and_writes_nothing(
        store: Store, bad: LedgerBatch) -> None:
    with pytest.raises(ValueError):
        store.write_batch(bad)
    assert store.get_decision("ok") is None
    assert store.stats("route", T0, T0 + HOUR) == []
    assert store.get_spend("ci", "day:2027-01-15") == 0.0


def test_an_empty_batch_writes_nothing(store: Store) -> None:
    store.write_batch(LedgerBatch())
    assert store.list_decisions() == ([], None)


def test_a_closed_store_refuses_a_batch(store: Store) -> None:
    from humpyard.errors import StoreError

    store.close()
    with pytest.raises(StoreError):
        store.write_batch(LedgerBatch(decisions=[decision("r1", T0)]))

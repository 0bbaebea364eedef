"""``LedgerStore.write_batch``: the batched writers' one call, the same on every backend."""

from __future__ import annotations

import pytest

from humpyard.store import Store
from humpyard.store.base import LedgerBatch
from tests.contract.test_store_contract import HOUR, T0, decision


def test_a_batch_records_its_decisions_and_adds_its_spend(store: Store) -> None:
    store.write_batch(LedgerBatch([decision("a", T0), decision("b", T0 + 1, route="other")],
                                  {("ci", "day:2027-01-15"): 0.5, ("ops", "day:2027-01-15"): 2.0}))
    assert store.get_decision("a") == decision("a", T0)
    assert [d["request_id"] for d in store.list_decisions()[0]] == ["b", "a"]
    assert store.spend_for({"ci": "day:2027-01-15", "ops": "day:2027-01-15"}) == {
        "ci": 0.5, "ops": 2.0}
    assert {g["key"]: g["requests"] for g in store.stats("route", T0, T0 + HOUR)} == {
        "auto": 1, "other": 1}


def test_a_decision_already_recorded_is_skipped_and_counted_once(store: Store) -> None:
    store.append_decision(decision("a", T0))
    store.write_batch(LedgerBatch([decision("a", T0), decision("b", T0 + 1)]))
    store.write_batch(LedgerBatch([decision("b", T0 + 1)]))
    assert [g["requests"] for g in store.stats("route", T0, T0 + HOUR)] == [2]
    assert len(store.list_decisions()[0]) == 2


def test_an_empty_batch_writes_nothing(store: Store) -> None:
    store.write_batch(LedgerBatch())
    assert store.list_decisions() == ([], None)


def test_an_unusable_decision_is_refused(store: Store) -> None:
    with pytest.raises(ValueError):
        store.write_batch(LedgerBatch([{"ts": T0}]))

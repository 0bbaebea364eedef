"""What only ``MemoryStore`` promises: the no-ledger mode."""

from __future__ import annotations

import pytest

from humpyard.errors import ConflictError
from humpyard.planning.types import Override
from humpyard.store import MemoryStore


def test_without_a_ledger_overrides_are_refused() -> None:
    store = MemoryStore(ledger=False)
    assert (store.kind, store.has_ledger) == ("memory", False)
    with pytest.raises(ConflictError, match="ledger"):
        store.create_override(Override(id="", kind="disable_target", subject="deep"))
    assert store.list_overrides(0.0) == [] and store.list_audit() == []


def test_without_a_ledger_the_decision_log_is_capped_but_stats_are_kept() -> None:
    store = MemoryStore(ledger=False, max_decisions=3)
    for i in range(5):
        store.append_decision({"request_id": f"r{i}", "ts": float(i), "route": "auto"})
    page, _ = store.list_decisions()
    assert [d["request_id"] for d in page] == ["r4", "r3", "r2"]
    assert store.stats("route", 0.0, 3600.0)[0]["requests"] == 5

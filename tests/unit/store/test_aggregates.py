"""The pure parts every backend shares: decision rows, cursors, the latency histogram."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from humpyard.store.aggregates import (
    HIST_BUCKETS,
    HIST_MAX_MS,
    bucket_bounds,
    bucket_totals,
    latency_bucket,
    percentile,
)
from humpyard.store.decisions import decision_row, decode_cursor, encode_cursor


@settings(deadline=None)  # timing under a loaded CI machine is not the property
@given(st.floats(min_value=1.0001, max_value=HIST_MAX_MS * 0.999))
def test_a_latency_falls_inside_its_bucket(ms: float) -> None:
    low, high = bucket_bounds(latency_bucket(ms))
    assert low * (1 - 1e-9) <= ms <= high * (1 + 1e-9)


def test_the_histogram_clamps_at_both_ends() -> None:
    assert latency_bucket(0.0) == latency_bucket(0.3) == 0
    assert latency_bucket(HIST_MAX_MS * 10) == HIST_BUCKETS - 1
    assert bucket_bounds(HIST_BUCKETS - 1)[1] == pytest.approx(HIST_MAX_MS)


def test_percentile_of_an_empty_histogram_is_none() -> None:
    assert percentile({}) is None and percentile({3: 0}) is None


@settings(deadline=None)  # timing under a loaded CI machine is not the property
@given(st.lists(st.floats(min_value=2.0, max_value=100_000.0), min_size=1, max_size=200))
def test_the_p50_lies_within_a_bucket_of_the_true_median(values: list[float]) -> None:
    hist: dict[int, int] = {}
    for v in values:
        hist[latency_bucket(v)] = hist.get(latency_bucket(v), 0) + 1
    ordered = sorted(values)
    low = bucket_bounds(latency_bucket(ordered[(len(ordered) - 1) // 2]))[0]
    high = bucket_bounds(latency_bucket(ordered[len(ordered) // 2]))[1]
    p50 = percentile(hist)
    assert p50 is not None and low * 0.999 <= p50 <= high * 1.001


@settings(deadline=None)  # timing under a loaded CI machine is not the property
@given(st.floats(allow_nan=False, allow_infinity=False), st.text())
def test_cursors_round_trip(ts: float, rid: str) -> None:
    assert decode_cursor(encode_cursor(ts, rid)) == (ts, rid)


def test_indexed_fields_of_the_wrong_type_are_indexed_as_missing() -> None:
    row = decision_row({"request_id": "r", "ts": 5, "status": "200", "latency_ms": math.nan,
                        "usage": {"input_tokens": True}, "attempts": "none"})
    assert (row.status, row.latency_ms, row.input_tokens, row.attempts) == (None, None, None, None)
    assert row.has_usage and row.ts == 5.0


def test_a_refusal_adds_no_target_row() -> None:
    row = decision_row({"request_id": "r", "ts": 0, "route": "auto", "outcome": "forbidden",
                        "target": None, "attempts": [], "cost_usd": 0.0})
    assert sorted(bucket_totals([row])) == [("key", 0, ""), ("route", 0, "auto")]


def _num_as_specified(value: object) -> float | None:
    """A finite number (never a bool) as a float, else None: the rule the fast paths
    of ``decision_row`` must keep."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


ODD = [None, True, False, 0, -1, 7, 2**53, 2**53 + 1, -(2**53) - 1, 10**30, 0.0, -0.0,
       2.5, 1e300, math.inf, -math.inf, math.nan, "200", "", [1], {"a": 1}]


def test_indexed_values_keep_their_rule_whatever_their_type() -> None:
    """Every odd value in every indexed field: the row holds what the rule says (a
    float field its float, an int field ``int`` of it, a name its ``str``)."""
    for v in ODD:
        row = decision_row({"request_id": "r", "ts": 1, "status": v, "latency_ms": v,
                            "cost_usd": v, "prompt_tokens": v, "route": v, "target": v,
                            "usage": {"input_tokens": v, "output_tokens": v},
                            "attempts": [{"status": v, "latency_ms": v, "target": v}]})
        n = _num_as_specified(v)
        whole = None if n is None else int(n)
        assert (row.status, row.prompt_tokens, row.input_tokens) == (whole, whole, whole), v
        assert row.latency_ms == n or (n is None and row.latency_ms is None), v
        assert (row.route, row.target) == ((None, None) if v is None else (str(v), str(v))), v
        assert row.attempts is not None and row.attempts[0].latency_ms == n, v
        assert type(row.status) is (int if whole is not None else type(None)), v

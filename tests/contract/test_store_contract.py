"""The ``Store`` contract: every backend in ``conftest.STORE_FACTORIES`` must pass all of it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from humpyard.errors import ConflictError, StoreError
from humpyard.planning.types import Override
from humpyard.records import new_request_id
from humpyard.store import Store
from humpyard.store.aggregates import bucket_bounds, latency_bucket
from humpyard.store.base import LedgerBatch

T0 = 1_800_000_000.0  # an hour boundary (FakeClock's start)
HOUR = 3600.0


def decision(rid: str, ts: float, **fields: Any) -> dict[str, Any]:
    """A decision shaped like the gateway's; ``attempts`` defaults to one answered call."""
    d: dict[str, Any] = {
        "request_id": rid, "ts": ts, "route": "auto", "rule": "default", "outcome": "ok",
        "key_id": "ci", "status": 200, "target": "cheap", "provider": "local",
        "latency_ms": 100.0, "cost_usd": 0.01, "prompt_tokens": 1000,
        "usage": {"input_tokens": 900, "output_tokens": 50},
    }
    d.update(fields)
    if "attempts" not in fields:
        d["attempts"] = [] if d["target"] is None else [attempt(
            d["target"], d["provider"], d["status"], d["latency_ms"])]
    return d


def attempt(target: str, provider: str, status: int | None, latency_ms: float | None,
            failure_class: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"target": target, "provider": provider, "model": "m", "class": None,
            "status": status, "failure_class": failure_class, "latency_ms": latency_ms,
            **extra}


def run_threads(n: int, fn: Callable[[int], None]) -> None:
    barrier = threading.Barrier(n)

    def body(i: int) -> None:
        barrier.wait()
        fn(i)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def within_bucket(p50: float, true_ms: float) -> bool:
    low, high = bucket_bounds(latency_bucket(true_ms))
    return low / 1.01 <= p50 <= high * 1.01


# -- decisions -------------------------------------------------------------------


def test_a_decision_comes_back_unchanged(store: Store) -> None:
    d = decision("r1", T0, skipped_rules=[{"index": 0, "mismatches": ["tools"]}],
                 note="naïve ☃", usage=None, fallback_crossed_classes=None)
    store.append_decision(d)
    assert store.get_decision("r1") == d
    assert store.get_decision("missing") is None


def test_reads_are_copies(store: Store) -> None:
    store.append_decision(decision("r1", T0))
    store.get_decision("r1")["attempts"].append("mutated")  # type: ignore[index]
    assert store.get_decision("r1") == decision("r1", T0)


def test_a_repeated_request_id_conflicts_and_counts_once(store: Store) -> None:
    store.append_decision(decision("r1", T0))
    with pytest.raises(ConflictError):
        store.append_decision(decision("r1", T0 + 1, route="other"))
    assert store.get_decision("r1")["route"] == "auto"  # type: ignore[index]
    assert [g["requests"] for g in store.stats("route", T0, T0 + HOUR)] == [1]


@pytest.mark.parametrize("bad", [{"ts": T0}, {"request_id": "", "ts": T0},
                                 {"request_id": "r1"}, {"request_id": "r1", "ts": "now"},
                                 {"request_id": "r1", "ts": T0, "x": object()}])
def test_an_unusable_decision_is_refused(store: Store, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        store.append_decision(bad)


def test_decisions_list_newest_first(store: Store) -> None:
    for i, ts in enumerate([T0 + 5, T0 + 1, T0 + 9, T0 + 3]):
        store.append_decision(decision(f"r{i}", ts))
    page, cursor = store.list_decisions()
    assert [d["ts"] for d in page] == [T0 + 9, T0 + 5, T0 + 3, T0 + 1]
    assert cursor is None


@pytest.mark.parametrize("field", ["route", "rule", "outcome", "key_id"])
def test_decisions_filter_by_each_field(store: Store, field: str) -> None:
    store.append_decision(decision("a", T0, **{field: "wanted"}))
    store.append_decision(decision("b", T0 + 1, **{field: "other"}))
    store.append_decision(decision("c", T0 + 2, **{field: "wanted"}))
    wanted: dict[str, Any] = {field: "wanted"}
    page, _ = store.list_decisions(**wanted)
    assert [d["request_id"] for d in page] == ["c", "a"]


def test_filters_combine_with_since(store: Store) -> None:
    store.append_decision(decision("old-fail", T0, outcome="failed"))
    store.append_decision(decision("new-fail", T0 + 60, outcome="failed"))
    store.append_decision(decision("new-ok", T0 + 61))
    page, _ = store.list_decisions(outcome="failed", since=T0 + 60)
    assert [d["request_id"] for d in page] == ["new-fail"]
    page, _ = store.list_decisions(since=T0 + 60)
    assert [d["request_id"] for d in page] == ["new-ok", "new-fail"]


def test_paging_visits_every_decision_once_despite_ties(store: Store) -> None:
    for i in range(25):
        store.append_decision(decision(f"r{i:02d}", T0 + i // 3,
                                       outcome="failed" if i % 2 else "ok"))
    filters: list[tuple[dict[str, Any], int]] = [({}, 25), ({"outcome": "failed"}, 12)]
    for flt, expected in filters:
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page, cursor = store.list_decisions(limit=7, cursor=cursor, **flt)
            assert len(page) <= 7
            seen += [d["request_id"] for d in page]
            pages += 1
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == expected
        keys = [(store.get_decision(r)["ts"], r) for r in seen]  # type: ignore[index]
        assert keys == sorted(keys, reverse=True)
        assert pages == -(-expected // 7)


def test_paging_is_stable_while_new_decisions_arrive(store: Store) -> None:
    for i in range(6):
        store.append_decision(decision(f"r{i}", T0 + i))
    first, cursor = store.list_decisions(limit=3)
    store.append_decision(decision("newer", T0 + 100))
    second, cursor = store.list_decisions(limit=3, cursor=cursor)
    assert [d["request_id"] for d in first + second] == ["r5", "r4", "r3", "r2", "r1", "r0"]
    assert cursor is None


def test_a_page_that_ends_exactly_has_no_cursor_and_limit_is_clamped(store: Store) -> None:
    for i in range(4):
        store.append_decision(decision(f"r{i}", T0 + i))
    page, cursor = store.list_decisions(limit=4)
    assert len(page) == 4 and cursor is None
    page, cursor = store.list_decisions(limit=0)
    assert len(page) == 1 and cursor is not None


@pytest.mark.parametrize("cursor", ["garbage!", "bm90IGpzb24", "WzEsMl0"])
def test_a_malformed_cursor_is_refused(store: Store, cursor: str) -> None:
    with pytest.raises(ValueError):
        store.list_decisions(cursor=cursor)


# -- stats -------------------------------------------------------------------------


def _traffic(store: Store) -> None:
    for i, ms in enumerate([100.0, 200.0, 300.0]):
        store.append_decision(decision(f"ok{i}", T0 + i, latency_ms=ms))
    store.append_decision(decision(
        "fail", T0 + 10, key_id="ops", outcome="failed", status=502, target=None,
        provider=None, latency_ms=5000.0, cost_usd=0.0, usage=None,
        attempts=[attempt("deep", "openai", 502, 5000.0, "server_error")]))
    store.append_decision(decision(
        "refused", T0 + 11, route="private", key_id=None, outcome="budget_exhausted",
        status=429, target=None, provider=None, latency_ms=0.5, cost_usd=None, usage=None))


@pytest.mark.parametrize(("group_by", "expected"), [
    ("route", {"auto": (4, 1, 200.0, 0.03), "private": (1, 0, None, 0.0)}),
    ("key", {"ci": (3, 0, 200.0, 0.03), "ops": (1, 1, None, 0.0), None: (1, 0, None, 0.0)}),
    ("target", {"cheap": (3, 0, 200.0, 0.03), "deep": (1, 1, None, 0.0)}),
    ("provider", {"local": (3, 0, 200.0, 0.03), "openai": (1, 1, None, 0.0)}),
])
def test_stats_by_each_group(store: Store, group_by: str,
                             expected: dict[str | None, tuple[Any, ...]]) -> None:
    _traffic(store)
    groups = {g["key"]: g for g in store.stats(group_by, T0, T0 + HOUR)}
    assert set(groups) == set(expected)
    for key, (requests, failures, p50, cost) in expected.items():
        g = groups[key]
        assert (g["requests"], g["failures"]) == (requests, failures)
        assert g["failure_rate"] == pytest.approx(failures / requests)
        assert g["cost_usd"] == pytest.approx(cost)
        if p50 is None:
            assert g["p50_latency_ms"] is None
        else:
            assert within_bucket(g["p50_latency_ms"], p50)
    busiest = store.stats(group_by, T0, T0 + HOUR)[0]
    assert busiest["requests"] == max(r for r, *_ in expected.values())


def test_target_stats_count_every_attempt_of_a_failover(store: Store) -> None:
    store.append_decision(decision("r1", T0, target="cheap", provider="local", cost_usd=0.5,
                                   latency_ms=2500.0, attempts=[
                                       attempt("deep", "openai", None, 2000.0, "timeout"),
                                       attempt("idle", "local", None, None, skipped="cold"),
                                       attempt("cheap", "local", 200, 400.0)]))
    targets = {g["key"]: g for g in store.stats("target", T0, T0 + HOUR)}
    assert {k: (g["requests"], g["failures"]) for k, g in targets.items()} == {
        "deep": (1, 1), "cheap": (1, 0)}
    assert within_bucket(targets["cheap"]["p50_latency_ms"], 400.0)
    assert targets["deep"]["p50_latency_ms"] is None
    assert (targets["cheap"]["cost_usd"], targets["deep"]["cost_usd"]) == (0.5, 0.0)
    [route] = store.stats("route", T0, T0 + HOUR)
    assert (route["requests"], route["failures"]) == (1, 0)
    assert within_bucket(route["p50_latency_ms"], 2500.0)


def test_a_decision_without_attempts_counts_for_its_own_target(store: Store) -> None:
    d = decision("r1", T0, outcome="stream_broken", latency_ms=800.0)
    del d["attempts"]
    store.append_decision(d)
    [row] = store.stats("target", T0, T0 + HOUR)
    assert (row["key"], row["requests"], row["failures"], row["p50_latency_ms"]) == (
        "cheap", 1, 1, None)


def test_stats_sum_tokens_and_order_busiest_first(store: Store) -> None:
    _traffic(store)
    rows = store.stats("route", T0, T0 + HOUR)
    assert [r["key"] for r in rows] == ["auto", "private"]
    assert (rows[0]["input_tokens"], rows[0]["output_tokens"]) == (2700, 150)
    assert set(rows[0]) == {"key", "requests", "failures", "failure_rate", "p50_latency_ms",
                            "cost_usd", "input_tokens", "output_tokens", "cache_read_tokens",
                            "cache_write_tokens", "cache_hit_ratio"}
    assert (rows[0]["cache_read_tokens"], rows[0]["cache_hit_ratio"]) == (0, 0.0)


def test_stats_sum_cache_tokens_into_a_hit_ratio(store: Store) -> None:
    cached = {"input_tokens": 1000, "output_tokens": 10, "cache_read_tokens": 600,
              "cache_write_tokens": 300}
    store.append_decision(decision("c1", T0 + 1, usage=cached))
    store.append_decision(decision("c2", T0 + 2, usage={**cached, "cache_read_tokens": 200,
                                                        "cache_write_tokens": 0}))
    store.append_decision(decision("c3", T0 + 3))  # no cache counts at all
    store.write_batch(LedgerBatch(decisions=[decision("c4", T0 + 4, usage=cached)]))
    for group_by in ("route", "target", "provider", "key"):
        [row] = store.stats(group_by, T0, T0 + HOUR)
        assert (row["input_tokens"], row["cache_read_tokens"],
                row["cache_write_tokens"]) == (3900, 1400, 600), group_by
        assert row["cache_hit_ratio"] == 0.359  # 1,400 of 3,900 input tokens


def test_stats_p50_tracks_the_median(store: Store) -> None:
    values = [100.0 * 1.05**i for i in range(101)]  # median 100 * 1.05**50 ≈ 1147 ms
    for i, ms in enumerate(values):
        # The gateway's ids: one that carries no time costs DynamoDB a walk of its
        # shard's days before the put (~0.1 s of moto each; tested on its own).
        store.append_decision(decision(new_request_id(T0 + i), T0 + i, latency_ms=ms))
    [row] = store.stats("target", T0, T0 + HOUR)
    assert row["p50_latency_ms"] == pytest.approx(values[50], rel=0.2)


def test_stats_cover_the_hours_that_overlap_the_window(store: Store) -> None:
    store.append_decision(decision("h0", T0 + 10))
    store.append_decision(decision("h2", T0 + 2 * HOUR + 10))
    assert store.stats("route", T0, T0 + HOUR)[0]["requests"] == 1
    assert store.stats("route", T0 + 30, T0 + 3 * HOUR)[0]["requests"] == 2
    assert store.stats("route", T0 + HOUR, T0 + 2 * HOUR) == []
    assert store.stats("route", T0 + 2 * HOUR + 20, T0 + 2 * HOUR + 30)[0]["requests"] == 1


@pytest.mark.parametrize(("group_by", "ci", "ops"), [
    ("route", {"auto": (3, 0, 0.03)}, {"auto": (1, 1, 0.0)}),
    ("key", {"ci": (3, 0, 0.03)}, {"ops": (1, 1, 0.0)}),
    ("target", {"cheap": (3, 0, 0.03)}, {"deep": (1, 1, 0.0)}),
    ("provider", {"local": (3, 0, 0.03)}, {"openai": (1, 1, 0.0)}),
])
def test_stats_of_one_key(store: Store, group_by: str, ci: dict[str, tuple[Any, ...]],
                          ops: dict[str, tuple[Any, ...]]) -> None:
    _traffic(store)
    for key_id, expected in (("ci", ci), ("ops", ops)):
        got = {g["key"]: (g["requests"], g["failures"], pytest.approx(g["cost_usd"]))
               for g in store.stats(group_by, T0, T0 + HOUR, key_id=key_id)}
        assert got == expected, (group_by, key_id)
    assert store.stats(group_by, T0, T0 + HOUR, key_id="nobody") == []


def test_one_keys_stats_are_not_another_keys_whatever_the_names(store: Store) -> None:
    # a key id that starts like another, and names holding the separators
    store.append_decision(decision("a1", T0 + 1, key_id="a", route="b|c"))
    store.append_decision(decision("a2", T0 + 2, key_id="a|b", route="c"))
    store.append_decision(decision("a3", T0 + 3, key_id="1:a", route="c"))
    assert [g["key"] for g in store.stats("route", T0, T0 + HOUR, key_id="a")] == ["b|c"]
    assert [g["key"] for g in store.stats("route", T0, T0 + HOUR, key_id="a|b")] == ["c"]
    assert [g["key"] for g in store.stats("route", T0, T0 + HOUR, key_id="1:a")] == ["c"]
    assert [g["key"] for g in store.stats("key", T0, T0 + HOUR, key_id="a")] == ["a"]


def test_stats_series_by_hour_and_day(store: Store) -> None:
    day = 86400
    start = T0 - T0 % day  # a UTC midnight
    store.append_decision(decision("d0", start + 10))
    store.append_decision(decision("d1", start + 20, key_id="ops", usage={
        "input_tokens": 100, "output_tokens": 5, "cache_read_tokens": 40}))
    store.append_decision(decision("d2", start + 2 * HOUR + 5, outcome="failed", status=502))
    store.append_decision(decision("d3", start + day + 5))
    [hourly] = store.stats("route", start, start + 2 * day, series="hour")
    assert hourly["requests"] == 4
    assert [(p["t"], p["requests"], p["failures"]) for p in hourly["series"]] == [
        (start, 2, 0), (start + 2 * HOUR, 1, 1), (start + day, 1, 0)]
    first = hourly["series"][0]
    assert (first["input_tokens"], first["output_tokens"], first["cache_read_tokens"],
            first["cache_write_tokens"]) == (1000, 55, 40, 0)
    assert first["cost_usd"] == pytest.approx(0.02)
    [daily] = store.stats("route", start, start + 2 * day, series="day")
    assert [(p["t"], p["requests"]) for p in daily["series"]] == [(start, 3), (start + day, 1)]
    [ops] = store.stats("route", start, start + 2 * day, key_id="ops", series="day")
    assert [(p["t"], p["requests"], p["input_tokens"]) for p in ops["series"]] == [
        (start, 1, 100)]
    assert "series" not in store.stats("route", start, start + 2 * day)[0]
    with pytest.raises(ValueError):
        store.stats("route", start, start + day, series="week")


def test_stats_refuse_an_unknown_group(store: Store) -> None:
    with pytest.raises(ValueError):
        store.stats("model", T0, T0 + HOUR)


# -- spend ---------------------------------------------------------------------------


def test_spend_adds_per_key_and_period(store: Store) -> None:
    assert store.get_spend("ci", "day:2027-01-15") == 0.0
    assert store.add_spend("ci", "day:2027-01-15", 1.5) == 1.5
    assert store.add_spend("ci", "day:2027-01-15", 0.25) == 1.75
    store.add_spend("ci", "day:2027-01-16", 4.0)
    store.add_spend("ops", "day:2027-01-15", 2.0)
    assert store.get_spend("ci", "day:2027-01-15") == 1.75
    assert store.spend_for({"ci": "day:2027-01-16", "ops": "day:2027-01-15",
                            "new": "month:2027-01"}) == {"ci": 4.0, "ops": 2.0, "new": 0.0}


def test_spend_adds_are_atomic_under_threads(store: Store) -> None:
    totals: list[float] = []

    def add(_: int) -> None:
        for _ in range(100):
            totals.append(store.add_spend("ci", "day:2027-01-15", 0.25))

    run_threads(8, add)
    assert store.get_spend("ci", "day:2027-01-15") == 200.0
    assert sorted(totals) == [0.25 * n for n in range(1, 801)]


@pytest.mark.parametrize("usd", [float("nan"), float("inf"), "1"])
def test_spend_must_be_a_finite_number(store: Store, usd: Any) -> None:
    with pytest.raises(ValueError):
        store.add_spend("ci", "day:2027-01-15", usd)


# -- overrides -------------------------------------------------------------------------


def override(subject: str = "deep", *, expires_in: float = 3600, oid: str = "",
             by: str | None = "ops", kind: str = "disable_target",
             target: str | None = None) -> Override:
    return Override(id=oid, kind=kind, subject=subject, target=target, reason="bad answers",
                    created_at=T0, expires_at=T0 + expires_in, created_by=by)


def test_overrides_get_sequential_ids_never_reused(store: Store) -> None:
    first = store.create_override(override("a"))
    second = store.create_override(override("b", kind="pin_route", target="cheap"))
    assert (first.id, second.id) == ("1", "2")
    assert second.target == "cheap" and second.created_by == "ops" and not second.stale
    store.delete_override("2", by="ops", now=T0)
    assert store.create_override(override("c")).id == "3"


def test_an_explicit_override_id_is_kept_and_must_be_unique(store: Store) -> None:
    assert store.create_override(override(oid="maint")).id == "maint"
    with pytest.raises(ConflictError):
        store.create_override(override(oid="maint"))
    store.create_override(override(oid="2"))
    assert store.create_override(override()).id == "1"
    assert store.create_override(override()).id == "3"


def test_overrides_list_filters_expired(store: Store) -> None:
    store.create_override(override("short", expires_in=60))
    store.create_override(override("long", expires_in=7200))
    assert [o.subject for o in store.list_overrides(T0 + 59)] == ["short", "long"]
    assert [o.subject for o in store.list_overrides(T0 + 60)] == ["long"]
    everything = store.list_overrides(T0 + 60, include_expired=True)
    assert [o.subject for o in everything] == ["short", "long"]
    assert everything[0] == override("short", expires_in=60, oid="1")


def test_deleting_an_override_returns_it_and_audits_the_key_id(store: Store) -> None:
    created = store.create_override(override())
    store.audit("create", created, created.created_by, created.created_at)
    assert store.delete_override(created.id, by="admin", now=T0 + 5) == created
    assert store.list_overrides(T0 + 5) == []
    assert store.delete_override(created.id, by="admin", now=T0 + 6) is None
    audit = store.list_audit()
    assert [(a["action"], a["by"], a["ts"]) for a in audit] == [
        ("remove", "admin", T0 + 5), ("create", "ops", T0)]
    assert audit[0] == {"ts": T0 + 5, "action": "remove", "override_id": "1", "by": "admin",
                        "kind": "disable_target", "subject": "deep", "target": None,
                        "reason": "bad answers", "expires_at": T0 + 3600}


def test_expiry_is_audited_exactly_once(store: Store) -> None:
    store.create_override(override("a", expires_in=60))
    store.create_override(override("b", expires_in=120, by=None))
    store.create_override(override("c", expires_in=7200))
    assert store.expire_due(T0 + 59) == []
    found: list[Override] = []
    run_threads(4, lambda _: found.extend(store.expire_due(T0 + 200)))
    assert sorted(o.subject for o in found) == ["a", "b"]
    assert store.expire_due(T0 + 300) == []
    expiries = [a for a in store.list_audit() if a["action"] == "expire"]
    assert [(a["subject"], a["ts"], a["by"]) for a in expiries] == [
        ("b", T0 + 120, None), ("a", T0 + 60, None)]


def test_audit_lists_newest_first_with_limit(store: Store) -> None:
    ov = store.create_override(override())
    assert store.list_audit() == []
    store.audit("create", ov, "ops", T0)
    store.audit("stale", ov, None, T0 + 10)
    store.audit("note", ov, "ops", T0 + 20)
    assert [a["action"] for a in store.list_audit()] == ["note", "stale", "create"]
    assert [a["action"] for a in store.list_audit(limit=2)] == ["note", "stale"]


# -- quota ------------------------------------------------------------------------------


def sample(provider: str, window: str, ts: float, percent: float) -> dict[str, Any]:
    return {"provider": provider, "window": window, "ts": ts, "percent": percent,
            "status": "ok", "resets_at": "2027-01-15T13:00:00Z",
            "cost_usd_since_previous": 0.12}


def test_quota_snapshots_replace_per_provider(store: Store) -> None:
    assert store.get_quota_snapshots() == {}
    store.put_quota_snapshot("opencode", {"windows": {"rolling": {"percent": 10}}, "at": T0})
    store.put_quota_snapshot("opencode", {"windows": {"rolling": {"percent": 12}}, "at": T0 + 60})
    store.put_quota_snapshot("other", {"error": "401 unknown key"})
    assert store.get_quota_snapshots() == {
        "opencode": {"windows": {"rolling": {"percent": 12}}, "at": T0 + 60},
        "other": {"error": "401 unknown key"}}


def test_quota_history_lists_newest_first_and_finds_the_last_sample(store: Store) -> None:
    for i in range(5):
        store.append_quota_history(sample("opencode", "rolling", T0 + 900 * i, 10 + i))
        store.append_quota_history(sample("opencode", "weekly", T0 + 900 * i + 1, 50 + i))
    store.append_quota_history(sample("other", "monthly", T0 + 5, 1))
    history = store.list_quota_history()
    assert len(history) == 11 and history[0] == sample("opencode", "weekly", T0 + 3601, 54)
    assert [s["ts"] for s in history] == sorted((s["ts"] for s in history), reverse=True)
    assert [s["provider"] for s in store.list_quota_history(provider="other")] == ["other"]
    assert len(store.list_quota_history(provider="opencode", since=T0 + 1800)) == 6
    assert len(store.list_quota_history(limit=3)) == 3
    assert store.last_quota_sample("opencode", "rolling") == sample(
        "opencode", "rolling", T0 + 3600, 14)
    assert store.last_quota_sample("opencode", "monthly") is None


def test_a_quota_sample_needs_provider_window_and_ts(store: Store) -> None:
    for missing in ("provider", "window", "ts"):
        bad = sample("p", "w", T0, 1)
        del bad[missing]
        with pytest.raises(ValueError):
            store.append_quota_history(bad)


# -- live state ----------------------------------------------------------------------------


def breaker(version: int, failures: int = 0) -> dict[str, Any]:
    return {"consecutive_failures": failures, "open_until": 0.0, "version": version}


def test_breaker_compare_and_set(store: Store) -> None:
    assert store.get_breaker("local/m") is None
    assert store.put_breaker("local/m", breaker(1), None) == (True, breaker(1))
    assert store.put_breaker("local/m", breaker(1, 9), None) == (False, breaker(1))
    assert store.put_breaker("local/m", breaker(2, 1), 1) == (True, breaker(2, 1))
    assert store.put_breaker("local/m", breaker(3, 5), 1) == (False, breaker(2, 1))
    assert store.put_breaker("never/m", breaker(2), 1) == (False, None)
    store.put_breaker("other/m", breaker(1), None)
    assert store.get_breakers() == {"local/m": breaker(2, 1), "other/m": breaker(1)}
    store.get_breakers()["local/m"]["version"] = 99
    assert store.get_breaker("local/m") == breaker(2, 1)


def test_a_breaker_version_must_grow(store: Store) -> None:
    store.put_breaker("k", breaker(1), None)
    with pytest.raises(ValueError):
        store.put_breaker("k", breaker(1), 1)
    with pytest.raises(ValueError):
        store.put_breaker("k", {"open_until": 0.0}, 1)


def test_exactly_one_of_two_breaker_writers_wins(store: Store) -> None:
    for round_ in range(20):
        key = f"p/m{round_}"
        store.put_breaker(key, breaker(4), None)
        results: dict[int, tuple[bool, dict[str, Any] | None]] = {}

        def write(i: int, key: str = key, results: dict[int, Any] = results) -> None:
            results[i] = store.put_breaker(key, breaker(5, failures=i + 1), 4)

        run_threads(2, write)
        winners = [i for i, (ok, _) in results.items() if ok]
        assert len(winners) == 1
        [loser] = [r for i, r in results.items() if i not in winners]
        assert loser == (False, breaker(5, failures=winners[0] + 1))
        assert store.get_breaker(key) == breaker(5, failures=winners[0] + 1)


def test_latency_adds_up_per_target_and_bucket(store: Store) -> None:
    store.add_latency({"cheap": (2, 300.0), "deep": (1, 900.0)}, 100)
    store.add_latency({"cheap": (1, 150.0)}, 100)
    store.add_latency({"cheap": (4, 400.0)}, 101)
    store.add_latency({"cheap": (1, 10.0)}, 99)
    assert store.get_latency(100) == {"cheap": [(100, 3, 450.0), (101, 4, 400.0)],
                                      "deep": [(100, 1, 900.0)]}
    assert store.get_latency(102) == {}
    assert store.purge_latency(101) == 3
    assert store.get_latency(0) == {"cheap": [(101, 4, 400.0)]}


def test_latency_adds_are_atomic_under_threads(store: Store) -> None:
    def add(_: int) -> None:
        for _ in range(100):
            store.add_latency({"t": (1, 2.5)}, 7)

    run_threads(8, add)
    assert store.get_latency(7) == {"t": [(7, 800, 2000.0)]}


# -- retention and lifecycle ---------------------------------------------------------------


def test_purge_removes_what_is_older_than_the_retention(store: Store) -> None:
    old, new = T0, T0 + 10 * HOUR
    store.append_decision(decision("old", old + 5))
    store.append_decision(decision("new", new + 5))
    store.append_quota_history(sample("p", "w", old, 1))
    store.append_quota_history(sample("p", "w", new, 2))
    store.create_override(override("gone", expires_in=60))
    store.create_override(override("kept", expires_in=20 * HOUR))
    assert store.purge(new) == 1
    assert store.get_decision("old") is None and store.get_decision("new") is not None
    assert store.list_decisions()[0] == [decision("new", new + 5)]
    assert [g["requests"] for g in store.stats("route", old, new + HOUR)] == [1]
    assert store.list_quota_history() == [sample("p", "w", new, 2)]
    assert [o.subject for o in store.list_overrides(old, include_expired=True)] == ["kept"]
    assert store.list_audit() == []
    assert store.purge(new) == 0


def test_purge_keeps_the_stats_bucket_that_straddles_the_cut(store: Store) -> None:
    store.append_decision(decision("a", T0 + 10))
    store.append_decision(decision("b", T0 + 20))
    assert store.purge(T0 + 15) == 1
    assert store.stats("route", T0, T0 + HOUR)[0]["requests"] == 2


def test_a_closed_store_refuses_calls(store: Store) -> None:
    store.close()
    store.close()
    for call in (lambda: store.get_decision("x"), lambda: store.add_spend("k", "p", 1.0),
                 lambda: store.list_overrides(T0), lambda: store.get_breakers()):
        with pytest.raises(StoreError):
            call()

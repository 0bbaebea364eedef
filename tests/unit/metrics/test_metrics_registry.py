"""The registry: declaring, label checks, secrets refused as label values, threads."""

from __future__ import annotations

import threading

import pytest

from humpyard.metrics import Counter, GatewayMetrics, Gauge, Histogram, Metrics, prometheus


def test_counter_gauge_histogram_basics() -> None:
    m = Metrics()
    c = m.counter("t_total", "help", ("a",))
    c.inc(a="x")
    c.inc(2, a="x")
    c.inc(a=5)  # values are str()-ed: 5 and "5" are one series
    c.inc(a="5")
    assert c.value(a="x") == 3
    assert c.value(a="5") == 2
    assert c.value(a="never") == 0

    g = m.gauge("t_gauge", "help", ("a",))
    g.set(4, a="x")
    g.inc(a="x")
    g.dec(3, a="x")
    assert g.value(a="x") == 2
    g.remove(a="x")
    g.remove(a="x")  # a missing series is ignored
    assert g.value(a="x") is None

    h = m.histogram("t_seconds", "help", (), (0.1, 1))
    for v in (0.05, 0.1, 0.5, 3):
        h.observe(v)
    counts, total, count = h.samples()[()]
    assert counts == [2, 1, 1]  # le=0.1 includes 0.1 itself
    assert (total, count) == (3.65, 4)


@pytest.mark.parametrize("labels", [{}, {"a": "x", "b": "y"}, {"b": "y"}])
def test_wrong_label_names_are_refused(labels: dict[str, str]) -> None:
    c = Metrics().counter("t_total", "help", ("a",))
    with pytest.raises(ValueError, match="takes labels"):
        c.inc(**labels)


def test_counter_cannot_decrease() -> None:
    with pytest.raises(ValueError, match="cannot decrease"):
        Metrics().counter("t_total", "help").inc(-1)


@pytest.mark.parametrize("name,labels", [
    ("bad-name", ()), ("ok_total", ("le",)), ("ok_total", ("service",)),
    ("ok_total", ("value",)), ("ok_total", ("__x",)), ("ok_total", ("a", "a")),
    ("ok_total", ("a-b",)),
])
def test_invalid_declarations(name: str, labels: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        Metrics().counter(name, "help", labels)


@pytest.mark.parametrize("buckets", [(), (1, 1), (2, 1), (float("nan"),)])
def test_invalid_buckets(buckets: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="buckets"):
        Metrics().histogram("h_seconds", "help", (), buckets)


def test_redeclaring_returns_the_same_metric_or_refuses() -> None:
    m = Metrics()
    c = m.counter("t_total", "help", ("a",))
    assert m.counter("t_total", "other help", ("a",)) is c
    with pytest.raises(ValueError, match="already declared"):
        m.gauge("t_total", "help", ("a",))
    with pytest.raises(ValueError, match="already declared"):
        m.counter("t_total", "help", ("b",))


def test_a_secret_is_never_accepted_as_a_label_value() -> None:
    m = Metrics()
    gm = GatewayMetrics(m)
    m.forbid_label_values(["sk-client-secret", None, ""])
    gm.budget_spend_usd.set(1.5, key="ci")  # the key id is fine
    with pytest.raises(ValueError) as err:
        gm.budget_spend_usd.set(1.5, key="sk-client-secret")
    assert "sk-client-secret" not in str(err.value)
    with pytest.raises(ValueError):
        gm.requests.inc(route="auto", target="sk-client-secret", status="200")
    assert "sk-client-secret" not in prometheus.render(m.collect())
    m.forbid_label_values([])  # replaced, not added to
    gm.requests.inc(route="auto", target="sk-client-secret", status="200")


def test_gateway_metrics_names_labels_and_kinds() -> None:
    gm = GatewayMetrics(Metrics())
    expected = {
        "requests": ("humpyard_requests_total", Counter, ("route", "target", "status")),
        "request_duration": ("humpyard_request_duration_seconds", Histogram, ("route",)),
        "upstream_attempts": ("humpyard_upstream_attempts_total", Counter,
                              ("target", "provider", "outcome")),
        "target_latency": ("humpyard_target_latency_seconds", Gauge, ("target",)),
        "health_skips": ("humpyard_health_skips_total", Counter, ("route", "target")),
        "capability_skips": ("humpyard_capability_skips_total", Counter,
                             ("route", "target", "reason")),
        "fallback_blocked": ("humpyard_fallback_blocked_total", Counter, ("route",)),
        "retry_after_honored": ("humpyard_retry_after_honored_total", Counter, ()),
        "overrides_active": ("humpyard_overrides_active", Gauge, ("kind",)),
        "override_oldest_age": ("humpyard_override_oldest_age_seconds", Gauge, ()),
        "routability_resends": ("humpyard_routability_resends_total", Counter, ("endpoint",)),
        "routability_resend_seconds": ("humpyard_routability_resend_seconds", Histogram, ()),
        "gateway_overhead": ("humpyard_gateway_overhead_seconds", Histogram, ()),
        "endpoint_state": ("humpyard_endpoint_state", Gauge, ("endpoint", "state")),
        "quota_percent": ("humpyard_quota_percent", Gauge, ("provider", "window")),
        "budget_spend_usd": ("humpyard_budget_spend_usd", Gauge, ("key",)),
        "ledger_queue_depth": ("humpyard_ledger_queue_depth", Gauge, ()),
        "ledger_lag": ("humpyard_ledger_lag_seconds", Gauge, ()),
        "ledger_batch_size": ("humpyard_ledger_batch_size", Histogram, ()),
        "ledger_write_seconds": ("humpyard_ledger_write_seconds", Histogram, ()),
        "ledger_lost": ("humpyard_ledger_lost_total", Counter, ("kind", "reason")),
        "upstream_in_flight": ("humpyard_upstream_in_flight", Gauge, ("provider",)),
        "upstream_waiting": ("humpyard_upstream_waiting", Gauge, ("provider",)),
        "upstream_slot_timeouts": ("humpyard_upstream_slot_timeouts_total", Counter,
                                   ("provider",)),
        "transaction_conflicts": ("humpyard_dynamodb_transaction_conflicts_total", Counter,
                                  ()),
        "refused": ("humpyard_refused_total", Counter, ("reason",)),
        "translation_drops": ("humpyard_translation_drops_total", Counter,
                              ("protocol", "what")),
        "client_disconnects": ("humpyard_client_disconnects_total", Counter, ("phase",)),
        "connections_refused": ("humpyard_connections_refused_total", Counter, ("reason",)),
        "log_lines_dropped": ("humpyard_log_lines_dropped_total", Counter, ()),
        "tokens": ("humpyard_tokens_total", Counter, ("key", "route", "target", "kind")),
        "cost_usd": ("humpyard_cost_usd_total", Counter, ("key", "route", "target")),
        "direct_writes": ("humpyard_stream_direct_writes_total", Counter, ("protocol",)),
    }
    for attr, (name, kind, labels) in expected.items():
        metric = getattr(gm, attr)
        assert (metric.name, type(metric), metric.labelnames) == (name, kind, labels), attr
    assert gm.names() == {name for name, _, _ in expected.values()}
    again = GatewayMetrics(gm.metrics)
    assert again.requests is gm.requests


def test_a_counter_adds_by_a_label_tuple_as_inc_does() -> None:
    m = Metrics()
    c = m.counter("humpyard_x_total", "x", ("key", "kind"))
    c.add(("ci", "input"), 5)
    c.inc(3, key="ci", kind="input")
    assert c.value(key="ci", kind="input") == 8
    with pytest.raises(ValueError):
        c.add(("ci",), 1)  # the wrong number of labels
    with pytest.raises(ValueError):
        c.add(("ci", "input"), -1)
    m.forbid_label_values(["sk-secret"])
    with pytest.raises(ValueError):
        c.add(("sk-secret", "input"), 1)


def test_inc_and_observe_are_thread_safe() -> None:
    m = Metrics()
    c = m.counter("t_total", "help", ("worker",))
    h = m.histogram("t_seconds", "help", ("worker",), (0.5,))
    threads_n, per_thread = 8, 5_000
    start = threading.Barrier(threads_n)

    def work(i: int) -> None:
        start.wait()
        for j in range(per_thread):
            c.inc(worker=str(i % 2))  # two series shared by four threads each
            c.inc(worker=f"own-{i}-{j % 3}")  # series created concurrently
            h.observe(0.1 if j % 2 else 1.0, worker=str(i % 2))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.value(worker="0") == c.value(worker="1") == threads_n // 2 * per_thread
    assert sum(c.samples().values()) == 2 * threads_n * per_thread
    for counts, _, count in h.samples().values():
        assert count == sum(counts) == threads_n // 2 * per_thread

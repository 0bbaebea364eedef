"""When a Lambda instance prints its metrics: ``MetricsCadence`` on the gateway's own
metrics, a ``FakeClock`` and a string buffer for stdout.

Each test plays requests as ``Instance.flush_now`` does (count, then
``after_request``) and reads back the EMF lines, checking what CloudWatch
would be told: every count exactly once, no histogram value sampled away, the
alarmed counters without delay, and how much an instance that is never
invoked again can take with it.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from humpyard.aws.emission import ALARMED, MAX_PENDING, MetricsCadence
from humpyard.clock import FakeClock
from humpyard.metrics import GatewayMetrics, Metrics


class Instance:
    """The metrics half of a Lambda instance: its registry, its cadence, its stdout."""

    def __init__(self, *, interval: float = 60.0, gauge_interval: float = 60.0) -> None:
        self.clock = FakeClock()
        self.out = io.StringIO()
        self.m = GatewayMetrics(Metrics())
        self.cadence = MetricsCadence(self.m.metrics, self.out, self.clock,
                                      namespace="Humpyard", service="humpyard",
                                      interval_secs=interval,
                                      gauge_interval_secs=gauge_interval)

    def request(self, gap: float = 1.1, *, seconds: float = 0.01) -> None:
        self.clock.advance(gap)
        self.m.requests.inc(route="auto", target="fast", status="200")
        self.m.request_duration.observe(seconds, route="auto")
        self.cadence.after_request()

    def printed(self) -> list[dict[str, Any]]:
        """The EMF records printed since the last call."""
        text = self.out.getvalue()
        self.out.seek(0)
        self.out.truncate()
        return [json.loads(line) for line in text.splitlines()]


def values(records: list[dict[str, Any]], name: str) -> list[Any]:
    return [r[name] for r in records if name in r]


def total(records: list[dict[str, Any]], name: str) -> float:
    return sum(v for v in values(records, name))


def test_counts_add_up_in_the_instance_and_go_out_once_a_minute() -> None:
    inst = Instance()
    inst.request()
    assert total(inst.printed(), "humpyard_requests_total") == 1  # a cold start prints
    opened = None
    for i in range(54):  # 59.4 s more: nothing printed
        inst.request()
        opened = opened or inst.clock.now()
        assert "humpyard_requests_total" not in str(inst.printed()), i
    inst.request()  # 60.5 s after the last print
    records = inst.printed()
    assert total(records, "humpyard_requests_total") == 55
    (durations,) = values(records, "humpyard_request_duration_seconds")
    assert len(durations) == 55  # every value, none sampled away
    # stamped with the window's first request, not the print
    stamps = {r["_aws"]["Timestamp"] for r in records if "humpyard_requests_total" in r}
    assert stamps == {int(opened * 1000)}


def test_a_hundred_unprinted_requests_print_so_no_histogram_is_sampled() -> None:
    inst = Instance()
    inst.request()
    inst.printed()
    for _ in range(MAX_PENDING - 1):
        inst.request(gap=0.1)
    assert inst.printed() == []
    inst.request(gap=0.1)
    records = inst.printed()
    assert total(records, "humpyard_requests_total") == MAX_PENDING
    (durations,) = values(records, "humpyard_request_duration_seconds")
    assert len(durations) == MAX_PENDING


@pytest.mark.parametrize("name", sorted(ALARMED))
def test_an_alarmed_counter_goes_out_with_its_request(name: str) -> None:
    inst = Instance()
    inst.request()
    inst.printed()
    inst.request()
    assert inst.printed() == []
    counter = inst.m.metrics.get(name)
    assert counter is not None and counter.kind == "counter"
    labels = {label: "x" for label in counter.labelnames}
    counter.inc(**labels)  # type: ignore[union-attr]
    inst.request()
    records = inst.printed()
    assert total(records, name) == 1
    assert {r["_aws"]["Timestamp"] for r in records} == {int(inst.clock.now() * 1000)}
    assert "humpyard_requests_total" not in str(records)  # only what an alarm waits for
    for _ in range(60):
        inst.request()
    later = inst.printed()
    assert total(later, "humpyard_requests_total") > 0
    assert name not in str(later)  # printed once


def test_shutdown_prints_what_is_waiting_and_nothing_twice() -> None:
    inst = Instance()
    for _ in range(10):
        inst.request()
    assert total(inst.printed(), "humpyard_requests_total") == 1
    assert inst.cadence.print_pending() > 0
    assert total(inst.printed(), "humpyard_requests_total") == 9
    assert inst.cadence.print_pending() == 0


def test_an_instance_never_invoked_again_loses_at_most_one_window() -> None:
    # A Mangum instance gets no shutdown: what it has not printed when it is reaped
    # is lost. That is at most MAX_PENDING requests and interval_secs of its traffic.
    for gap in (0.05, 0.5, 2.0, 7.0):
        inst = Instance()
        served = 0
        printed = 0.0
        for _ in range(1000):
            inst.request(gap=gap)
            served += 1
            printed += total(inst.printed(), "humpyard_requests_total")
            unprinted = served - printed
            assert unprinted <= MAX_PENDING, gap
            assert unprinted * gap <= 60.0 + gap, gap


def test_with_no_interval_every_request_prints() -> None:
    inst = Instance(interval=0)
    for _ in range(5):
        inst.request()
        assert total(inst.printed(), "humpyard_requests_total") == 1


def test_gauges_go_out_on_their_own_interval_with_the_current_time() -> None:
    inst = Instance(gauge_interval=30)
    inst.m.override_oldest_age.set(5.0)
    inst.request()
    assert values(inst.printed(), "humpyard_override_oldest_age_seconds") == [5.0]
    inst.request(gap=20)
    assert values(inst.printed(), "humpyard_override_oldest_age_seconds") == []
    inst.request(gap=11)
    (record,) = [r for r in inst.printed() if "humpyard_override_oldest_age_seconds" in r]
    assert record["_aws"]["Timestamp"] == int(inst.clock.now() * 1000)
    assert inst.cadence.print_all() > 0  # the poller: everything, now
    assert values(inst.printed(), "humpyard_override_oldest_age_seconds") == [5.0]

"""``SharedLatency`` on a DynamoDB store: flushed per instance, folded from shared buckets."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.latency import LatencyBook
from humpyard.latency_shared import SharedLatency
from humpyard.planning.order import fold_latency
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter, count_calls
from tests.unit.aws.moto_support import LEDGER, STATE, Failing

T0 = 1_800_000_000.0  # a minute boundary


def instance(client: Any, clock: FakeClock, **kw: Any) -> tuple[SharedLatency, CallCounter]:
    counter = count_calls(client)
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=counter)
    return SharedLatency(store, clock, **kw), counter


def test_it_is_a_latency_book(client: Any, clock: FakeClock) -> None:
    book: LatencyBook = instance(client, clock)[0]
    assert book.figures(clock.now()) == {}


def test_records_are_flushed_at_most_every_flush_secs(client: Any, clock: FakeClock) -> None:
    a, calls = instance(client, clock, flush_secs=5.0)
    for _ in range(20):
        a.record("fast", 100.0, clock.now())
        clock.advance(0.2)  # 4 s of traffic: nothing written yet
    assert calls.calls == {}
    clock.advance(1.0)
    a.record("slow", 900.0, clock.now())  # the request that notices the flush is due
    assert calls.delta() == {"UpdateItem": 1}
    for _ in range(10):
        a.record("fast", 100.0, clock.now())
        clock.advance(0.1)
    assert calls.delta() == {}
    rows = DynamoDBStore(STATE, LEDGER, clock=clock, client=client).get_latency(0)
    assert rows == {"fast": [(int(T0 // 60), 20, 2000.0)],
                    "slow": [(int(T0 // 60), 1, 900.0)]}


def test_a_flush_writes_one_update_per_bucket(client: Any, clock: FakeClock) -> None:
    a, calls = instance(client, clock, flush_secs=120.0)
    a.record("t", 100.0, clock.now())
    clock.advance(60)
    a.record("t", 300.0, clock.now())
    a.flush()
    assert calls.delta() == {"UpdateItem": 2}
    a.flush()  # nothing pending: nothing written
    assert calls.delta() == {}


def test_figures_fold_bucket_means_in_time_order(client: Any, clock: FakeClock) -> None:
    a, _ = instance(client, clock, flush_secs=0.0)
    for ms in (80.0, 120.0):  # bucket 0: mean 100
        a.record("t", ms, clock.now())
    clock.advance(60)
    a.record("t", 200.0, clock.now())  # bucket 1: mean 200
    clock.advance(60)
    a.record("t", 400.0, clock.now())  # bucket 2: mean 400
    b, _ = instance(client, clock)
    fig = b.figures(clock.now())["t"]
    expected = fold_latency(fold_latency(fold_latency(None, 100.0, 0), 200.0, 0), 400.0, 0)
    assert fig.ms == pytest.approx(expected.ms)  # (0.7 * (0.7*100 + 0.3*200)) + 0.3 * 400
    assert fig.samples == 4
    assert fig.updated_at == (int(T0 // 60) + 3) * 60  # the end of the newest bucket


def test_shared_figures_are_read_at_most_every_refresh_secs(client: Any,
                                                            clock: FakeClock) -> None:
    a, _ = instance(client, clock, flush_secs=0.0)
    b, b_calls = instance(client, clock, refresh_secs=1.0)
    a.record("t", 100.0, clock.now())
    assert b.figures(clock.now())["t"].samples == 1
    a.record("t", 100.0, clock.now())
    for _ in range(9):
        clock.advance(0.1)
        assert b.figures(clock.now())["t"].samples == 1
    clock.advance(0.2)
    assert b.figures(clock.now())["t"].samples == 2
    assert b_calls.calls == {"BatchGetItem": 2, "Query": 1}  # the overrides once


def test_own_samples_count_at_once_and_never_twice(client: Any, clock: FakeClock) -> None:
    a, _ = instance(client, clock, flush_secs=5.0, refresh_secs=1.0)
    b, _ = instance(client, clock, flush_secs=5.0)
    fig = a.record("t", 100.0, clock.now())
    assert fig is not None and (fig.ms, fig.samples) == (100.0, 1)
    assert a.figures(clock.now())["t"].samples == 1
    assert "t" not in b.figures(clock.now())  # not flushed yet
    clock.advance(5.0)
    a.record("t", 300.0, clock.now())  # flushes both
    assert a.figures(clock.now())["t"].samples == 2
    clock.advance(1.0)
    assert a.figures(clock.now())["t"].samples == 2  # re-read from the store: still 2
    assert b.figures(clock.now())["t"].samples == 2
    assert b.figures(clock.now())["t"].ms == pytest.approx(200.0)


def test_buckets_older_than_max_age_are_left_out(client: Any, clock: FakeClock) -> None:
    a, _ = instance(client, clock, flush_secs=0.0, max_age_secs=120)
    a.record("old", 100.0, clock.now())
    clock.advance(60)
    a.record("t", 100.0, clock.now())
    clock.advance(121)
    assert set(a.figures(clock.now())) == {"t"}
    clock.advance(60)
    assert a.figures(clock.now()) == {}


def test_flush_on_shutdown_writes_what_is_pending(client: Any, clock: FakeClock) -> None:
    a, calls = instance(client, clock, flush_secs=60.0)
    a.record("t", 100.0, clock.now())
    a.flush()
    assert calls.calls == {"UpdateItem": 1}
    b, _ = instance(client, clock)
    assert b.figures(clock.now())["t"].samples == 1


def test_a_failed_flush_keeps_the_samples(client: Any, clock: FakeClock,
                                          caplog: pytest.LogCaptureFixture) -> None:
    failing = Failing(client, times=4, operations=frozenset({"UpdateItem"}))
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=failing)
    a = SharedLatency(store, clock, flush_secs=5.0)
    a.record("t", 100.0, clock.now())
    with caplog.at_level(logging.WARNING, logger="humpyard.latency"):
        a.flush()  # four throttled attempts: StoreError, kept
    assert "latency flush failed" in caplog.text
    assert a.figures(clock.now())["t"].samples == 1
    a.flush()
    clock.advance(1.0)
    assert a.figures(clock.now())["t"].samples == 1
    assert store.get_latency(0) == {"t": [(int(T0 // 60), 1, 100.0)]}


def test_a_flush_the_store_fails_tries_one_bucket_and_says_so_once(
        client: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """Before: every pending bucket was tried (each through the store's retries) and a
    warning written for each, every flush of an outage."""
    failing = Failing(client, times=10**9, operations=frozenset({"UpdateItem"}))
    counted = CallCounter(failing)
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=counted)
    a = SharedLatency(store, clock, flush_secs=5.0, auto_flush=False)
    for _ in range(3):  # three buckets of a minute
        a.record("t", 100.0, clock.now())
        clock.advance(60.0)
    with caplog.at_level(logging.WARNING, logger="humpyard.latency"):
        a.flush()
    said = [r.getMessage() for r in caplog.records if r.name == "humpyard.latency"]
    assert len(said) == 1 and said[0].startswith("latency flush failed"), said
    assert counted.calls["UpdateItem"] == 4  # one bucket, through the store's attempts
    failing.remaining = 0
    a.flush()
    assert [c for _, c, _ in store.get_latency(0)["t"]] == [1, 1, 1]

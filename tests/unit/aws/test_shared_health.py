"""``SharedHealth`` on a DynamoDB store: several instances, one set of breakers."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.health.book import HealthState
from humpyard.health.breaker import HealthSettings
from humpyard.health.shared import SharedHealth
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter, count_calls
from tests.support.polling import until
from tests.unit.aws.moto_support import LEDGER, STATE, Gated

S = HealthSettings()  # threshold 3, cooldown 30 s
EP = "local/m"


def instance(client: Any, clock: FakeClock, refresh_secs: float = 1.0
             ) -> tuple[SharedHealth, CallCounter]:
    """One gateway instance: its own store object and counted client on the shared tables."""
    counter = count_calls(client)
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=counter)
    return SharedHealth(store, S, clock, refresh_secs), counter


def trip(health: SharedHealth, now: float) -> None:
    for _ in range(S.failure_threshold):
        health.record_failure(EP, now)


def test_it_is_a_health_state(client: Any, clock: FakeClock) -> None:
    health: HealthState = instance(client, clock)[0]
    assert health.view(EP, clock.now()).state == "healthy"


def test_a_trip_is_honoured_by_another_instance_after_its_refresh(client: Any,
                                                                  clock: FakeClock) -> None:
    a, _ = instance(client, clock)
    b, b_calls = instance(client, clock)
    assert b.view(EP, clock.now()).state == "healthy"  # b's snapshot, read now
    trip(a, clock.now())
    assert a.view(EP, clock.now()).state == "cooling_down"
    assert b.view(EP, clock.now()).state == "healthy"  # within b's refresh
    clock.advance(1.0)
    seen = b.view(EP, clock.now())
    assert (seen.state, seen.cold, seen.consecutive_failures) == ("cooling_down", True, 3)
    # two refreshes (one read each: the instance's whole shared state, and at the first the
    # overrides, once per instance), and not one failed call of its own
    assert b_calls.calls == {"BatchGetItem": 2, "Query": 1}


def test_warm_reads_cost_nothing(client: Any, clock: FakeClock) -> None:
    a, calls = instance(client, clock)
    a.snapshot(clock.now())
    calls.reset()
    for _ in range(50):
        a.view(EP, clock.now())
        a.snapshot(clock.now())
        clock.advance(0.01)
    assert calls.total == 0


def test_a_success_that_changes_nothing_writes_nothing(client: Any, clock: FakeClock) -> None:
    a, calls = instance(client, clock)
    a.snapshot(clock.now())
    calls.reset()
    for _ in range(10):
        assert a.record_success(EP, clock.now()).version == 0
        assert a.try_acquire_probe(EP, clock.now()) is True  # closed: no probe needed
        a.release_probe(EP, clock.now())
    assert calls.total == 0


def test_exactly_one_instance_wins_the_probe(client: Any, clock: FakeClock) -> None:
    instances = [instance(client, clock)[0] for _ in range(6)]
    for i in instances:
        i.snapshot(clock.now())
    trip(instances[0], clock.now())
    clock.advance(S.cooldown_secs + 1)
    for i in instances:
        assert i.view(EP, clock.now()).state == "probing"
    wins = [i.try_acquire_probe(EP, clock.now()) for i in instances]
    assert wins.count(True) == 1
    # The winner's lease is now in everyone's view without a read of their own.
    assert all(i.get(EP).probe_until > clock.now() for i in instances)


def test_exactly_one_of_concurrent_probes_wins(client: Any, clock: FakeClock) -> None:
    for round_ in range(5):
        key = f"local/m{round_}"
        instances = [instance(client, clock)[0] for _ in range(4)]
        for _ in range(S.failure_threshold):
            instances[0].record_failure(key, clock.now())
        clock.advance(S.cooldown_secs + 1)
        barrier = threading.Barrier(len(instances))
        wins: list[bool] = []

        def probe(h: SharedHealth, key: str = key, wins: list[bool] = wins,
                  barrier: threading.Barrier = barrier) -> None:
            h.view(key, clock.now())
            barrier.wait()
            wins.append(h.try_acquire_probe(key, clock.now()))

        threads = [threading.Thread(target=probe, args=(h,)) for h in instances]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(wins) == [False, False, False, True]


def test_a_conflict_reapplies_the_transition_to_the_current_state(client: Any,
                                                                   clock: FakeClock) -> None:
    a, _ = instance(client, clock)
    b, b_calls = instance(client, clock)
    a.snapshot(clock.now())
    b.snapshot(clock.now())
    b_calls.reset()
    a.record_failure(EP, clock.now())
    state = b.record_failure(EP, clock.now())  # b still thinks the endpoint was never seen
    assert (state.consecutive_failures, state.version) == (2, 2)
    assert b_calls.calls == {"UpdateItem": 2}  # the loser learned the state from its refusal
    state = a.record_failure(EP, clock.now())
    assert (state.consecutive_failures, state.open_until) == (3, clock.now() + 30)


def test_failures_while_cooling_down_write_nothing(client: Any, clock: FakeClock) -> None:
    a, a_calls = instance(client, clock)
    stale = [instance(client, clock) for _ in range(20)]
    for h, _ in stale:
        h.snapshot(clock.now())  # taken before the trip: each still sees the endpoint healthy
    trip(a, clock.now())
    a_calls.reset()
    for _ in range(10):
        a.record_failure(EP, clock.now())  # calls that started before the trip
    assert a_calls.calls == {}
    # twenty instances whose snapshot predates the trip, each failing three times: one
    # refused write each (which tells it of the cooldown), then nothing
    for h, calls in stale:
        calls.reset()
        for _ in range(3):
            h.record_failure(EP, clock.now())
        assert calls.calls == {"UpdateItem": 1}
        assert h.view(EP, clock.now()).state == "cooling_down"
    # the probe's failure reopens: a transition, written
    clock.advance(S.cooldown_secs + 1)
    a_calls.reset()
    assert a.try_acquire_probe(EP, clock.now())
    reopened = a.record_failure(EP, clock.now())
    assert reopened.trips == 2 and reopened.open_until == clock.now() + 2 * S.cooldown_secs
    assert a_calls.calls["UpdateItem"] == 2  # the lease, then the reopening


def test_cooldowns_only_extend_across_instances(client: Any, clock: FakeClock) -> None:
    a, _ = instance(client, clock)
    b, b_calls = instance(client, clock)
    a.snapshot(clock.now())
    b.snapshot(clock.now())
    now = clock.now()
    a.record_failure(EP, now, retry_after=120)
    b_calls.reset()
    state = b.record_failure(EP, now, retry_after=10)  # shorter: loses, then changes nothing
    assert state.open_until == now + 120
    assert b_calls.calls == {"UpdateItem": 1}
    clock.advance(1.0)
    assert b.view(EP, clock.now()).cooldown_remaining_ms == 119_000


def test_a_recovery_is_written_once_and_seen_everywhere(client: Any, clock: FakeClock,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    a, a_calls = instance(client, clock)
    b, _ = instance(client, clock)
    with caplog.at_level(logging.INFO, logger="humpyard.health"):
        trip(a, clock.now())
        clock.advance(S.cooldown_secs + 1)
        assert a.try_acquire_probe(EP, clock.now())
        a_calls.reset()
        a.record_success(EP, clock.now())
        a.record_success(EP, clock.now())
    assert a_calls.calls == {"UpdateItem": 1}
    messages = [r.getMessage() for r in caplog.records]
    assert sum("endpoint is failing; skipping it for the cooldown" in m for m in messages) == 1
    assert sum(m.startswith("endpoint recovered") for m in messages) == 1
    clock.advance(1.0)
    assert b.view(EP, clock.now()).state == "healthy"


def test_a_failing_store_keeps_health_in_the_instance(client: Any, clock: FakeClock,
                                                      caplog: pytest.LogCaptureFixture
                                                      ) -> None:
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=client)
    health = SharedHealth(store, S, clock, 1.0)
    store.close()  # every call now raises StoreError
    with caplog.at_level(logging.WARNING):
        trip(health, clock.now())
        assert health.view(EP, clock.now()).state == "cooling_down"
        clock.advance(5)
        assert health.view(EP, clock.now()).state == "cooling_down"
    assert any("keeping it in this instance only" in r.getMessage() for r in caplog.records)
    assert any("shared state could not be read" in r.getMessage() for r in caplog.records)


def test_queued_transitions_are_seen_at_once_and_written_in_order(client: Any,
                                                                  clock: FakeClock) -> None:
    """``queued`` (what the Gateway builds): a transition is this instance's at once and
    written on the writes' thread, in order; the probe lease is awaited, and decided
    by the store."""
    counter = count_calls(client)
    a = SharedHealth(DynamoDBStore(STATE, LEDGER, clock=clock, client=counter), S, clock,
                     1.0, queued=True)
    b, _ = instance(client, clock)
    try:
        a.snapshot(clock.now())
        b.snapshot(clock.now())
        trip(a, clock.now())
        assert a.view(EP, clock.now()).state == "cooling_down"  # before any write landed
        assert a.flush(10)
        assert counter.calls["UpdateItem"] == S.failure_threshold  # one write per failure
        clock.advance(1.0)
        seen = b.view(EP, clock.now())
        assert (seen.state, seen.consecutive_failures) == ("cooling_down", 3)
        clock.advance(S.cooldown_secs)
        assert asyncio.run(a.acquire_probe(EP, clock.now())) is True
        assert b.try_acquire_probe(EP, clock.now()) is False  # the lease is in the table
        a.record_success(EP, clock.now())
        assert a.view(EP, clock.now()).state == "healthy"
    finally:
        a.close()  # writes what is queued
    clock.advance(1.0)
    assert b.view(EP, clock.now()).state == "healthy"


def test_a_queued_write_that_lands_never_takes_back_a_later_transition(
        client: Any, clock: FakeClock) -> None:
    """Three failures trip the breaker at once in this instance; their writes land one
    by one afterwards. Before: the first write to land put back what it had written
    (one failure, healthy) until the third landed, so for that while the instance sent
    requests to the endpoint it had just taken out (seen once in a loaded test run)."""
    gate = Gated(client, frozenset({"UpdateItem"}))
    a = SharedHealth(DynamoDBStore(STATE, LEDGER, clock=clock, client=gate), S, clock,
                     1.0, queued=True)
    try:
        a.snapshot(clock.now())
        trip(a, clock.now())
        assert a.view(EP, clock.now()).state == "cooling_down"
        for landed in range(1, S.failure_threshold + 1):
            gate.let()
            until(lambda n=landed: gate.landed == n, f"write {landed} to land")
            seen = a.view(EP, clock.now())
            assert (seen.state, seen.consecutive_failures) == ("cooling_down", 3), landed
        assert a.flush(10)
    finally:
        gate.let(10)
        a.close()
    b, _ = instance(client, clock)
    assert b.view(EP, clock.now()).state == "cooling_down"

"""``SharedState``: the whole shared state in one read, refreshed off the request's path.

The store is the seam: ``DynamoDBStore`` on moto for what one read brings
back, and ``GatedStore`` (a ``SharedStateReader`` whose reads wait for the
test) to see a request served while a refresh is in flight.
"""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any

import pytest

from humpyard.clock import FakeClock
from humpyard.errors import StoreError
from humpyard.planning.types import Override
from humpyard.shared_state import SharedState, state_for
from humpyard.store.dynamodb import DynamoDBStore
from humpyard.store.dynamodb_calls import CallCounter
from humpyard.store.memory import MemoryStore
from humpyard.store.sharing import SharedRead, SharedRequest
from tests.support.polling import until
from tests.unit.aws.moto_support import LEDGER, STATE

T0 = 1_800_000_000.0


def override(subject: str, expires_in: float = 3600) -> Override:
    return Override(id="", kind="disable_target", subject=subject, target=None, reason="r",
                    created_at=T0, expires_at=T0 + expires_in, created_by=None)


class GatedStore:
    """A ``SharedStateReader`` whose reads wait until ``release`` (or fail when told)."""

    def __init__(self) -> None:
        self.requests: list[SharedRequest] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail = False
        self.breakers: dict[str, dict[str, Any]] = {}

    def read_shared(self, request: SharedRequest) -> SharedRead:
        self.requests.append(request)
        self.entered.set()
        self.gate.wait(10)
        if self.fail:
            raise StoreError("dynamodb batch_get_item failed: ThrottlingException")
        return SharedRead(breakers=dict(self.breakers),
                          spend={k: 1.0 * len(self.requests) for k in request.spend},
                          latency={}, overrides_version=0,
                          overrides=None if request.overrides_version == 0 else [])


def test_one_read_brings_breakers_overrides_spend_and_latency(store: DynamoDBStore,
                                                              counted: CallCounter,
                                                              clock: FakeClock) -> None:
    store.put_breaker("p/m", {"consecutive_failures": 2, "version": 1}, None)
    store.create_override(override("deep"))
    store.add_spend("ci", "day:2027-01-15", 1.25)
    store.add_latency({"fast": (2, 300.0)}, int(T0 // 60))
    state = SharedState(store, clock, 1.0)
    state.want_latency(bucket_secs=60, max_age_secs=600, refresh_secs=5.0)
    counted.reset()

    view = state.current(spend={"ci": "day:2027-01-15"})
    assert counted.delta() == {"BatchGetItem": 1, "Query": 1}  # the overrides: first read
    assert view.breakers == {"p/m": {"consecutive_failures": 2, "version": 1}}
    assert [o.subject for o in view.overrides] == ["deep"]
    assert state.spend(view, {"ci": "day:2027-01-15"}) == {"ci": 1.25}
    assert view.latency == {"fast": {int(T0 // 60): (2, 300.0)}}

    clock.advance(1.0)
    assert state.current().generation == view.generation + 1
    assert counted.delta() == {"BatchGetItem": 1}  # overrides unchanged: not listed again
    store.create_override(override("other"))
    counted.reset()
    clock.advance(1.0)
    assert [o.subject for o in state.current().overrides] == ["deep", "other"]
    assert counted.delta() == {"BatchGetItem": 1, "Query": 1}
    store.delete_override("1", by=None, now=T0)
    clock.advance(1.0)
    assert [o.subject for o in state.current().overrides] == ["other"]


def test_a_fresh_view_costs_nothing(clock: FakeClock) -> None:
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    state.current(ahead=True)
    for _ in range(40):
        clock.advance(0.01)
        state.current(ahead=True)
    assert len(gated.requests) == 1


def test_past_half_its_age_a_view_is_served_while_one_refresh_runs(clock: FakeClock) -> None:
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    first = state.current(ahead=True)
    gated.gate.clear()
    gated.entered.clear()
    clock.advance(0.6)
    assert state.current(ahead=True) is first  # not waiting for the read it started
    assert gated.entered.wait(10)
    clock.advance(0.1)
    assert state.current(ahead=True) is first  # one refresh in flight, not two
    assert len(gated.requests) == 2
    gated.gate.set()
    until(lambda: state.current().generation == first.generation + 1)
    assert len(gated.requests) == 2


def test_only_the_planners_call_reads_ahead(clock: FakeClock) -> None:
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    first = state.current()
    clock.advance(0.9)
    assert state.current() is first and state.peek() is first
    assert len(gated.requests) == 1


def test_a_view_as_old_as_the_refresh_is_not_served(clock: FakeClock) -> None:
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    first = state.current(ahead=True)
    gated.gate.clear()
    clock.advance(1.0)
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(state.current(ahead=True)))
    waiter.start()
    assert gated.entered.wait(10)
    waiter.join(0.05)
    assert waiter.is_alive() and got == []  # waits for the read
    gated.gate.set()
    waiter.join(10)
    assert got[0].generation == first.generation + 1


def test_an_invalidated_view_waits_for_a_read_that_began_after(clock: FakeClock) -> None:
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    first = state.current()
    state.invalidate()
    assert state.peek() is None
    assert state.current().generation == first.generation + 1
    assert len(gated.requests) == 2


def test_a_failed_read_keeps_the_view_for_another_refresh(clock: FakeClock,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    gated = GatedStore()
    gated.breakers = {"p/m": {"version": 3}}
    state = SharedState(gated, clock, 1.0)
    state.current()
    gated.fail = True
    clock.advance(1.0)
    assert state.current().breakers == {"p/m": {"version": 3}}
    assert "shared state could not be read" in caplog.text
    clock.advance(0.5)
    state.current()
    assert len(gated.requests) == 2  # not retried on every request
    gated.fail = False
    clock.advance(0.5)
    state.current()
    assert len(gated.requests) == 3


def test_an_outage_is_logged_at_its_start_once_a_minute_and_at_its_end(
        clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """Before: a line per failed read, every half ``state_refresh_ms`` (125 lines in
    30 s of ``serve`` against tables that refused every connection)."""
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    state.current()
    gated.fail = True

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "humpyard.state"]

    for _ in range(90):  # 90 s of failed reads, one a second
        clock.advance(1.0)
        state.current()
    assert len(gated.requests) == 91
    lines = said()
    assert len(lines) == 2, lines
    assert lines[0].startswith("shared state could not be read (1 time(s)")
    assert lines[1].startswith("shared state could not be read (60 time(s)")
    assert "ThrottlingException" in lines[1]
    gated.fail = False
    clock.advance(1.0)
    state.current()
    assert said()[-1] == "shared state read again after 90 failed reads"
    gated.fail = True  # the next outage is said at once
    clock.advance(1.0)
    state.current()
    assert said()[-1].startswith("shared state could not be read (1 time(s)")


def test_own_spend_counts_through_an_outage_in_constant_room(clock: FakeClock) -> None:
    """Before: a failed read moved the view's mark of "spend read up to here", so what
    this instance had spent since the last good read stopped counting (a budget could
    be passed by it), while every request's spend stayed in a list no failed read
    trimmed (memory and a sum per request growing for as long as the outage)."""
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    periods = {"k": "day:x"}
    view = state.current(spend=periods)
    assert state.spend(view, periods) == {"k": 1.0}  # what the first read says
    state.note_spend("k", "day:x", 2.0)
    gated.fail = True
    clock.advance(1.0)
    view = state.current(spend=periods)  # a failed read: the last view is kept
    assert state.spend(view, periods) == {"k": 3.0}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(100_000):
            state.note_spend("k", "day:x", 0.001)
        grew = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grew < 100_000, f"{grew} bytes for 100,000 requests' spend"
    clock.advance(1.0)
    view = state.current(spend=periods)  # failed again
    assert state.spend(view, periods)["k"] == pytest.approx(3.0 + 100)
    gated.fail = False
    clock.advance(1.0)
    view = state.current(spend=periods)  # the store's total now holds what was written
    assert state.spend(view, periods) == {"k": 4.0}


@pytest.mark.parametrize("fails", [False, True])
def test_spend_noted_while_a_read_is_in_flight_is_kept_past_it(clock: FakeClock,
                                                               fails: bool) -> None:
    """Spend noted before a read began is the read's to bring back (the store has it, or
    the process's own count floors it); spend noted while it is in flight is not, so
    it still counts after the read. A failed read brings nothing back: both count."""
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    periods = {"k": "day:x"}
    view = state.current(spend=periods)  # the first read: 1.0
    state.note_spend("k", "day:x", 0.5)  # before the next read begins
    gated.gate.clear()
    gated.entered.clear()
    gated.fail = fails
    reading = threading.Thread(target=state.refresh)
    reading.start()
    assert gated.entered.wait(5)
    state.note_spend("k", "day:x", 2.0)  # while it is in flight
    gated.gate.set()
    reading.join(5)
    view = state.peek()
    assert view is not None
    if fails:  # the last good read's 1.0, and all that was noted since
        assert state.spend(view, periods) == {"k": 3.5}
    else:  # the second read's 2.0 (it holds the 0.5), and the 2.0 noted during it
        assert state.spend(view, periods) == {"k": 4.0}


def test_a_first_read_that_fails_gives_an_empty_view(clock: FakeClock) -> None:
    gated = GatedStore()
    gated.fail = True
    view = SharedState(gated, clock, 1.0).current()
    assert (view.breakers, view.overrides, view.spend) == ({}, (), {})


def test_own_spend_counts_at_once_and_once(clock: FakeClock) -> None:
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    periods = {"ci": "day:x"}
    view = state.current(spend=periods)  # the first read already names the key
    assert state.spend(view, periods) == {"ci": 1.0}
    state.note_spend("ci", "day:x", 0.5)
    state.note_spend("ci", "day:y", 9.0)  # another period: not this budget's
    assert state.spend(view, periods) == {"ci": 1.5}
    clock.advance(1.0)
    view = state.current(spend=periods)  # this read began after the add: it holds it
    assert state.spend(view, periods) == {"ci": 2.0}


def test_a_new_budget_period_is_read_ahead(clock: FakeClock) -> None:
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    state.current(spend={"ci": "day:x"})
    view = state.current(spend={"ci": "day:y"}, ahead=True)  # the day turned
    assert state.spend(view, {"ci": "day:y"}) == {"ci": 0.0}
    until(lambda: len(gated.requests) == 2)
    assert gated.requests[-1].spend == {"ci": "day:y"}


def test_latency_is_read_whole_once_then_the_newest_buckets(clock: FakeClock) -> None:
    gated = GatedStore()
    state = SharedState(gated, clock, 1.0)
    state.want_latency(bucket_secs=60, max_age_secs=600, refresh_secs=5.0)
    state.current()
    now = int(T0 // 60)
    assert gated.requests[0].latency_buckets == tuple(range(now - 10, now + 1))
    clock.advance(1.0)
    state.current()
    assert gated.requests[1].latency_buckets == ()  # not due
    clock.advance(4.0)
    state.current()
    assert gated.requests[2].latency_buckets == (now - 1, now)


def test_each_store_has_one_shared_state(client: Any, clock: FakeClock) -> None:
    store = DynamoDBStore(STATE, LEDGER, clock=clock, client=client)
    assert state_for(store, clock) is state_for(store, clock) is not None
    assert state_for(DynamoDBStore(STATE, LEDGER, clock=clock, client=client),
                     clock) is not state_for(store, clock)
    assert state_for(MemoryStore(), clock) is None

"""The SQLite file of ``serve --workers N`` through ``SharedState``: one read brings
breakers, spend, latency and overrides back, and an old view is served while a
thread re-reads it (``stale_ok``), so a request never waits for the file.

Two ``SharedSQLiteStore`` objects on one file stand for two workers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from humpyard.clock import FakeClock
from humpyard.planning.types import Override
from humpyard.refresh_thread import RefreshThread
from humpyard.shared_state import SharedState, state_for
from humpyard.store.base import LedgerBatch
from humpyard.store.sqlite import SharedSQLiteStore
from tests.support.polling import until

T0 = 1_800_000_000.0


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[SharedSQLiteStore, SharedSQLiteStore, FakeClock]]:
    clock = FakeClock(T0)
    a = SharedSQLiteStore(str(tmp_path / "h.db"), clock)
    b = SharedSQLiteStore(str(tmp_path / "h.db"), clock)
    try:
        yield a, b, clock
    finally:
        a.close()
        b.close()


def test_one_read_sees_what_another_process_wrote(pair):
    a, b, clock = pair
    assert a.put_breaker("p/m", {"version": 1, "open_until": T0 + 30}, None) == (
        True, {"version": 1, "open_until": T0 + 30})
    a.write_batch(LedgerBatch(spend={("dev", "2027-01-15"): 0.25}))
    bucket = int(T0 // 60)
    a.add_latency({"t": (2, 300.0)}, bucket)
    a.add_latency({"t": (1, 100.0)}, bucket)
    a.create_override(Override(id="", kind="disable_target", subject="t", target=None,
                               reason="r", created_at=T0, expires_at=T0 + 60,
                               created_by=None))
    view = SharedState(b, clock).current(spend={"dev": "2027-01-15"})
    assert view.breakers == {"p/m": {"version": 1, "open_until": T0 + 30}}
    assert [o.subject for o in view.overrides] == ["t"]
    state = state_for(b, clock)
    assert state is not None and state.stale_ok
    state.want_latency(bucket_secs=60, max_age_secs=600, refresh_secs=0)
    got = state.current(spend={"dev": "2027-01-15"})
    assert got.spend == {("dev", "2027-01-15"): 0.25}
    assert got.latency == {"t": {bucket: (3, 400.0)}}


def test_the_probe_lease_is_a_compare_and_set_in_the_file(pair):
    a, b, _ = pair
    assert a.put_breaker("p/m", {"version": 1}, None)[0]
    won, current = b.put_breaker("p/m", {"version": 2, "probe": "b"}, None)
    assert not won and current == {"version": 1}
    assert b.put_breaker("p/m", {"version": 2, "probe": "b"}, 1)[0]
    won, current = a.put_breaker("p/m", {"version": 2, "probe": "a"}, 1)
    assert not won and current == {"version": 2, "probe": "b"}
    a.reset_live()
    assert b.get_breakers() == {}


def test_an_old_view_is_served_while_a_thread_reads(pair):
    a, b, clock = pair
    started: list[Callable[[], None]] = []
    state = SharedState(b, clock, refresh_secs=1.0, background=started.append, stale_ok=True)
    first = state.current()
    assert first.breakers == {}
    a.put_breaker("p/m", {"version": 1}, None)
    clock.advance(30)  # far past refresh_secs: a DynamoDB view would be waited for
    assert state.current() is first  # served as it is, no read on the caller's thread
    assert len(started) == 1
    done = threading.Thread(target=started[0])
    done.start()
    done.join(10)
    assert state.current().breakers == {"p/m": {"version": 1}}
    state.invalidate()  # only a missing view is waited for
    assert state.current().generation == first.generation + 2


def test_background_refreshes_share_one_thread_that_ends_when_idle(pair):
    """A refresh is handed to the state's own thread (a queue put, not a new thread
    per refresh, whose start waited for the scheduler); the thread ends after
    ``idle_secs`` without one, and the next refresh starts it again."""
    _, b, clock = pair
    runner = RefreshThread(idle_secs=1.0)  # longer than a loaded machine's stall
    state = SharedState(b, clock, refresh_secs=1.0, background=runner, stale_ok=True)
    state.current()  # the first read: waited for, in this thread
    assert state.reads == 1
    for n in range(2, 6):  # each past half its age: served, and re-read in the background
        clock.advance(0.6)
        state.current(ahead=True)
        until(lambda n=n: state.reads == n and state._inflight is None)
    assert runner.started == 1
    until(lambda: not runner.running)
    clock.advance(0.6)
    state.current(ahead=True)
    until(lambda: state.reads == 6)
    assert runner.started == 2


def test_closing_the_state_ends_its_refresh_thread(pair):
    _, b, clock = pair
    runner = RefreshThread(idle_secs=60.0)
    state = SharedState(b, clock, refresh_secs=1.0, background=runner, stale_ok=True)
    state.current()
    clock.advance(0.6)
    state.current(ahead=True)
    until(lambda: state.reads == 2)
    assert runner.running
    state.close()
    until(lambda: not runner.running)

"""``workers.give_back``: what a dead worker held in the shared SQLite file goes at once.

The two-process case (a worker killed with SIGKILL while its request holds the
key's only slot) is ``tests/durability/test_workers.py``; here the rows of one
instance go and another's stay, and a file that cannot be opened is logged,
never raised (the rows then expire as any dead instance's do).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from humpyard.clock import FakeClock
from humpyard.health.breaker import (
    BreakerState,
    HealthSettings,
    record_failure,
    try_acquire_probe,
)
from humpyard.health.shared import SharedHealth
from humpyard.store.sqlite import SharedSQLiteStore
from humpyard.worker_state import give_back


def test_the_dead_instances_rows_go_and_the_living_ones_stay(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture):
    path = str(tmp_path / "ledger.db")
    clock = FakeClock(1_800_000_000.0)
    store = SharedSQLiteStore(path, clock)
    now = clock.now()
    for instance in ("w0-dead", "w1-alive"):
        store.take_limits("k", instance, window=now - now % 60, rpm=None, tpm=None,
                          parallel=4, tokens=0, now=now, expires_at=now + 120)
        store.lease_budget("k", "2027-01", instance, limit=10.0, spent=0.0, held=0.0,
                           want=1.0, now=now, expires_at=now + 120)
    assert store.limit_counts("k", window=now - now % 60, now=now).in_flight == 2
    with caplog.at_level(logging.WARNING, logger="humpyard.workers"):
        give_back(path, "w0-dead")
    assert store.limit_counts("k", window=now - now % 60, now=now).in_flight == 1
    assert ("gave back instance w0-dead's 1 budget lease(s), 1 limit slot row(s) and 0 "
            "probe lease(s)") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="humpyard.workers"):
        give_back(path, "w0-dead")  # nothing left: nothing said
    assert caplog.text == ""
    store.close()


def test_the_dead_instances_probe_lease_goes_and_a_living_ones_stays(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """Two half-open endpoints, each probed by one worker (``SharedHealth`` names its
    owner in the lease): the dead one's lease ends in the file, so the next request of
    any worker wins that probe at once rather than after ``probe_lease_secs``."""
    path = str(tmp_path / "ledger.db")
    clock = FakeClock(1_800_000_000.0)
    settings = HealthSettings(failure_threshold=1, cooldown_secs=1.0)
    store = SharedSQLiteStore(path, clock)

    def stored(key: str) -> BreakerState:
        return BreakerState.from_dict(store.get_breakers()[key])

    for owner, key in (("w0-dead", "p/a"), ("w1-alive", "p/b")):
        health = SharedHealth(store, settings, clock, 0.0, owner=owner)
        health.record_failure(key, clock.now())
        clock.advance(2.0)
        assert health.try_acquire_probe(key, clock.now())
        assert stored(key).probe_owner == owner
    assert not try_acquire_probe(stored("p/a"), settings, clock.now())[0]
    with caplog.at_level(logging.WARNING, logger="humpyard.workers"):
        give_back(path, "w0-dead")
    assert "0 limit slot row(s) and 1 probe lease(s)" in caplog.text
    assert stored("p/a").probe_until == 0 and stored("p/a").probe_owner == ""
    assert try_acquire_probe(stored("p/a"), settings, clock.now())[0]  # probed again now
    assert stored("p/b").probe_owner == "w1-alive"  # the living one's stays
    assert not try_acquire_probe(stored("p/b"), settings, clock.now())[0]
    store.close()


def test_a_lease_names_its_owner_and_a_verdict_clears_it():
    settings = HealthSettings(failure_threshold=1, cooldown_secs=1.0)
    tripped = record_failure(BreakerState(), settings, 0.0)
    won, leased = try_acquire_probe(tripped, settings, 2.0, "w0-a")
    assert won and leased.probe_owner == "w0-a"
    assert BreakerState.from_dict(leased.to_dict()) == leased
    assert "probe_owner" not in tripped.to_dict()  # one process's state is as it was
    assert record_failure(leased, settings, 2.5).probe_owner == ""


def test_a_file_that_cannot_be_opened_is_logged_not_raised(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING, logger="humpyard.workers"):
        give_back(str(tmp_path / "no-such-dir" / "ledger.db"), "w0-x")
    assert "could not give back what instance w0-x held" in caplog.text

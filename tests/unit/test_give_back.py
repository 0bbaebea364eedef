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
    assert "gave back instance w0-dead's 1 budget lease(s) and 1 limit slot row(s)" \
        in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="humpyard.workers"):
        give_back(path, "w0-dead")  # nothing left: nothing said
    assert caplog.text == ""
    store.close()


def test_a_file_that_cannot_be_opened_is_logged_not_raised(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING, logger="humpyard.workers"):
        give_back(str(tmp_path / "no-such-dir" / "ledger.db"), "w0-x")
    assert "could not give back what instance w0-x held" in caplog.text

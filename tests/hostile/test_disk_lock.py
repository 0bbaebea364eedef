"""Another process holding the ledger's write lock does not stall the gateway.

A plain ``sqlite3`` connection (what an operator's ``sqlite3 humpyard.db`` or a
backup tool is) takes the file's write lock with ``BEGIN IMMEDIATE`` and holds it
for ``HOLD_SECS`` while a probe sends chat requests to a real ``humpyard serve``
with a ``[ledger]``. The writer thread waits for the lock; the event loop must
not (before, the state refresh read the overrides on the loop through the
connection the waiting writer held, and every request stalled with it). Once
the lock is released, every answered request has its decision: nothing lost,
although the lock outlasts the writer's busy wait.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from tests.hostile.disk_support import count, served, wait_for
from tests.support.probe import Probe

HOLD_SECS = 6.0  # past SQLite's 5 s busy wait: the writer keeps its batch and retries


def hold_write_lock(db: Path, seconds: float, taken: threading.Event) -> None:
    conn = sqlite3.connect(db, isolation_level=None, timeout=10)
    try:
        conn.execute("BEGIN IMMEDIATE")
        taken.set()
        threading.Event().wait(seconds)
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_a_held_write_lock_stalls_no_request_and_loses_no_decision(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    with served(tmp_path) as server, Probe(server.url, "t") as probe:
        quiet = probe.measure(40)
        taken = threading.Event()
        holder = threading.Thread(target=hold_write_lock, args=(db, HOLD_SECS, taken))
        with probe.running():
            holder.start()
            assert taken.wait(10), "could not take the write lock"
            holder.join(HOLD_SECS + 10)
        answered = 5 + len(quiet.latencies) + len(probe.attacked.latencies)
        probe.assert_flat(quiet, min_samples=20)
        # Written once the lock is free: every answered request, none lost.
        wait_for(lambda: count(db, "status = 200") >= answered, 15, "the decisions")
        assert count(db, "status = 200") == answered
        log = server.output()
    assert "not written" not in log, log[-2000:]

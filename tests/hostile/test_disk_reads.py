"""Admin reads of a big ledger do not stall the gateway.

The ledger is filled with ``ROWS`` decisions by direct inserts into the store's
own schema (the file is created and migrated by ``SQLiteStore``), then several
clients poll a filtered ``/v1/decisions`` (two filters that each match half the
rows and together none, so SQLite walks half the table for an empty page) and
``/v1/stats`` while a probe sends chat requests. The reads run on connections
and a thread of their own, so the probe stays flat; before, each read ran on
the event loop after a blocking flush.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import httpx

from humpyard.clock import SystemClock
from humpyard.store.sqlite import SQLiteStore
from tests.hostile.disk_support import served
from tests.support.probe import Probe

ROWS = 200_000
POLLERS = 4
POLL_SECS = 4.0
NOW = 1_800_000_000.0


def fill(db: Path, rows: int) -> None:
    """``rows`` decisions, one a second back from ``NOW``, in one transaction: even ones
    route ``r0``, rule ``everyday``, outcome ``ok``; odd ones ``r1``, ``weekly``,
    ``failed``."""
    SQLiteStore(str(db), SystemClock()).close()  # create and migrate the file

    def decision(i: int) -> tuple[object, ...]:
        rid = f"req_{i:08d}"
        ts = NOW - i
        route, rule, outcome, status = (("r0", "everyday", "ok", 200) if i % 2 == 0
                                        else ("r1", "weekly", "failed", 502))
        body = json.dumps({"request_id": rid, "ts": ts, "route": route, "rule": rule,
                           "outcome": outcome, "status": status, "target": "t",
                           "provider": "p", "key_id": None, "latency_ms": 12.5,
                           "cost_usd": 0.0, "attempts": [], "notes": []})
        return (rid, ts, route, rule, outcome, None, status, "t", "p", 10, 12.5, 0.0, body)

    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO decisions (request_id, ts, route, rule, outcome, key_id, "
                         "status, target, provider, prompt_tokens, latency_ms, cost_usd, body) "
                         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         (decision(i) for i in range(rows)))
        conn.execute("COMMIT")


def poll(url: str, path: str, stop: threading.Event, answers: list[int]) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.is_set():
            answers.append(client.get(path).status_code)


def test_admin_reads_of_a_big_ledger_stall_no_request(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    with served(tmp_path, before_start=lambda: fill(db, ROWS)) as server, \
            Probe(server.url, "t") as probe:
        quiet = probe.measure(40)
        stop = threading.Event()
        answers: list[int] = []
        paths = ["/v1/decisions?route=r0&rule=weekly&limit=50",
                 "/v1/decisions?outcome=failed&rule=everyday&limit=1000",
                 "/v1/stats?group_by=target&window_secs=31536000",
                 "/v1/decisions?route=r1&outcome=ok"]
        pollers = [threading.Thread(target=poll, args=(server.url, paths[i % len(paths)],
                                                       stop, answers))
                   for i in range(POLLERS)]
        with probe.running():
            for t in pollers:
                t.start()
            stop.wait(POLL_SECS)
            stop.set()
            for t in pollers:
                t.join(60)
        assert answers and set(answers) == {200}, answers[:20]
        probe.assert_flat(quiet, min_samples=20)

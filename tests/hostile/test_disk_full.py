"""``humpyard serve`` whose ledger's disk fills up, and then has room again.

The child runs under a file size limit (``RLIMIT_FSIZE``, soft only): once
the ledger's write-ahead log reaches it, every write fails with an I/O error,
as on a full disk. The test keeps sending requests, then lifts the limit from
outside (``prlimit`` on the running process), as an operator frees space.
Requests are served all the while; what could not be written is written once
there is room, and nothing is counted lost or counted twice.
"""

from __future__ import annotations

import resource
import sqlite3
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess
from tests.support import FakeUpstream, ok
from tests.support.polling import until

LIMIT_BYTES = 1 << 20
"""The largest file the child may write: the ledger's WAL reaches it after a few
hundred requests (the log file stays far below it)."""
APP, OPS = "hk-app-disk-key", "hk-ops-disk-key"
DOLLAR = {"prompt_tokens": 1_000_000, "completion_tokens": 0, "total_tokens": 1_000_000}


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, resource.RLIM_INFINITY))


def _config(tmp: Path, upstream: str) -> Path:
    path = tmp / "humpyard.toml"
    path.write_text(f"""
[ledger]
path = "{tmp / 'ledger.db'}"
[providers.p]
base_url = "{upstream}"
[targets.t]
endpoints = [{{ provider = "p", model = "m", price = {{ input = 1.0, output = 2.0 }} }}]
[keys.app]
key_env = "APP_KEY"
budget = {{ usd = 1000000.0, period = "day" }}
[keys.ops]
key_env = "OPS_KEY"
admin = true
""")
    return path


def _metric(proc: ServeProcess, name: str) -> float:
    text = httpx.get(proc.url + "/metrics", timeout=10,
                     headers={"authorization": f"Bearer {OPS}"}).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def _stored(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {rid for (rid,) in con.execute("SELECT request_id FROM decisions")}
    finally:
        con.close()


def test_a_full_disk_loses_no_decision_and_counts_no_spend_twice(tmp_path: Path) -> None:
    """Before: each batch the disk refused was logged as not written and counted in
    ``humpyard_ledger_lost_total{reason="error"}``, spend with it (budgets then
    under-count); the writer never held anything for a retry."""
    with FakeUpstream() as upstream:
        upstream.default = ok("a dollar", usage=DOLLAR)  # $1 a request
        proc = ServeProcess(_config(tmp_path, upstream.url), tmp_path / "serve.log",
                            env={"APP_KEY": APP, "OPS_KEY": OPS},
                            preexec_fn=_limit_file_size).start()
        ids: list[str] = []
        try:
            with httpx.Client(timeout=30) as client:
                def chat() -> bool:
                    r = client.post(proc.url + "/v1/chat/completions",
                                    headers={"authorization": f"Bearer {APP}"},
                                    json={"model": "t",
                                          "messages": [{"role": "user", "content": "x" * 2000}]})
                    assert r.status_code == 200, r.text
                    ids.append(r.headers["x-humpyard-request-id"])
                    return "ledger write waiting" in proc.output()

                until(chat, "the disk to refuse a write", timeout=120, step=0)
                for _ in range(20):  # served while nothing can be written
                    chat()
                assert _metric(proc, "humpyard_ledger_queue_depth") > 0
                assert _metric(proc, "humpyard_ledger_lost_total") == 0

                resource.prlimit(proc.pid, resource.RLIMIT_FSIZE,
                                 (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                until(lambda: set(ids) <= _stored(tmp_path / "ledger.db"),
                      "every decision written once there is room", timeout=30)
                assert _metric(proc, "humpyard_ledger_lost_total") == 0
                until(lambda: _metric(proc, "humpyard_budget_spend_usd") >= len(ids),
                      f"the spend of all {len(ids)} requests counted", timeout=30)
                assert _metric(proc, "humpyard_budget_spend_usd") < len(ids) + 0.01
        finally:
            assert proc.stop() == 0
    log = proc.output()
    assert "ledger decision not written" not in log
    assert "ledger write done after" in log
    assert log.count("disk I/O error") == 2  # the cause named once by the writer, once
    assert "Traceback" not in log  # by the leases; not a traceback per request
    con = sqlite3.connect(tmp_path / "ledger.db")
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        con.close()

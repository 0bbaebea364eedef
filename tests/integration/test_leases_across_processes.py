"""Budgets and per-key limits hold across two ``humpyard serve`` processes on one SQLite file.

Issue 25's done-when: "each limit refuses exactly at its bound, single
process and across two instances sharing a store". Two real processes
(``ServeProcess``) share one ledger file; requests alternate between them
(or run concurrently on both). Before leases each process admitted up to
the whole budget and every limit on its own, so together they served twice
as much (docs/decisions/0016-budget-reservations.md, "Across instances").
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.durability.process import ServeProcess
from tests.support.fake_upstream import FakeUpstream
from tests.support.polling import until
from tests.support.steps import Delay, ok

ENV = {"DEV": "dev-secret", "ADMIN": "admin-secret"}
AUTH = {"authorization": "Bearer dev-secret"}
MSG = [{"role": "user", "content": "hi"}]
USAGE = {"prompt_tokens": 40, "completion_tokens": 40}  # $0.008 at $100 per million
COST = 0.008
BUDGET = 0.01


def cfg(upstream: str, ledger: Path, key: str) -> str:
    return f"""
state_refresh_ms = 100
[providers.paid]
base_url = "{upstream}"
[targets.paid]
endpoints = [{{ provider = "paid", model = "p", price = {{ input = 100.0, output = 100.0 }} }}]
[routes.r]
targets = ["paid"]
[health]
failure_threshold = 0
[keys.dev]
key_env = "DEV"
{key}
[keys.admin]
key_env = "ADMIN"
admin = true
[ledger]
path = "{ledger}"
"""


def body(max_tokens: int = 45) -> dict[str, Any]:
    return {"model": "r", "messages": MSG, "max_tokens": max_tokens}


@contextmanager
def two(tmp_path: Path, upstream: str, key: str) -> Iterator[tuple[ServeProcess, ServeProcess]]:
    config = tmp_path / "humpyard.toml"
    config.write_text(cfg(upstream, tmp_path / "ledger.db", key))
    with ServeProcess(config, tmp_path / "a.log", env=ENV) as a, \
            ServeProcess(config, tmp_path / "b.log", env=ENV) as b:
        yield a, b


def same_minute(room: float = 8.0) -> None:
    """Wait for a fresh clock minute when fewer than ``room`` seconds of this one are
    left, so a fixed-minute window does not turn during a test."""
    left = 60 - time.time() % 60
    if left < room:
        time.sleep(left + 0.05)


def limits(url: str) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=30, headers=AUTH) as c:
        r = c.post("/v1/route/explain", json={"model": "r"})
        assert r.status_code == 200, r.text
        return r.json()["limits"]  # type: ignore[no-any-return]


def ledger_spend(path: Path) -> float:
    with sqlite3.connect(path) as db:
        (total,) = db.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM decisions").fetchone()
    return float(total)


async def _burst(urls: list[str], n: int) -> list[httpx.Response]:
    clients = [httpx.AsyncClient(base_url=u, timeout=60, headers=AUTH,
                                 limits=httpx.Limits(max_connections=n)) for u in urls]
    try:
        return list(await asyncio.gather(*(clients[i % len(clients)].post(
            "/v1/chat/completions", json=body()) for i in range(n))))
    finally:
        for c in clients:
            await c.aclose()


def test_a_budget_holds_across_two_processes(tmp_path: Path) -> None:
    """30 concurrent $0.008 requests split over both processes against a $0.01 budget:
    exactly one is served (a second would need $0.016), the spend stays ≤ $0.02."""
    with FakeUpstream(default=Delay(0.3, ok("answer", usage=USAGE))) as paid:
        with two(tmp_path, paid.url, f'budget = {{ usd = {BUDGET}, period = "day" }}') as (a, b):
            answers = asyncio.run(_burst([a.url, b.url], 30))
            codes = sorted(r.status_code for r in answers)
            assert set(codes) <= {200, 429}, codes
            refused = [r for r in answers if r.status_code == 429]
            assert all(r.json()["error"]["code"] == "budget_exhausted" for r in refused)
            assert codes.count(200) == 1, codes
        # both processes stopped: every decision and the spend are in the file
        assert ledger_spend(tmp_path / "ledger.db") <= BUDGET + COST + 1e-9
        assert ledger_spend(tmp_path / "ledger.db") == COST
        assert len(paid.requests_to("/v1/chat/completions")) == 1
        with sqlite3.connect(tmp_path / "ledger.db") as db:
            (usd,) = db.execute("SELECT usd FROM spend WHERE key_id = 'dev'").fetchone()
            leases = db.execute("SELECT COUNT(*) FROM budget_leases").fetchone()[0]
        assert usd == COST
        assert leases == 0  # both gave their leases back at shutdown


def _alternate(a: ServeProcess, b: ServeProcess, n: int,
               after: Any = None) -> list[httpx.Response]:
    out = []
    with httpx.Client(base_url=a.url, timeout=30, headers=AUTH) as ca, \
            httpx.Client(base_url=b.url, timeout=30, headers=AUTH) as cb:
        for i in range(n):
            out.append((ca, cb)[i % 2].post("/v1/chat/completions", json=body()))
            if after is not None:
                after(i, out[-1])
    return out


def test_rpm_limit_refuses_the_sixth_request_on_either_process(tmp_path: Path) -> None:
    with FakeUpstream(default=ok("answer", usage=USAGE)) as up, \
            two(tmp_path, up.url, "rpm_limit = 5") as (a, b):
        same_minute()
        sent = _alternate(a, b, 7)
        assert [r.status_code for r in sent] == [200] * 5 + [429, 429]
        for r in sent[5:]:  # the 6th on b, the 7th on a
            assert r.json()["error"]["code"] == "rate_limit_exceeded"
            assert r.headers["x-ratelimit-remaining-requests"] == "0"
            assert r.headers["x-ratelimit-limit-requests"] == "5"
        assert [r.headers["x-ratelimit-remaining-requests"] for r in sent[:5]] == \
            ["4", "3", "2", "1", "0"]
        for proc in (a, b):  # explain shows the shared count on both
            assert limits(proc.url)["requests_remaining"] == 0
        with httpx.Client(base_url=a.url, timeout=30,
                          headers={"authorization": "Bearer admin-secret"}) as admin:
            refused = until(lambda: [d for d in admin.get(
                "/v1/decisions", params={"limit": 50}).json()["decisions"]
                if d["status"] == 429], "the refusals are recorded")
        assert all(d.get("limit") == "rpm_limit" for d in refused)


def test_tpm_limit_refuses_at_its_bound_across_processes(tmp_path: Path) -> None:
    """Each answer uses 80 tokens; a request may use its estimate (prompt + max_tokens).
    With tpm_limit = 250 three fit (240 used) and the fourth is refused on either."""
    with FakeUpstream(default=ok("answer", usage=USAGE)) as up, \
            two(tmp_path, up.url, "tpm_limit = 250") as (a, b):
        same_minute()
        procs = (a, b)

        def settled(i: int, r: httpx.Response) -> None:
            if r.status_code == 200:  # the other process sees the used tokens
                until(lambda: limits(procs[(i + 1) % 2].url)["tokens_remaining"]
                      == 250 - 80 * (i + 1), f"request {i} settled")

        sent = _alternate(a, b, 5, after=settled)
        assert [r.status_code for r in sent] == [200, 200, 200, 429, 429]
        for r in sent[3:]:
            assert r.json()["error"]["code"] == "rate_limit_exceeded"
            assert "tpm_limit is 250" in r.json()["error"]["message"]
            assert r.headers["x-ratelimit-remaining-tokens"] == "10"


def test_max_parallel_requests_holds_across_processes(tmp_path: Path) -> None:
    """Two slow requests in flight, one on each process: a third is refused on either;
    once they end, a request is served again."""
    with FakeUpstream(default=Delay(2.0, ok("answer", usage=USAGE))) as up, \
            two(tmp_path, up.url, "max_parallel_requests = 2") as (a, b):
        slow: list[httpx.Response] = []

        def send(url: str) -> None:
            with httpx.Client(base_url=url, timeout=30, headers=AUTH) as c:
                slow.append(c.post("/v1/chat/completions", json=body()))

        threads = [threading.Thread(target=send, args=(p.url,)) for p in (a, b)]
        for t in threads:
            t.start()
        until(lambda: limits(a.url)["in_flight"] == 2, "both in flight")
        for proc in (a, b):
            with httpx.Client(base_url=proc.url, timeout=30, headers=AUTH) as c:
                r = c.post("/v1/chat/completions", json=body())
            assert r.status_code == 429, r.text
            assert "max_parallel_requests is 2" in r.json()["error"]["message"]
        for t in threads:
            t.join()
        assert [r.status_code for r in slow] == [200, 200]
        until(lambda: limits(b.url)["in_flight"] == 0, "both slots given back")
        with httpx.Client(base_url=b.url, timeout=30, headers=AUTH) as c:
            assert c.post("/v1/chat/completions", json=body()).status_code == 200

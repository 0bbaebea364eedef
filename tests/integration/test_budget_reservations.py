"""Budgets hold under concurrency: each request reserves its worst case — over HTTP.

Issue 25: a key with a $0.01 daily budget sent 200 concurrent requests costing
$0.008 each, and all were served ($0.408). Now a request reserves its worst-case
cost (the prompt estimate and its ``max_tokens`` at the target's price) before
it is sent and settles to the real cost when it ends, so concurrent requests
never spend more than the budget plus what one request can cost.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from humpyard.planning.estimate import analyse_request
from tests.durability.process import ServeProcess
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway
from tests.support.steps import Delay, ok, status, stream_then_stall

ENV = {"DEV": "dev-secret", "ADMIN": "admin-secret"}
MSG = [{"role": "user", "content": "hi"}]
# $100 per million tokens both ways: 40 + 40 tokens cost $0.008.
USAGE = {"prompt_tokens": 40, "completion_tokens": 40}
COST = 0.008
BUDGET = 0.01


def cfg(paid: str, *, free: str | None = None, ledger: str = "") -> str:
    free_part = f"""
[providers.free]
base_url = "{free}"
[targets.free]
endpoints = [{{ provider = "free", model = "f" }}]
""" if free else ""
    targets = '["paid", "free"]' if free else '["paid"]'
    return f"""
[providers.paid]
base_url = "{paid}"
[targets.paid]
endpoints = [{{ provider = "paid", model = "p", price = {{ input = 100.0, output = 100.0 }} }}]
{free_part}
[routes.r]
targets = {targets}
[health]
failure_threshold = 0
[keys.dev]
key_env = "DEV"
budget = {{ usd = {BUDGET}, period = "day" }}
[keys.admin]
key_env = "ADMIN"
admin = true
{ledger}
"""


def body(max_tokens: int | None = 45) -> dict[str, Any]:
    b: dict[str, Any] = {"model": "r", "messages": MSG}
    if max_tokens is not None:
        b["max_tokens"] = max_tokens
    return b


async def _burst(url: str, n: int, key: str = "dev-secret") -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits,
                                 headers={"authorization": f"Bearer {key}"}) as c:
        return list(await asyncio.gather(*(c.post("/v1/chat/completions", json=body())
                                           for _ in range(n))))


def burst(url: str, n: int) -> list[httpx.Response]:
    return asyncio.run(_burst(url, n))


def spent(gw: Running) -> float:
    gw.recorded(0)
    return sum(d["cost_usd"] for d in gw.decisions(limit=1000))


def explain(url: str, key: str = "dev-secret", body: Any = None) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=30,
                      headers={"authorization": f"Bearer {key}"}) as c:
        r = c.post("/v1/route/explain", json=body or {"model": "r"})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("n", [30, 200])
def test_concurrent_requests_spend_at_most_the_budget_plus_one_request(n):
    """The Done-when: 30 (and 200) concurrent $0.008 requests against $0.01 spend ≤ $0.02."""
    with FakeUpstream(default=Delay(0.3, ok("answer", usage=USAGE))) as paid, \
            running_gateway(cfg(paid.url), env=ENV, admin_key="admin-secret") as gw:
        answers = burst(gw.url, n)
        served = [r for r in answers if r.status_code == 200]
        refused = [r for r in answers if r.status_code == 429]
        assert len(served) + len(refused) == n, {r.status_code for r in answers}
        gw.recorded(n)
        total = spent(gw)
        assert total <= BUDGET + COST + 1e-9, f"${total} spent of ${BUDGET}"
        assert len(served) == 1 and total == pytest.approx(COST)  # $0.002 left: nothing fits
        assert len(paid.requests_to("/v1/chat/completions")) == 1
        err = refused[0].json()["error"]
        assert err["code"] == "budget_exhausted" and err["type"] == "rate_limit_error"
        assert "the budget resets at" in err["message"]
        assert 0 < int(refused[0].headers["retry-after"]) <= 86400
        b = explain(gw.url)["budget"]
        assert b["spent_usd"] == pytest.approx(COST) and b["reserved_usd"] == 0
        assert b["left_usd"] == pytest.approx(BUDGET - COST)
        with httpx.Client(base_url=gw.url, timeout=30,
                          headers={"authorization": "Bearer dev-secret"}) as c:
            now = c.post("/v1/chat/completions", json=body())
        prompt = analyse_request(body()).high  # the request's own estimate
        e = explain(gw.url, body={"model": "r", "prompt_tokens": prompt, "max_tokens": 45})
        assert e["outcome"] == "budget_exhausted" and now.status_code == 429
        assert e["message"] == now.json()["error"]["message"]  # explain agrees


def test_a_refusal_for_want_of_room_says_what_was_spent_and_lists_the_removal():
    """Requests refused because the budget's room was reserved by requests in flight
    (planned on a spend of $0, refused when their own reservation failed) said "has
    spent $0.01 of $0.01" with nothing reserved, and their decisions listed no
    removal: they were planned again as if the key had spent its whole budget. They
    now say what was spent and what is held, and list the budget's removal."""
    with FakeUpstream(default=Delay(0.5, ok("answer", usage=USAGE))) as paid, \
            running_gateway(cfg(paid.url), env=ENV, admin_key="admin-secret") as gw:
        answers = burst(gw.url, 12)
        refused = [r for r in answers if r.status_code == 429]
        assert len(refused) == 11, [r.status_code for r in answers]
        for r in refused:  # the one served was in flight: nothing was spent yet
            message = r.json()["error"]["message"]
            assert "key 'dev' has spent $0.00 of $0.01 this day, $0.0" in message, message
            assert "is reserved by requests in flight, and this request may cost up to $" \
                in message, message
        gw.recorded(12)
        budget = [d for d in gw.decisions(limit=100) if d["outcome"] == "budget_exhausted"]
    assert len(budget) == 11
    assert all(d["policy_removed"] == [{"target": "paid", "reason": "budget_exhausted"}]
               for d in budget), budget[0]["policy_removed"]


def test_a_reservation_is_given_back_when_the_request_fails():
    """A failed request costs nothing: its reservation returns and the next one fits."""
    with FakeUpstream() as paid, \
            running_gateway(cfg(paid.url), env=ENV, admin_key="admin-secret") as gw:
        paid.script(status(500), ok("answer", usage=USAGE))
        with httpx.Client(base_url=gw.url, timeout=30,
                          headers={"authorization": "Bearer dev-secret"}) as c:
            assert c.post("/v1/chat/completions", json=body()).status_code == 500
            assert explain(gw.url)["budget"]["reserved_usd"] == 0
            assert c.post("/v1/chat/completions", json=body()).status_code == 200
            r = c.post("/v1/chat/completions", json=body())
            assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exhausted"


def test_a_worst_case_that_does_not_fit_substitutes_the_free_tier():
    """Tier substitution keeps working: the priced target is removed, the free one serves."""
    with FakeUpstream(default=ok("answer", usage=USAGE)) as paid, \
            FakeUpstream(default=ok("free", usage=USAGE)) as free, \
            running_gateway(cfg(paid.url, free=free.url), env=ENV,
                            admin_key="admin-secret") as gw, \
            httpx.Client(base_url=gw.url, timeout=30,
                         headers={"authorization": "Bearer dev-secret"}) as c:
        # 1,000 tokens may cost $0.1: never fits a $0.01 budget, so the free target answers
        r = c.post("/v1/chat/completions", json=body(max_tokens=1000))
        assert r.status_code == 200 and r.headers["x-humpyard-target"] == "free"
        r = c.post("/v1/chat/completions", json=body())
        assert r.status_code == 200 and r.headers["x-humpyard-target"] == "paid"
        gw.recorded(2)
        (d,) = [d for d in gw.decisions() if d["target"] == "free"]
        assert d["policy_removed"] == [{"target": "paid", "reason": "budget_exhausted"}]


def test_without_max_tokens_the_endpoint_output_limit_bounds_the_reservation():
    """No max_tokens: the endpoint's max_output_tokens is the worst case (else 4096)."""
    text = cfg("http://127.0.0.1:9/v1").replace(
        "output = 100.0 } }", "output = 100.0 }, max_output_tokens = 50 }")
    with FakeUpstream(default=ok("answer", usage=USAGE)) as paid, \
            running_gateway(text.replace("http://127.0.0.1:9/v1", paid.url), env=ENV,
                            admin_key="admin-secret") as gw, \
            httpx.Client(base_url=gw.url, timeout=30,
                         headers={"authorization": "Bearer dev-secret"}) as c:
        assert c.post("/v1/chat/completions", json=body(None)).status_code == 200
    with FakeUpstream(default=ok("answer", usage=USAGE)) as paid, \
            running_gateway(cfg(paid.url), env=ENV, admin_key="admin-secret") as gw, \
            httpx.Client(base_url=gw.url, timeout=30,
                         headers={"authorization": "Bearer dev-secret"}) as c:
        r = c.post("/v1/chat/completions", json=body(None))  # 4096 tokens may cost $0.41
        assert r.status_code == 429 and "may cost up to $0.41" in r.json()["error"]["message"]


def test_a_cancelled_stream_settles_its_reservation():
    """A client that leaves mid-stream: the reservation is given back exactly once."""
    with FakeUpstream(default=stream_then_stall(["a ", "b "])) as paid, \
            running_gateway(cfg(paid.url), env=ENV, admin_key="admin-secret") as gw:
        with httpx.Client(base_url=gw.url, timeout=30,
                          headers={"authorization": "Bearer dev-secret"}) as c, \
                c.stream("POST", "/v1/chat/completions",
                         json={**body(), "stream": True}) as r:
            assert r.status_code == 200
            chunks = r.iter_raw()
            next(chunks)
            assert explain(gw.url)["budget"]["reserved_usd"] > 0
        gw.recorded(1)
        assert explain(gw.url)["budget"]["reserved_usd"] == 0


def test_the_budget_survives_a_restart_with_a_sqlite_ledger(tmp_path: Path):
    with FakeUpstream(default=ok("answer", usage=USAGE)) as paid:
        config = tmp_path / "humpyard.toml"
        ledger = f'[ledger]\npath = "{tmp_path / "ledger.db"}"'
        config.write_text(cfg(paid.url, ledger=ledger))
        for round_ in range(2):
            with ServeProcess(config, tmp_path / f"serve{round_}.log", env=ENV) as proc:
                with httpx.Client(base_url=proc.url, timeout=30,
                                  headers={"authorization": "Bearer dev-secret"}) as c:
                    r = c.post("/v1/chat/completions", json=body())
                    # served before the restart; after it, the $0.008 spent is still there
                    assert r.status_code == (200 if round_ == 0 else 429), r.text
        assert len(paid.requests_to("/v1/chat/completions")) == 1


def test_two_processes_over_one_sqlite_ledger_see_each_others_spend(tmp_path: Path):
    """Across processes spend is shared through the store (re-read every
    state_refresh_ms): what one process spent refuses the other's next request.
    (Reservations themselves are per process: docs/routing.md, "Across processes".)"""
    with FakeUpstream(default=ok("answer", usage=USAGE)) as paid:
        config = tmp_path / "humpyard.toml"
        ledger = f'[ledger]\npath = "{tmp_path / "ledger.db"}"'
        config.write_text("state_refresh_ms = 100\n" + cfg(paid.url, ledger=ledger))
        with ServeProcess(config, tmp_path / "a.log", env=ENV) as a, \
                ServeProcess(config, tmp_path / "b.log", env=ENV) as b:
            auth = {"authorization": "Bearer dev-secret"}
            with httpx.Client(base_url=a.url, timeout=30, headers=auth) as ca, \
                    httpx.Client(base_url=b.url, timeout=30, headers=auth) as cb:
                assert ca.post("/v1/chat/completions", json=body()).status_code == 200
                deadline = time.monotonic() + 10
                while (left := cb.post("/v1/route/explain", json={"model": "r"}).json()[
                        "budget"]["left_usd"]) > BUDGET - COST + 1e-9:
                    assert time.monotonic() < deadline, left  # B re-reads A's spend
                    time.sleep(0.05)
                r = cb.post("/v1/chat/completions", json=body())
                assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exhausted"
        assert len(paid.requests_to("/v1/chat/completions")) == 1

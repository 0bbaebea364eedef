"""429 storms: many concurrent requests against an upstream that only says "slow down".

The endpoint cools (at once for a stated retry time, after ``failure_threshold``
failures otherwise), traffic moves to the other target and stays there while
the cooldown runs, the bystander route is unaffected, and no request waits
on anything: a 429 is answered at once, and the whole storm takes about as
long as its slowest upstream call.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx

from tests.faults.harness import MSG, attempts, drill
from tests.support.steps import status

STORM = 32
RETRY_AFTER = 30
BOUND = 10.0  # a hang would sit on a 30 s client timeout; the storms take 1-3 s


async def storm(url: str, routes: list[str], n: int) -> list[httpx.Response]:
    """``n`` concurrent requests per route, all in flight together."""
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        async def one(route: str) -> httpx.Response:
            return await client.post("/v1/chat/completions",
                                     json={"model": route, "messages": MSG})
        return await asyncio.gather(*(one(r) for r in routes for _ in range(n)))


def by_route(responses: list[httpx.Response]) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for r in responses:
        route = r.headers.get("x-humpyard-route", "?")
        out.setdefault(route, Counter())[(r.status_code, r.headers.get("x-humpyard-target"))] += 1
    return out


def test_storm_with_a_stated_time_cools_at_once_and_moves_traffic(ups):
    a, b, h = ups
    a.default = status(429, {"error": {"message": "rate limited"}},
                       headers={"Retry-After": str(RETRY_AFTER)})
    with drill(a, b, h, threshold=3, a_timeout=5) as d:
        started = time.monotonic()
        got = by_route(asyncio.run(storm(d.running.url, ["r", "ok"], STORM)))
        assert time.monotonic() - started < BOUND
        assert got == {"r": Counter({(200, "second"): STORM}),
                       "ok": Counter({(200, "other"): STORM})}
        view = d.health("a/ma")
        assert view.state == "cooling_down" and view.cooldown_source == "retry_after"
        assert (RETRY_AFTER - 10) * 1000 < view.cooldown_remaining_ms <= RETRY_AFTER * 1000
        assert d.health("b/mb").state == "healthy"

        called = len(a.requests)
        assert 1 <= called <= STORM
        limited = [dec for dec in d.running.decisions(route="r", limit=1000)
                   if attempts(dec) == [("first", "rate_limit"), ("second", None)]]
        assert len(limited) == called
        assert {dec["outcome"] for dec in limited} == {"ok"}
        assert {dec["attempts"][0]["retry_after_ms"] for dec in limited} == {RETRY_AFTER * 1000}

        got = by_route(asyncio.run(storm(d.running.url, ["r"], STORM)))
        assert got == {"r": Counter({(200, "second"): STORM})}
        assert len(a.requests) == called  # cold: skipped, not called
        dec = d.running.decisions(route="r", limit=1)[0]
        assert dec["cold_targets"] == ["first"] and attempts(dec) == [("second", None)]
        d.assert_serving()


def test_storm_without_a_stated_time_cools_after_the_threshold(ups):
    a, b, h = ups
    a.default = status(429, {"error": {"message": "rate limited"}})
    with drill(a, b, h, threshold=3, a_timeout=5) as d:
        started = time.monotonic()
        got = by_route(asyncio.run(storm(d.running.url, ["r", "ok"], STORM)))
        assert time.monotonic() - started < BOUND
        assert got == {"r": Counter({(200, "second"): STORM}),
                       "ok": Counter({(200, "other"): STORM})}
        view = d.health("a/ma")
        assert view.state == "cooling_down" and view.cooldown_source == "failures"
        assert view.consecutive_failures >= 3
        called = len(a.requests)
        decisions = d.running.decisions(route="r", limit=1000)
        assert sum(attempts(dec) == [("first", "rate_limit"), ("second", None)]
                   for dec in decisions) == called
        assert all("retry_after_ms" not in dec["attempts"][0] for dec in decisions)
        asyncio.run(storm(d.running.url, ["r"], STORM))
        assert len(a.requests) == called
        d.assert_serving()


def test_storm_on_every_target_passes_the_429_and_the_time_on(ups):
    a, b, h = ups
    for up in (a, b):
        up.default = status(429, {"error": {"message": "Please try again in 20s"}})
    with drill(a, b, h, threshold=3, a_timeout=5) as d:
        started = time.monotonic()
        responses = asyncio.run(storm(d.running.url, ["r", "ok"], STORM))
        assert time.monotonic() - started < BOUND
        got = by_route(responses)
        assert got["ok"] == Counter({(200, "other"): STORM})
        limited = [r for r in responses if r.headers.get("x-humpyard-route") == "r"]
        assert {r.status_code for r in limited} == {429}
        assert {r.headers["retry-after"] for r in limited} == {"20"}
        assert {r.json()["error"]["message"] for r in limited} == {"Please try again in 20s"}
        for key in ("a/ma", "b/mb"):
            view = d.health(key)
            assert view.state == "cooling_down" and view.cooldown_source == "retry_after"
        dec = d.running.decisions(route="r", limit=1)[0]
        assert dec["outcome"] == "failed" and dec["status"] == 429
        d.assert_serving()

"""Exactly one probe per cooldown end (seed 002, Endpoint health), over real sockets.

A route ``[bad, good]`` whose ``bad`` endpoint has just finished its cooldown
receives six concurrent requests. The probe is held open by the fake upstream
until ``good`` has answered the five others, so every loser reaches the probe
race while the lease is taken. Exactly one request may reach ``bad``; the
others skip it (``probe_in_flight``) because their plan still holds ``good``.
The same holds across two gateway instances sharing their breakers in
DynamoDB (moto), where the conditional write on the breaker decides the lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from humpyard.clock import FakeClock
from humpyard.health.breaker import HealthSettings
from humpyard.health.shared import SharedHealth
from humpyard.store.dynamodb import DynamoDBStore
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway
from tests.support.steps import Exchange, Step, ok, status
from tests.unit.aws.moto_support import LEDGER, STATE, moto_tables

MSG = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"
COOLDOWN = 30


def cfg(bad: str, good: str) -> str:
    return f"""
[providers.bad]
base_url = "{bad}"
[providers.good]
base_url = "{good}"
[targets.first]
endpoints = [{{ provider = "bad", model = "m" }}]
[targets.second]
endpoints = [{{ provider = "good", model = "m" }}]
[routes.r]
targets = ["first", "second"]
[health]
failure_threshold = 1
cooldown_secs = {COOLDOWN}
"""


@dataclass(frozen=True)
class HoldUntil(Step):
    """Answer ``then`` once ``ready()`` holds, or after ``limit`` seconds."""

    ready: Callable[[], bool]
    then: Step
    limit: float = 5.0

    async def respond(self, ex: Exchange) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limit
        while not self.ready() and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return await self.then.respond(ex)


def chat(url: str) -> httpx.Response:
    with httpx.Client(timeout=30) as c:
        return c.post(url + CHAT, json={"model": "r", "messages": MSG})


def burst(urls: list[str]) -> list[httpx.Response]:
    with ThreadPoolExecutor(len(urls)) as pool:
        return list(pool.map(chat, urls))


def hold_probe(bad: FakeUpstream, good: FakeUpstream, others: int) -> None:
    """Script ``bad`` so its next request (the probe) fails only after ``good`` took
    ``others`` more requests; any further request to ``bad`` fails at once."""
    seen = len(good.requests_to(CHAT))
    bad.script(HoldUntil(lambda: len(good.requests_to(CHAT)) >= seen + others,
                         status(500)))
    bad.default = status(500)


def assert_one_probe(decisions: list[dict[str, Any]]) -> None:
    firsts = [d["attempts"][0] for d in decisions]
    assert all(a["target"] == "first" for a in firsts)
    probes = [a for a in firsts if "skipped" not in a]
    assert len(probes) == 1 and probes[0]["status"] == 500
    assert [a["skipped"] for a in firsts if "skipped" in a] == ["probe_in_flight"] * 5
    assert all(d["target"] == "second" for d in decisions)


def test_six_concurrent_requests_send_exactly_one_probe():
    clock = FakeClock()
    with FakeUpstream() as bad, FakeUpstream() as good:
        bad.script(status(500))
        with running_gateway(cfg(bad.url, good.url), clock=clock) as gw:
            assert chat(gw.url).headers["x-humpyard-target"] == "second"  # trips bad
            clock.advance(COOLDOWN)
            hold_probe(bad, good, others=5)
            answers = burst([gw.url] * 6)
            assert [r.status_code for r in answers] == [200] * 6
            assert len(bad.requests_to(CHAT)) == 2  # the trip, then the one probe
            assert_one_probe(gw.decisions(limit=6))
            with gw.client() as c:
                eps = c.get("/v1/health").json()["endpoints"]
            # the failed probe reopened the breaker for the doubled cooldown
            e = next(e for e in eps if e["provider"] == "bad")
            assert e["state"] == "cooling_down"
            assert e["cooldown_remaining_ms"] == 2 * COOLDOWN * 1000


def test_a_loser_with_nothing_else_left_still_calls_the_endpoint():
    """Health never denies service: the only target's probing endpoint is called."""
    clock = FakeClock()
    with FakeUpstream() as only:
        text = f"""
[providers.only]
base_url = "{only.url}"
[targets.t]
endpoints = [{{ provider = "only", model = "m" }}]
[routes.r]
targets = ["t"]
[health]
failure_threshold = 1
cooldown_secs = {COOLDOWN}
"""
        only.script(status(500))
        with running_gateway(text, clock=clock) as gw:
            assert chat(gw.url).status_code == 500
            clock.advance(COOLDOWN)
            only.script(HoldUntil(lambda: len(only.requests_to(CHAT)) >= 3, ok()))
            answers = burst([gw.url] * 2)
            assert [r.status_code for r in answers] == [200, 200]
            assert len(only.requests_to(CHAT)) == 3
            assert all("skipped" not in d["attempts"][0] for d in gw.decisions(limit=2))


def test_one_probe_across_instances_sharing_breakers_in_dynamodb():
    clock = FakeClock()
    settings = HealthSettings(failure_threshold=1, cooldown_secs=COOLDOWN)
    with moto_tables() as client, FakeUpstream() as bad, FakeUpstream() as good:
        def shared() -> SharedHealth:
            store = DynamoDBStore(STATE, LEDGER, clock=clock, client=client)
            # As the Gateway builds it: breaker writes on a thread of their own, the
            # probe lease awaited before the probe is sent.
            return SharedHealth(store, settings, clock, refresh_secs=1.0, queued=True)

        text = cfg(bad.url, good.url)
        first, second = shared(), shared()
        with running_gateway(text, clock=clock, health=first) as one, \
                running_gateway(text, clock=clock, health=second) as two:
            bad.script(status(500))
            assert chat(one.url).headers["x-humpyard-target"] == "second"  # trips bad
            assert first.flush(10)  # the trip is in the table (written off the loop)
            clock.advance(COOLDOWN)
            hold_probe(bad, good, others=5)
            instances: list[Running] = [one, two]
            answers = burst([gw.url for gw in instances] * 3)
            assert [r.status_code for r in answers] == [200] * 6
            assert len(bad.requests_to(CHAT)) == 2
            decisions = [d for gw in instances for d in gw.decisions(limit=3)]
            assert_one_probe(decisions)

"""Probe admission in the executor, on a fake clock (docs/health.md "Probes").

The upstream is an ``httpx.MockTransport`` (the transport is the seam); the
health book and the clock are the real ``HealthBook`` and a ``FakeClock``.
"Another request holds the probe" is set up by acquiring the lease first,
exactly as a concurrent request would.
"""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from humpyard.clock import FakeClock
from humpyard.config import Config, load_config_text
from humpyard.errors import UpstreamError
from humpyard.executor.walk import Executor
from humpyard.health.book import HealthBook
from humpyard.health.breaker import HealthSettings
from humpyard.health.readiness import ReadinessProber
from humpyard.planning.types import Plan, PlannedTarget
from humpyard.upstream.client import UpstreamClient

COOLDOWN = 30.0
ALL = frozenset({"overflow", "rate_limit", "timeout", "server_error", "connection",
                 "forbidden", "unavailable"})
CONFIG = """
[providers.bad]
base_url = "http://bad.test/v1"
[providers.good]
base_url = "http://good.test/v1"
[providers.spare]
base_url = "http://spare.test/v1"
[targets.first]
endpoints = [{ provider = "bad", model = "m" }]
[targets.both]
endpoints = [{ provider = "bad", model = "m" }, { provider = "spare", model = "m" }]
[targets.spare-then-bad]
endpoints = [{ provider = "spare", model = "m" }, { provider = "bad", model = "m" }]
[targets.second]
endpoints = [{ provider = "good", model = "m" }]
[routes.r]
targets = ["first", "second"]
"""
COMPLETION = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "ok"}}]}


class Upstreams:
    """A mock transport: ``answers[host]`` gives each host's status; calls are counted."""

    def __init__(self, **answers: int) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host.split(".")[0]
        self.calls.append(host)
        code = self.answers.get(host, 200)
        if code == 200:
            return httpx.Response(200, json=COMPLETION)
        return httpx.Response(code, json={"error": {"message": f"{host} answered {code}"}})


def setup(ups: Upstreams) -> tuple[Executor, HealthBook, FakeClock, Config]:
    clock = FakeClock()
    config = load_config_text(CONFIG, env={})
    book = HealthBook(HealthSettings(failure_threshold=1, cooldown_secs=COOLDOWN))
    client = UpstreamClient(httpx.MockTransport(ups.handler))
    readiness = ReadinessProber(lambda: client.http, clock)
    return Executor(client, book, readiness, clock, random.Random(0)), book, clock, config


def plan_of(config: Config, *names: str, tail: tuple[str, ...] = (),
            fallback_on: frozenset[str] = ALL, tail_on: frozenset[str] = ALL) -> Plan:
    targets = [PlannedTarget(n, config.targets[n].endpoints) for n in names]
    targets += [PlannedTarget(n, config.targets[n].endpoints, tail=True) for n in tail]
    return Plan(route="r", route_type="passthrough", rule="default",
                rule_source="requested_model", targets=tuple(targets),
                fallback_on=fallback_on, tail_on=tail_on)


def half_open(book: HealthBook, clock: FakeClock, key: str = "bad/m") -> None:
    """Trip ``key`` and let its cooldown end: the next request may probe it."""
    book.record_failure(key, clock.now())
    clock.advance(COOLDOWN)
    assert book.view(key, clock.now()).state == "probing"


def run(ex: Executor, plan: Plan, config: Config):
    return asyncio.run(ex.run(plan, config, {"messages": [{"role": "user", "content": "x"}]},
                              stream=False))


def test_the_lease_holder_sends_the_probe_and_a_success_closes_the_breaker():
    ups = Upstreams()
    ex, book, clock, config = setup(ups)
    half_open(book, clock)
    served = run(ex, plan_of(config, "first", "second"), config)
    assert served.target == "first" and ups.calls == ["bad"]
    assert book.view("bad/m", clock.now()).state == "healthy"


def test_a_loser_skips_the_probing_endpoint_for_the_next_target():
    ups = Upstreams()
    ex, book, clock, config = setup(ups)
    half_open(book, clock)
    assert book.try_acquire_probe("bad/m", clock.now())  # another request's probe
    served = run(ex, plan_of(config, "first", "second"), config)
    assert served.target == "second" and ups.calls == ["good"]
    assert [(a.target, a.skipped) for a in served.attempts] == [
        ("first", "probe_in_flight"), ("second", None)]


def test_a_loser_skips_it_for_the_next_endpoint_of_the_same_target():
    ups = Upstreams()
    ex, book, clock, config = setup(ups)
    half_open(book, clock)
    assert book.try_acquire_probe("bad/m", clock.now())
    served = run(ex, plan_of(config, "both"), config)
    assert ups.calls == ["spare"] and served.endpoint.provider == "spare"


def test_a_loser_with_nothing_else_left_calls_it_without_taking_the_lease():
    ups = Upstreams(bad=500)
    ex, book, clock, config = setup(ups)
    half_open(book, clock)
    assert book.try_acquire_probe("bad/m", clock.now())
    with pytest.raises(UpstreamError):
        run(ex, plan_of(config, "first"), config)
    assert ups.calls == ["bad"]


def test_a_request_error_by_a_non_probe_leaves_the_probe_lease_alone():
    ups = Upstreams(bad=400)
    ex, book, clock, config = setup(ups)
    half_open(book, clock)
    assert book.try_acquire_probe("bad/m", clock.now())
    with pytest.raises(UpstreamError):
        run(ex, plan_of(config, "first"), config)
    # the probe in flight still holds the lease: a third request may not probe
    assert book.view("bad/m", clock.now()).probe_in_flight
    assert not book.try_acquire_probe("bad/m", clock.now())


def test_a_request_error_by_the_probe_gives_the_lease_back():
    ups = Upstreams(bad=400)
    ex, book, clock, config = setup(ups)
    half_open(book, clock)
    with pytest.raises(UpstreamError):
        run(ex, plan_of(config, "first", "second"), config)
    assert not book.view("bad/m", clock.now()).probe_in_flight
    assert book.try_acquire_probe("bad/m", clock.now())


def test_the_guarded_tail_is_not_an_alternative_to_a_member():
    """Entering the tail needs a failure in ``on``; a lost probe race is not one."""
    ups = Upstreams()
    ex, book, clock, config = setup(ups)
    half_open(book, clock)
    assert book.try_acquire_probe("bad/m", clock.now())
    served = run(ex, plan_of(config, "first", tail=("second",)), config)
    assert served.target == "first" and ups.calls == ["bad"]


def test_a_target_the_last_failure_cannot_reach_is_not_an_alternative():
    ups = Upstreams(spare=500)
    ex, book, clock, config = setup(ups)
    half_open(book, clock)
    assert book.try_acquire_probe("bad/m", clock.now())
    # spare fails with server_error; "second" is then out of reach (fallback_on lists
    # overflow only), so bad is the last thing left and is called
    plan = plan_of(config, "spare-then-bad", "second", fallback_on=frozenset({"overflow"}))
    served = run(ex, plan, config)
    assert ups.calls == ["spare", "bad"] and served.endpoint.provider == "bad"
    # with the fall-through allowed, the loser skips bad for "second" instead
    ups = Upstreams(spare=500)
    ex, book, clock, config = setup(ups)
    half_open(book, clock)
    assert book.try_acquire_probe("bad/m", clock.now())
    served = run(ex, plan_of(config, "spare-then-bad", "second"), config)
    assert ups.calls == ["spare", "good"] and served.target == "second"


def test_an_endpoint_that_cooled_after_planning_is_skipped_while_another_is_left():
    ups = Upstreams()
    ex, book, clock, config = setup(ups)
    book.record_failure("bad/m", clock.now())  # a concurrent request tripped it
    served = run(ex, plan_of(config, "first", "second"), config)
    assert served.target == "second" and ups.calls == ["good"]
    assert served.attempts[0].skipped == "cold"


def test_a_target_planning_kept_cold_is_called_as_planned():
    ups = Upstreams()
    ex, book, clock, config = setup(ups)
    book.record_failure("bad/m", clock.now())
    plan = plan_of(config, "first", "second")
    cold_first = PlannedTarget("first", config.targets["first"].endpoints, cold=True)
    plan = Plan(**{**{f: getattr(plan, f) for f in plan.__dataclass_fields__},
                   "targets": (cold_first, plan.targets[1])})
    served = run(ex, plan, config)
    assert served.target == "first" and ups.calls == ["bad"]


def test_a_cancelled_probe_gives_the_lease_back():
    started = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        started.set()
        await asyncio.sleep(3600)
        raise AssertionError("not reached")

    clock = FakeClock()
    config = load_config_text(CONFIG, env={})
    book = HealthBook(HealthSettings(failure_threshold=1, cooldown_secs=COOLDOWN))
    client = UpstreamClient(httpx.MockTransport(hang))
    ex = Executor(client, book, ReadinessProber(lambda: client.http, clock), clock,
                  random.Random(0))
    half_open(book, clock)

    async def scenario() -> None:
        task = asyncio.create_task(ex.run(plan_of(config, "first", "second"), config,
                                          {"messages": []}, stream=False))
        await started.wait()
        assert book.view("bad/m", clock.now()).probe_in_flight
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert book.try_acquire_probe("bad/m", clock.now())


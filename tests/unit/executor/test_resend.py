"""The executor's re-send window on a fake clock: dials count, the last one is cut.

The transport is an ``httpx.MockTransport`` that behaves like a host dropping
SYNs: each dial advances the fake clock by the connect timeout the request
carries, then fails with ``httpx.ConnectTimeout``. The connect timeout the
executor asked for is recorded per dial.
"""

from __future__ import annotations

import asyncio
import logging
import random

import httpx
import pytest

from humpyard.clock import FakeClock
from humpyard.config import load_config_text
from humpyard.errors import UpstreamError
from humpyard.executor.walk import Executor
from humpyard.health.book import HealthBook
from humpyard.health.breaker import HealthSettings
from humpyard.health.readiness import ReadinessProber
from humpyard.planning.types import Plan, PlannedTarget
from humpyard.upstream.client import UpstreamClient


def config(connect: float, window: float):
    return load_config_text(f"""
[providers.dark]
base_url = "http://dark.test/v1"
connect_timeout_secs = {connect}
connect_retry_window_secs = {window}
[targets.t]
endpoints = [{{ provider = "dark", model = "m" }}]
""", env={})


def dropping(clock: FakeClock, asked: list[float]):
    def handler(request: httpx.Request) -> httpx.Response:
        connect = request.extensions["timeout"]["connect"]
        asked.append(connect)
        clock.advance(connect)
        raise httpx.ConnectTimeout("timed out", request=request)
    return handler


@pytest.mark.parametrize("connect,window", [(1.0, 3.0), (2.5, 10.0), (10.0, 90.0),
                                            (0.4, 1.0)])
@pytest.mark.parametrize("seed", range(5))
def test_the_window_bounds_sleeps_and_dials(connect, window, seed, caplog):
    caplog.set_level(logging.INFO, logger="humpyard.routability")
    clock = FakeClock()
    asked: list[float] = []
    cfg = config(connect, window)
    client = UpstreamClient(httpx.MockTransport(dropping(clock, asked)))
    ex = Executor(client, HealthBook(HealthSettings(failure_threshold=0)),
                  ReadinessProber(lambda: client.http, clock), clock, random.Random(seed))
    plan = Plan(route="t", route_type="passthrough", rule="default",
                rule_source="requested_model",
                targets=(PlannedTarget("t", cfg.targets["t"].endpoints),),
                fallback_on=frozenset())
    first = clock.monotonic()
    with pytest.raises(UpstreamError) as info:
        asyncio.run(ex.run(plan, cfg, {"messages": []}, stream=False))
    elapsed = clock.monotonic() - first
    assert info.value.status == 504
    assert elapsed <= max(window, connect) + 1e-9
    assert elapsed == pytest.approx(connect + sum(clock.slept) + sum(asked[1:]))
    assert asked[0] == connect and all(0 < a <= connect for a in asked)
    attempts = info.value.attempts  # type: ignore[attr-defined]
    assert len(attempts) == len(asked)
    assert [a.resend for a in attempts] == [False] + [True] * (len(asked) - 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "humpyard.routability"]
    if len(asked) > 1:
        assert lines == [f"humpyard.routability endpoint=dark/m attempts={len(asked)} "
                         f"ms={int(elapsed * 1000)} last=connect timeout dark.test:80"]
    else:
        assert lines == []


def test_the_last_dial_is_cut_to_what_is_left():
    clock = FakeClock()
    asked: list[float] = []
    cfg = config(1.0, 3.0)
    client = UpstreamClient(httpx.MockTransport(dropping(clock, asked)))
    ex = Executor(client, HealthBook(), ReadinessProber(lambda: client.http, clock), clock,
                  random.Random(4))
    plan = Plan(route="t", route_type="passthrough", rule="default",
                rule_source="requested_model",
                targets=(PlannedTarget("t", cfg.targets["t"].endpoints),),
                fallback_on=frozenset())
    with pytest.raises(UpstreamError):
        asyncio.run(ex.run(plan, cfg, {"messages": []}, stream=False))
    assert asked[:2] == [1.0, 1.0] and asked[-1] < 1.0
    assert sum(asked) + sum(clock.slept) == pytest.approx(3.0)

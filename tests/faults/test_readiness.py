"""Flapping readiness: a provider whose health endpoint toggles, or hangs.

Readiness only observes (seed 001): an unready endpoint is skipped as
``skipped_unavailable`` without a call, a retry or a breaker change, and the
next good probe readmits it. Probes are cached (``probe_interval_secs`` for a
good answer, at most a second for a bad one) and bounded by
``probe_timeout_secs``, so flapping never multiplies probes nor delays a
request past the probe timeout.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from humpyard.clock import FakeClock
from tests.faults.harness import MSG, drill
from tests.faults.steps import Hold

INTERVAL = 0.2
PROBE_TIMEOUT = 0.3
READINESS = f"""
[router]
probe_interval_secs = {INTERVAL}
probe_timeout_secs = {PROBE_TIMEOUT}
"""


def chat_calls(up) -> int:
    return len(up.requests_to("/v1/chat/completions"))


def readiness_of(d, provider: str) -> str:
    eps = d.http.get("/v1/health").json()["endpoints"]
    return next(e["readiness"] for e in eps if e["provider"] == provider)


def test_unready_is_skipped_without_a_call_and_readmitted(ups):
    a, b, h = ups
    # Probe answers age on the gateway's clock: only advance() moves it, so the
    # answers checked below cannot expire while a loaded machine runs the test.
    clock = FakeClock()
    with drill(a, b, h, a_extra='health_path = "/health"', extra=READINESS,
               clock=clock) as d:
        assert d.chat("r").response.headers["x-humpyard-target"] == "first"

        a.health_status = 503
        clock.advance(INTERVAL + 0.05)  # the good answer expires
        sent = d.chat("r")
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
        dec = d.decision(sent.request_id)
        assert dec["attempts"][0]["skipped"] == "skipped_unavailable"
        assert dec["attempts"][0]["failure_class"] is None
        assert chat_calls(a) == 1
        assert readiness_of(d, "a") == "not_ready"
        alone = d.chat("solo")
        assert alone.status == 503
        assert alone.error_message() == "no endpoint of the route could be tried"
        view = d.health("a/ma")
        assert view.state == "healthy" and view.consecutive_failures == 0

        a.health_status = 200
        clock.advance(INTERVAL + 0.05)  # the bad answer expires
        assert d.chat("r").response.headers["x-humpyard-target"] == "first"
        assert readiness_of(d, "a") == "ready"
        d.assert_serving()


def test_hanging_health_endpoint_costs_at_most_the_probe_timeout(ups):
    a, b, h = ups
    a.health_step = Hold(10)
    with drill(a, b, h, a_extra='health_path = "/health"', extra=READINESS) as d:
        sent = d.chat("r")
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
        assert sent.elapsed < PROBE_TIMEOUT + 1.0
        assert chat_calls(a) == 0
        assert d.health("a/ma").state == "healthy"
        d.assert_serving()


def test_flapping_readiness_under_load(ups):
    a, b, h = ups
    stop = threading.Event()

    def flap() -> None:
        up = True
        while not stop.wait(0.07):
            up = not up
            a.health_status = 200 if up else 503

    with drill(a, b, h, a_extra='health_path = "/health"', extra=READINESS) as d:
        flapper = threading.Thread(target=flap, daemon=True)
        flapper.start()
        try:
            started = time.monotonic()
            results = asyncio.run(load(d.running.url, seconds=2.5, workers=8))
        finally:
            stop.set()
            flapper.join()
        elapsed = time.monotonic() - started
        assert elapsed < 2.5 + 3.0
        r = [(s, t) for route, s, t in results if route == "r"]
        solo = [s for route, s, _ in results if route == "solo"]
        assert r and {s for s, _ in r} == {200}
        assert {t for _, t in r} <= {"first", "second"}
        assert solo and set(solo) <= {200, 503}
        # readiness never touches the breaker; a answered every call it got
        view = d.health("a/ma")
        assert view.state == "healthy" and view.consecutive_failures == 0
        # at most one probe per cache window (plus the one in flight at the end)
        probes = len(a.requests_to("/health"))
        assert 1 <= probes <= elapsed / INTERVAL + 2
        d.assert_serving()


async def load(url: str, *, seconds: float, workers: int) -> list[tuple[str, int, str | None]]:
    out: list[tuple[str, int, str | None]] = []
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        async def worker(i: int) -> None:
            route = "solo" if i % 4 == 0 else "r"
            while time.monotonic() < deadline:
                resp = await client.post("/v1/chat/completions",
                                         json={"model": route, "messages": MSG})
                out.append((route, resp.status_code, resp.headers.get("x-humpyard-target")))
        await asyncio.gather(*(worker(i) for i in range(workers)))
    return out

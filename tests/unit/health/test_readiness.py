import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from humpyard.clock import FakeClock
from humpyard.health.readiness import ReadinessProber, probe_url

BASE = "http://h:8000/v1"


class Upstream:
    """A MockTransport handler that records every probe and answers as told."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.error: Exception | None = None
        self.urls: list[str] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(str(request.url))
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return httpx.Response(self.status, text="ok")


def run(test: Callable[[ReadinessProber, Upstream, FakeClock], Awaitable[None]],
        upstream: Upstream | None = None, interval: float = 5.0) -> Upstream:
    upstream = upstream or Upstream()
    clock = FakeClock()

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            prober = ReadinessProber(lambda: client, clock, interval_secs=interval)
            await test(prober, upstream, clock)

    asyncio.run(main())
    return upstream


@pytest.mark.parametrize(
    ("base", "path", "url"),
    [
        ("http://h:8000/v1", "/health", "http://h:8000/health"),
        ("http://h:8000/v1/", "health", "http://h:8000/health"),
        ("https://api.example/openai/v1?x=1", "/healthz", "https://api.example/healthz"),
        ("http://127.0.0.1:9/v1", "/v1/models?ready=1", "http://127.0.0.1:9/v1/models?ready=1"),
        ("http://h:8000/v1", "//evil.example/health", "http://h:8000/evil.example/health"),
    ],
)
def test_probe_url_uses_the_origin(base: str, path: str, url: str) -> None:
    assert probe_url(base, path) == url


def test_no_health_path_is_ready_without_io() -> None:
    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        assert await prober.is_ready("cloud", BASE, None)
        assert prober.status("cloud") == "not_probed"

    assert run(test).urls == []


def test_ready_answer_is_cached_for_the_interval() -> None:
    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        assert prober.status("local") == "unknown"
        assert await prober.is_ready("local", BASE, "/health")
        assert up.urls == ["http://h:8000/health"]
        assert prober.status("local") == "ready"
        clock.advance(4.9)
        assert await prober.is_ready("local", BASE, "/health")
        assert len(up.urls) == 1
        clock.advance(0.1)
        assert await prober.is_ready("local", BASE, "/health")
        assert len(up.urls) == 2

    run(test)


def test_not_ready_is_reprobed_after_one_second() -> None:
    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        assert not await prober.is_ready("local", BASE, "/health")
        assert not await prober.is_ready("local", BASE, "/health")
        assert len(up.urls) == 1
        assert prober.status("local") == "not_ready"
        up.status = 200  # the serve comes back
        clock.advance(1.0)
        assert await prober.is_ready("local", BASE, "/health")
        assert len(up.urls) == 2
        assert prober.status("local") == "ready"

    run(test, Upstream(status=503))


def test_negative_cache_never_exceeds_interval() -> None:
    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        assert not await prober.is_ready("local", BASE, "/health")
        clock.advance(0.5)
        assert not await prober.is_ready("local", BASE, "/health")
        assert len(up.urls) == 2

    run(test, Upstream(status=500), interval=0.5)


@pytest.mark.parametrize("status", [204, 299])
def test_any_2xx_is_ready(status: int) -> None:
    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        assert await prober.is_ready("local", BASE, "/health")

    run(test, Upstream(status=status))


@pytest.mark.parametrize("status", [301, 404, 500, 503])
def test_non_2xx_is_not_ready(status: int) -> None:
    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        assert not await prober.is_ready("local", BASE, "/health")

    run(test, Upstream(status=status))


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectTimeout("slow"),
        httpx.ReadTimeout("slow"),
        httpx.ConnectError("refused"),
        httpx.RemoteProtocolError("bad"),
        TimeoutError(),
    ],
)
def test_timeouts_and_errors_are_not_ready(error: Exception) -> None:
    upstream = Upstream()
    upstream.error = error

    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        assert not await prober.is_ready("local", BASE, "/health")
        assert prober.status("local") == "not_ready"

    run(test, upstream)


def test_concurrent_callers_share_one_probe() -> None:
    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        up.gate = asyncio.Event()
        calls = [asyncio.create_task(prober.is_ready("local", BASE, "/health"))
                 for _ in range(10)]
        for _ in range(5):
            await asyncio.sleep(0)
        up.gate.set()
        assert await asyncio.gather(*calls) == [True] * 10

    assert len(run(test).urls) == 1


def test_providers_are_cached_separately_and_url_change_reprobes() -> None:
    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        await prober.is_ready("a", "http://a:1/v1", "/health")
        await prober.is_ready("b", "http://b:2/v1", "/health")
        await prober.is_ready("a", "http://a:1/v1", "/health")
        await prober.is_ready("a", "http://a:1/v1", "/ready")  # a reload changed the path
        assert up.urls == ["http://a:1/health", "http://b:2/health", "http://a:1/ready"]

    run(test)


def test_status_goes_unknown_when_stale() -> None:
    async def test(prober: ReadinessProber, up: Upstream, clock: FakeClock) -> None:
        await prober.is_ready("local", BASE, "/health")
        clock.advance(5.1)
        assert prober.status("local") == "unknown"

    run(test)

"""The opencode-go source against httpx.MockTransport, and where the key may go."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from quota_fakes import KEY, usage_body

from humpyard.config.spec import ProviderSpec
from humpyard.quota import SOURCES, OpencodeGo, QuotaReading
from humpyard.quota.base import key_destination_refusal

Handler = Callable[[httpx.Request], httpx.Response | Awaitable[httpx.Response]]


def provider(base_url: str = "https://opencode.ai/zen/go/v1", key: str | None = KEY,
             ) -> ProviderSpec:
    return ProviderSpec(name="opencode", base_url=base_url, quota_source="opencode-go",
                        api_key_env="OC_KEY", api_key=key)


def fetch(handler: Handler, spec: ProviderSpec | None = None,
          timeout: float = 5.0) -> tuple[QuotaReading, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    async def recording(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = handler(request)
        return await answer if asyncio.iscoroutine(answer) else answer  # type: ignore[return-value]

    async def main() -> QuotaReading:
        async with httpx.AsyncClient(transport=httpx.MockTransport(recording)) as client:
            return await OpencodeGo().fetch(client, spec or provider(), timeout)

    reading = asyncio.run(main())
    assert KEY not in repr(reading)
    return reading, seen


def answer(status: int = 200, body: Any = None, raw: bytes | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if raw is not None:
            return httpx.Response(status, content=raw)
        return httpx.Response(status, json=usage_body() if body is None else body)
    return handler


def test_registry_names_the_source() -> None:
    import humpyard.quota.base as base

    assert isinstance(SOURCES["opencode-go"], OpencodeGo)
    assert base.SOURCES is SOURCES


def test_fresh_reading() -> None:
    reading, seen = fetch(answer())
    assert reading.ok and reading.error is None
    (req,) = seen
    assert str(req.url) == "https://opencode.ai/zen/go/v1/usage"
    assert req.method == "GET"
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert set(reading.windows) == {"rolling", "weekly", "monthly"}
    rolling = reading.windows["rolling"]
    assert (rolling.percent, rolling.status) == (12.5, "ok")
    assert rolling.resets_at == datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
    assert reading.windows["monthly"].resets_at == datetime(2027, 2, 1, tzinfo=UTC).timestamp()


def test_rate_limited_status_and_null_reset_are_kept() -> None:
    body = usage_body(rolling=100, status="rate-limited")
    body["usage"]["weekly"]["resetsAt"] = None
    reading, _ = fetch(answer(body=body))
    assert reading.windows["rolling"].status == "rate-limited"
    assert reading.windows["rolling"].percent == 100.0
    assert reading.windows["weekly"].resets_at is None


@pytest.mark.parametrize("status,reason", [
    (401, "the key is unknown to the provider"),
    (403, "the key has no subscription"),
    (500, "the provider answered HTTP 500"),
    (429, "the provider answered HTTP 429"),
    (302, "the provider answered HTTP 302"),
])
def test_error_statuses(status: int, reason: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"location": "https://elsewhere.example/usage"},
                              text=f"echo {request.headers['authorization']}")
    reading, seen = fetch(handler)
    assert reading.error == reason and reading.windows == {}
    assert len(seen) == 1  # a redirect is not followed: the key stays on the host


def test_transport_timeout() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)
    reading, _ = fetch(handler, timeout=3)
    assert reading.error == "no answer within 3s"


def test_a_provider_that_never_answers_is_cut_off_at_the_timeout() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
    reading, _ = fetch(handler, timeout=0.02)
    assert reading.error == "no answer within 0.02s"


def test_connection_failure() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"refused {KEY}", request=request)
    reading, _ = fetch(handler)
    assert reading.error == "request to opencode.ai failed: ConnectError (refused [redacted])"


@pytest.mark.parametrize("raw,reason", [
    (b"<html>oops</html>", "the answer is not JSON"),
    (b"\xff\xfe", "the answer is not JSON"),
    (b"[]", "no \"usage\" object"),
    (b'{"usage": []}', "no \"usage\" object"),
    (b'{"usage": {}}', "no usage windows"),
    (b'{"usage": {"rolling": 5}}', "'rolling' is not an object"),
    (b'{"usage": {"rolling": {"status": "ok", "resetsAt": null}}}', "has no 'percent'"),
    (b'{"usage": {"rolling": {"percent": 5, "resetsAt": null}}}', "has no 'status'"),
    (b'{"usage": {"rolling": {"percent": 5, "status": "ok"}}}', "has no 'resetsAt'"),
    (b'{"usage": {"rolling": {"percent": "5", "status": "ok", "resetsAt": null}}}',
     "non-numeric percent"),
    (b'{"usage": {"rolling": {"percent": true, "status": "ok", "resetsAt": null}}}',
     "non-numeric percent"),
    (b'{"usage": {"rolling": {"percent": 5, "status": 1, "resetsAt": null}}}',
     "unusable status"),
    (b'{"usage": {"rolling": {"percent": 5, "status": "ok", "resetsAt": "soon"}}}',
     "not an ISO-8601 time"),
    (b'{"usage": {"a b": {"percent": 5, "status": "ok", "resetsAt": null}}}',
     "unusable name"),
])
def test_nonsense_answers(raw: bytes, reason: str) -> None:
    reading, _ = fetch(answer(raw=raw))
    assert not reading.ok and reading.windows == {}
    assert reason in (reading.error or "")


@pytest.mark.parametrize("percent", [-0.1, 100.5, 1e9, "NaN", "Infinity"])
def test_out_of_range_percent(percent: Any) -> None:
    value = percent if isinstance(percent, str) else json.dumps(percent)
    raw = (b'{"usage": {"rolling": {"status": "ok", "resetsAt": null, "percent": '
           + value.encode() + b"}}}")
    reading, _ = fetch(answer(raw=raw))
    assert "outside 0-100" in (reading.error or "")


def test_an_oversized_answer_is_refused() -> None:
    reading, _ = fetch(answer(raw=b" " * (70 * 1024) + b"{}"))
    assert reading.error == "the answer is larger than 65536 bytes"


@pytest.mark.parametrize("base_url", [
    "http://opencode.ai/zen/go/v1", "http://10.0.0.5:8000/v1", "http://127.0.0.1.example/v1",
    "ftp://opencode.ai/v1",
])
def test_the_key_never_goes_over_plain_http_to_a_remote_host(base_url: str) -> None:
    reading, seen = fetch(answer(), provider(base_url))
    assert seen == []
    assert "only sent over https" in (reading.error or "")


@pytest.mark.parametrize("base_url", [
    "http://127.0.0.1:8000/v1", "http://localhost:9/v1", "http://[::1]:8080/v1",
    "http://127.5.6.7/v1", "https://opencode.ai/zen/go/v1",
])
def test_https_or_loopback_http_is_allowed(base_url: str) -> None:
    reading, seen = fetch(answer(), provider(base_url))
    assert reading.ok
    assert str(seen[0].url) == base_url + "/usage"


def test_no_key_means_no_request() -> None:
    reading, seen = fetch(answer(), provider(key=None))
    assert seen == [] and reading.error == "no key: OC_KEY is not set"


@pytest.mark.parametrize("url,base,refused", [
    ("https://a.example/v1/usage", "https://a.example/v1", False),
    ("https://b.example/v1/usage", "https://a.example/v1", True),
    ("https://a.example:8443/usage", "https://a.example/v1", True),
    ("http://a.example/usage", "https://a.example/v1", True),
    ("http://localhost:1/usage", "http://localhost:1", False),
    ("https://a.example:99999/usage", "https://a.example/v1", True),
])
def test_key_destination_rule(url: str, base: str, refused: bool) -> None:
    assert (key_destination_refusal(url, base) is not None) is refused

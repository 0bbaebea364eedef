"""``UpstreamClient.open`` on ``FastTransport``: the request path, without httpx."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from humpyard.config import load_config_text
from humpyard.config.spec import ProviderSpec
from humpyard.upstream import errors as E
from humpyard.upstream.client import TransportFailure, UpstreamClient
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import closed_port_url
from tests.support.steps import ok, reset, stall

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def provider(url: str, *, key: str = "sk-one", extra: str = "") -> ProviderSpec:
    config = load_config_text(f"""
[providers.p]
base_url = "{url}"
api_key_env = "P_KEY"
timeout_secs = 1
{extra}
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
""", env={"P_KEY": key})
    return config.providers["p"]


@pytest.fixture
def up():
    with FakeUpstream() as server:
        yield server


def test_request_head_carries_the_key_headers_and_the_path(up: FakeUpstream) -> None:
    p = provider(up.url, extra='headers = { "x-org" = "acme" }')

    async def main() -> None:
        client = UpstreamClient()
        try:
            resp = await client.open(p, "/chat/completions", BODY)
            assert resp.status == 200 and resp.headers["content-type"] == "application/json"
            assert b'"choices"' in await resp.read()
            await resp.aclose()
            resp = await client.open(p, "/chat/completions", BODY, extra_headers={"x-one": "1"})
            await resp.read()
            await resp.aclose()
        finally:
            await client.aclose()
    asyncio.run(main())
    first, second = up.requests
    assert first.path == "/v1/chat/completions" and first.json["model"] == "m"
    assert first.headers["authorization"] == "Bearer sk-one"
    assert first.headers["x-org"] == "acme" and first.headers["content-length"] == str(len(BODY))
    assert first.headers["host"] == f"127.0.0.1:{up.port}"
    assert "x-one" not in first.headers and second.headers["x-one"] == "1"


def test_a_reloaded_provider_with_a_new_key_gets_a_new_head(up: FakeUpstream) -> None:
    # equal except for the key, which is excluded from comparison: the cached
    # head must follow the provider object, not its value
    old, new = provider(up.url, key="sk-old"), provider(up.url, key="sk-new")
    assert old == new

    async def main() -> None:
        client = UpstreamClient()
        try:
            for p in (old, new, old):
                resp = await client.open(p, "/chat/completions", BODY)
                await resp.read()
                await resp.aclose()
        finally:
            await client.aclose()
    asyncio.run(main())
    assert [r.headers["authorization"] for r in up.requests] == \
        ["Bearer sk-old", "Bearer sk-new", "Bearer sk-old"]


@pytest.mark.parametrize(("script", "kind", "never_delivered"), [
    (None, E.ConnectRefused, True),
    (reset(), E.ConnectionLost, False),
    (stall(), E.ReadTimeout, False),
], ids=["refused", "reset", "timeout"])
def test_failures_name_their_kind_and_address(up: FakeUpstream, script, kind: type,
                                              never_delivered: bool) -> None:
    url = closed_port_url() if script is None else up.url
    if script is not None:
        up.script(script, ok())
    p = provider(url)
    addr = url.split("/")[2]

    async def main() -> None:
        client = UpstreamClient()
        try:
            with pytest.raises(TransportFailure) as info:
                await client.open(p, "/chat/completions", BODY)
            assert type(info.value) is kind and info.value.never_delivered is never_delivered
            assert addr in info.value.message and "sk-one" not in info.value.message
            if script is not None:  # the pool recovers: the next call is answered
                resp = await client.open(p, "/chat/completions", BODY)
                assert resp.status == 200
                await resp.aclose()
        finally:
            await client.aclose()
    asyncio.run(main())


def test_an_unsupported_scheme_is_a_named_failure() -> None:
    async def main() -> None:
        client = UpstreamClient()
        try:
            p = ProviderSpec(name="p", base_url="ftp://example.test/v1")
            with pytest.raises(TransportFailure, match="unsupported upstream URL scheme 'ftp'"):
                await client.open(p, "/chat/completions", BODY)
        finally:
            await client.aclose()
    asyncio.run(main())


def test_the_request_path_does_not_import_httpx() -> None:
    code = ("import sys, humpyard.http.app, humpyard.gateway, humpyard.upstream.client; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'httpcore')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_an_internationalised_host_name_is_sent_in_its_ascii_form() -> None:
    async def main() -> None:
        client = UpstreamClient()
        try:
            p = ProviderSpec(name="p", base_url="http://bücher.invalid/v1",
                             connect_timeout_secs=1, timeout_secs=1)
            _, origin, prefix, _ = client._head(p, "/chat/completions", None)
            assert origin[:3] == ("http", "xn--bcher-kva.invalid", 80)
            assert b"\r\nHost: xn--bcher-kva.invalid\r\n" in prefix
            with pytest.raises(TransportFailure) as info:  # no such host: a named failure
                await client.open(p, "/chat/completions", BODY)
            assert isinstance(info.value, E.ConnectFailure)
        finally:
            await client.aclose()
    asyncio.run(main())

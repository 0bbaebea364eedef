"""Our transport and httpx on the same bytes: the observable outcome must agree.

Every case of ``tests/wire/cases.py`` is played by a fresh ``RawServer`` to
httpx's own transport and to ``FastTransport`` (through ``HttpxBridge``, and for
``client`` cases also through ``UpstreamClient.open``, which decodes bodies
itself). The outcome compared: the status, the headers that matter, the body
bytes, or, for a failure, its failure class and whether the request was never
delivered (httpx's exception read with ``bridge.as_failure``). A case marked
``differs`` asserts our outcome and names the section of docs/upstream.md that
explains the difference.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from humpyard.config.spec import ProviderSpec
from humpyard.upstream.bridge import HttpxBridge, as_failure
from humpyard.upstream.client import UpstreamClient
from humpyard.upstream.dial import Origin
from humpyard.upstream.errors import TransportFailure
from humpyard.upstream.proxies import parse_proxy
from humpyard.upstream.transport import FastTransport
from tests.support.proxy import ForwardProxy
from tests.support.rawserver import RawServer
from tests.support.servers import closed_port_url
from tests.wire.cases import CASES, Case

HEADERS = ("content-type", "x-a", "retry-after", "link")
DOC = Path(__file__).resolve().parents[2] / "docs" / "upstream.md"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def outcome_of_response(status: int, headers: Any, body: bytes) -> tuple[Any, ...]:
    return ("answer", status, {k: headers[k] for k in HEADERS if k in headers}, body)


def outcome_of_failure(e: httpx.HTTPError | TransportFailure, url: str) -> tuple[Any, ...]:
    f = e if isinstance(e, TransportFailure) else as_failure(e, url)
    return ("failure", f.failure_class, f.never_delivered)


async def play(client: httpx.AsyncClient, case: Case, url: str) -> list[tuple[Any, ...]]:
    out = []
    for _ in range(case.requests):
        try:
            r = await client.request(case.method, url + "/x",
                                     timeout=httpx.Timeout(case.connect_timeout,
                                                           read=case.read_timeout))
            out.append(outcome_of_response(r.status_code, r.headers, r.content))
        except httpx.HTTPError as e:
            out.append(outcome_of_failure(e, url))
    return out


async def play_client(fast: FastTransport, case: Case, url: str) -> list[tuple[Any, ...]]:
    client = UpstreamClient(fast, env={})
    p = ProviderSpec(name="p", base_url=url, timeout_secs=case.read_timeout,
                     connect_timeout_secs=case.connect_timeout)
    out = []
    try:
        for _ in range(case.requests):
            try:
                resp = await client.open(p, "/x", b"{}")
                try:
                    body = await resp.read()
                finally:
                    await resp.aclose()
                out.append(outcome_of_response(resp.status, resp.headers, body))
            except TransportFailure as e:
                out.append(outcome_of_failure(e, url))
    finally:
        await client.aclose()
    return out


@contextmanager
def served(case: Case, ca: trustme.CA) -> Iterator[tuple[str, ssl.SSLContext | None, str | None]]:
    """The case's server: (url, the client's trust for it, the proxy URL)."""
    with ExitStack() as stack:
        if case.refused:
            yield closed_port_url("").rstrip("/"), None, None
            return
        server_ctx = None
        trust = None
        if case.tls:
            server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_ctx)
            if case.tls == "trusted":
                trust = ssl.create_default_context()
                ca.configure_trust(trust)
        srv = stack.enter_context(RawServer(
            case.script if not isinstance(case.script, tuple)
            else (lambda n, s=case.script: s[min(n, len(s) - 1)]), ssl_context=server_ctx))
        url = srv.url.replace("http://", "https://") if case.plain_to_tls else srv.url
        proxy = stack.enter_context(ForwardProxy()).url if case.proxy else None
        yield url, trust, proxy


def run_case(case: Case, ca: trustme.CA) -> tuple[list[Any], list[Any], list[Any] | None]:
    async def main() -> tuple[list[Any], list[Any], list[Any] | None]:
        with served(case, ca) as (url, trust, proxy):
            theirs_client = httpx.AsyncClient(verify=trust or True, trust_env=False, proxy=proxy)
            async with theirs_client:
                theirs = await play(theirs_client, case, url)
            route = None
            if proxy is not None:
                via = parse_proxy(proxy)
                route = lambda s, h, p: Origin(s, h, p, via)  # noqa: E731
            fast = FastTransport(ssl_context=trust, env={})
            async with httpx.AsyncClient(transport=HttpxBridge(fast, route)) as ours_client:
                ours = await play(ours_client, case, url)
            client = None
            if case.client:
                async with httpx.AsyncClient(verify=trust or True, trust_env=False) as h:
                    theirs_post = case.__class__(**{**case.__dict__, "method": "POST"})
                    expected = await play(h, theirs_post, url)
                client = await play_client(FastTransport(ssl_context=trust, env={}), case,
                                           url)
                assert client == expected, f"{case.name}: UpstreamClient vs httpx POST"
            return theirs, ours, client
    return asyncio.run(main())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_our_transport_agrees_with_httpx(case: Case, ca: trustme.CA) -> None:
    theirs, ours, _ = run_case(case, ca)
    if case.differs is None:
        assert ours == theirs
    else:
        assert f"### {case.differs}" in DOC.read_text(), "the difference is written down"
        assert ours != theirs, "a documented difference that is no longer one"
        for key, want in case.ours.items():
            assert ours[0][int(key)] == want, (key, ours)


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)

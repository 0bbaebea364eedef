"""Real network conditions in front of the real gateway: TLS, proxies, encodings, limits.

Each drill runs the gateway on loopback (``tests/faults/harness.py``: route
``r`` = first (provider a) → second (b); ``solo`` = first only) and checks what
the client got, what the decision recorded and what health shows. The point
of most of them: a network condition is a ``connection`` (or ``timeout``)
failure that fails over and counts, and, when nothing is left, a 502/504 that
names the cause and the address, never a 500.
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import json
import os
import ssl
import zlib
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme

from humpyard.config import load_config_text
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from tests.faults.harness import attempts, drill
from tests.support.proxy import ForwardProxy
from tests.support.rawserver import RawServer
from tests.support.servers import ServerThread
from tests.support.steps import Exchange, Step, ok

COMPLETION = {"id": "c1", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "zipped hello"},
     "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                          "total_tokens": 5}}


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def tls_server(ca: trustme.CA, answer: bytes) -> RawServer:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    return RawServer([answer], ssl_context=ctx)


def completion_bytes(body: dict | None = None, *headers: bytes, coding: str = "") -> bytes:
    raw = json.dumps(body or COMPLETION).encode()
    if coding == "gzip":
        raw = gzip.compress(raw)
    elif coding == "deflate":
        raw = zlib.compress(raw)
    extra = b"".join(h + b"\r\n" for h in headers)
    if coding:
        extra += b"Content-Encoding: %s\r\n" % coding.encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (len(raw), extra)) + raw


# -- connect failures that were 500s ----------------------------------------------


def test_an_untrusted_certificate_fails_over_and_names_the_cause(ups, ca):
    _, b, h = ups
    with tls_server(ca, completion_bytes()) as srv, drill(srv.url + "/v1", b, h) as d:
        sent = d.chat("r")
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
        dec = d.decision(sent.request_id)
        assert attempts(dec) == [("first", "connection"), ("second", None)]
        assert dec["attempts"][0]["error"].startswith(
            f"TLS certificate verify failed for 127.0.0.1:{srv.port}")
        assert d.health("a/ma").state == "cooling_down"
        alone = d.chat("solo")
        assert alone.status == 502
        assert alone.error_message().startswith(
            f"TLS certificate verify failed for 127.0.0.1:{srv.port}")
        d.assert_serving()


async def _plain_app(scope, receive, send) -> None:  # an HTTP server that is not TLS
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"plain"})


def test_tls_spoken_to_a_plain_port_fails_over(ups):
    _, b, h = ups
    with ServerThread(_plain_app, lifespan="off") as a, \
            drill(a.url.replace("http://", "https://") + "/v1", b, h) as d:
        sent = d.chat("r")
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
        assert attempts(d.decision(sent.request_id)) == [("first", "connection"),
                                                         ("second", None)]
        alone = d.chat("solo")
        assert alone.status == 502
        assert alone.error_message().startswith(f"TLS handshake failed for 127.0.0.1:{a.port}")
        d.assert_serving()


def _ask(config_text: str, *, close_client: bool = False,
         connect_error: OSError | None = None) -> httpx.Response:
    """One chat request to a gateway on this thread's asyncio loop (ASGI, no server).

    ``connect_error``: what the loop's ``sock_connect`` (the process edge every
    connection goes through) raises, as the kernel would."""
    config = load_config_text(config_text, env={})

    async def main() -> httpx.Response:
        if connect_error is not None:
            async def fail(sock: object, address: object) -> None:
                raise connect_error
            asyncio.get_running_loop().sock_connect = fail  # type: ignore[method-assign]
        gw = Gateway(config)
        if close_client:
            await gw.client.aclose()
        app = create_app(config, gateway=gw)
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://gw") as c:
                return await c.post("/v1/chat/completions", json={
                    "model": "t", "messages": [{"role": "user", "content": "hi"}]})
        finally:
            await gw.aclose()
    return asyncio.run(main())


def _one_provider(url: str) -> str:
    return f"""
[providers.p]
base_url = "{url}"
connect_timeout_secs = 2
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
"""


@pytest.mark.parametrize("code", [errno.EHOSTUNREACH, errno.ENETUNREACH],
                         ids=["host", "network"])
def test_no_route_to_host_is_a_502_naming_the_address(code):
    r = _ask(_one_provider("http://[2001:db8::1]:9/v1"),
             connect_error=OSError(code, os.strerror(code)))
    assert r.status_code == 502, r.text
    assert r.json()["error"]["message"] == \
        f"no route to [2001:db8::1]:9: {os.strerror(code)}"


def test_a_closed_client_answers_502_not_500(ups):
    _, b, _ = ups
    r = _ask(_one_provider(b.url), close_client=True)
    assert r.status_code == 502, r.text
    assert "closed" in r.json()["error"]["message"]


# -- content codings -------------------------------------------------------------


@dataclass(frozen=True)
class Zipped(Step):
    """A buffered answer (``status``) whose body is gzip/deflate-coded."""

    body: bytes
    status: int = 200
    coding: str = "gzip"

    async def respond(self, ex: Exchange) -> bool:
        data = gzip.compress(self.body) if self.coding == "gzip" else zlib.compress(self.body)
        await ex.send(self.status, data, "application/json", {"Content-Encoding": self.coding})
        return True


@dataclass(frozen=True)
class ZippedStream(Step):
    """A streamed answer, gzip-coded and flushed per event."""

    text: tuple[str, ...] = ("zipped ", "stream")

    async def respond(self, ex: Exchange) -> bool:
        await ex.start_stream({"Content-Encoding": "gzip"})
        z = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
        builder = ex.chunks()
        events = [b"data: " + json.dumps(c).encode() + b"\n\n"
                  for c in builder.answer(usage={"prompt_tokens": 1, "completion_tokens": 2,
                                                 "total_tokens": 3},
                                          text="".join(self.text), pieces=list(self.text))]
        for ev in [*events, b"data: [DONE]\n\n"]:
            await ex.send_chunk(z.compress(ev) + z.flush(zlib.Z_SYNC_FLUSH))
            await asyncio.sleep(0.01)
        await ex.send_chunk(z.flush())
        await ex.end_stream()
        return True


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_answer_is_decoded(ups, coding):
    a, b, h = ups
    a.script(Zipped(json.dumps(COMPLETION).encode(), coding=coding))
    with drill(a, b, h) as d:
        sent = d.chat("solo")
        assert sent.status == 200, sent.response.text
        assert sent.response.json()["choices"][0]["message"]["content"] == "zipped hello"


def test_a_compressed_stream_is_decoded_as_it_arrives(ups):
    a, b, h = ups
    a.script(ZippedStream())
    with drill(a, b, h) as d:
        sent = d.chat("solo", stream=True)
        assert sent.status == 200
        assert sent.lines[-1] == "data: [DONE]"
        text = "".join(json.loads(x[6:])["choices"][0]["delta"].get("content") or ""
                       for x in sent.lines[:-1] if json.loads(x[6:]).get("choices"))
        assert text == "zipped stream"


def test_a_compressed_context_overflow_is_recognised_and_recorded_as_text(ups):
    a, b, h = ups
    err = {"error": {"message": "This model's maximum context length is 8192 tokens",
                     "type": "invalid_request_error", "code": "context_length_exceeded"}}
    a.script(Zipped(json.dumps(err).encode(), status=400))
    with drill(a, b, h) as d:
        sent = d.chat("r")
        assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
        dec = d.decision(sent.request_id)
        assert attempts(dec) == [("first", "overflow"), ("second", None)]
        assert dec["attempts"][0]["error"] == "This model's maximum context length is 8192 tokens"


def test_we_ask_for_identity(ups):
    a, b, h = ups
    with drill(a, b, h) as d:
        assert d.chat("solo").status == 200
    assert a.requests[-1].headers["accept-encoding"] == "identity"


# -- proxies -----------------------------------------------------------------------


def test_a_provider_proxy_carries_calls_and_never_shows_its_credentials(ups):
    a, b, h = ups
    with ForwardProxy(credentials=("u", "s3cret")) as px:
        extra = f'proxy = "{px.url_with("u", "s3cret")}"\nhealth_path = "/health"'
        with drill(a, b, h, a_extra=extra) as d:
            sent = d.chat("solo")
            assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "first"
            config = d.http.get("/v1/config").text
            assert "s3cret" not in config and "[redacted]@127.0.0.1" in config
            assert "s3cret" not in repr(d.gw.config.providers["a"])
        methods = [(m, t) for m, t, _ in px.seen]
        assert ("POST", f"{a.url}/chat/completions") in methods  # absolute form
        assert ("GET", f"{a.origin}/health") in methods  # the readiness probe too
        assert all(auth and auth.startswith("Basic ") for _, _, auth in px.seen)


def test_a_wrong_proxy_password_is_a_connection_failure_without_the_password(ups, ca):
    a, b, h = ups
    with ForwardProxy(credentials=("u", "right")) as px, tls_server(
            ca, completion_bytes()) as srv:
        extra = f'proxy = "{px.url_with("u", "wrong-pw")}"'
        with drill(srv.url + "/v1", b, h, a_extra=extra) as d:
            alone = d.chat("solo")
            assert alone.status == 502
            msg = alone.error_message()
            assert "407" in msg and f"127.0.0.1:{px.port}" in msg and "wrong-pw" not in msg
            dec = d.decision(alone.request_id)
            assert "wrong-pw" not in json.dumps(dec)


def test_a_proxys_407_to_a_plain_http_call_is_a_502_that_fails_over(ups):
    """An http upstream is called through the proxy in absolute form, so the proxy's
    refusal comes back as an HTTP answer: it is the proxy's (a ``ProxyFailure``, 502,
    failing over), never handed on as the upstream's 407, which would ask the client
    for proxy credentials it has nothing to do with."""
    a, b, h = ups
    with ForwardProxy(credentials=("u", "right")) as px:
        extra = f'proxy = "{px.url_with("u", "wrong-pw")}"'
        with drill(a, b, h, a_extra=extra) as d:
            alone = d.chat("solo")
            assert alone.status == 502, alone.response.text
            msg = alone.error_message()
            assert "407" in msg and f"127.0.0.1:{px.port}" in msg and "wrong-pw" not in msg
            dec = d.decision(alone.request_id)
            assert dec["attempts"][0]["failure_class"] == "connection"
            assert "wrong-pw" not in json.dumps(dec)
            routed = d.chat("r")
            assert routed.status == 200
            assert routed.response.headers["x-humpyard-target"] == "second"
        assert a.requests_to("/chat/completions") == []  # nothing reached the upstream
        assert px.seen and {m for m, _, _ in px.seen} == {"POST"}  # absolute form


def test_environment_proxies_and_no_proxy(ups, monkeypatch, ca):
    a, b, h = ups
    with ForwardProxy() as px, tls_server(ca, completion_bytes()) as srv:
        bundle = Path(__file__).parent / "_ca.pem"  # SSL_CERT_FILE: the private CA
        ca.cert_pem.write_to_path(str(bundle))
        try:
            monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
            monkeypatch.setenv("https_proxy", px.url)
            monkeypatch.setenv("HTTP_PROXY", px.url)
            monkeypatch.setenv("NO_PROXY", "localhost,10.0.0.0/8")
            with drill(srv.url + "/v1", b, h) as d:
                sent = d.chat("solo")  # https through a CONNECT tunnel, trusted by env
                assert sent.status == 200, sent.response.text
                assert ("CONNECT", f"127.0.0.1:{srv.port}") in [(m, t) for m, t, _ in px.seen]
                d.assert_serving()  # http through the proxy, absolute form
            assert ("POST", f"{h.url}/chat/completions") in [(m, t) for m, t, _ in px.seen]
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
            before = len(px.seen)
            with drill(srv.url + "/v1", b, h) as d:
                assert d.chat("solo").status == 200
            assert len(px.seen) == before  # bypassed
        finally:
            bundle.unlink()


# -- TLS trust ----------------------------------------------------------------------


def test_a_provider_ca_file_and_a_client_certificate(ups, ca, tmp_path):
    _, b, h = ups
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    server_ctx.verify_mode = ssl.CERT_REQUIRED  # mutual TLS
    ca.configure_trust(server_ctx)
    client_cert = ca.issue_cert("gateway.example")
    cert_file, key_file, ca_file = (tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem")
    for blob in client_cert.cert_chain_pems:
        with cert_file.open("ab") as f:
            f.write(blob.bytes())
    client_cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    with RawServer([completion_bytes()], ssl_context=server_ctx) as srv:
        extra = f'ca_file = "{ca_file}"\nclient_cert = "{cert_file}"\nclient_key = "{key_file}"'
        with drill(srv.url + "/v1", b, h, a_extra=extra) as d:
            sent = d.chat("solo")
            assert sent.status == 200, sent.response.text
        without = f'ca_file = "{ca_file}"'  # trusted, but no client certificate
        with drill(srv.url + "/v1", b, h, a_extra=without) as d:
            assert d.chat("solo").status == 502


# -- concurrency --------------------------------------------------------------------


def test_a_provider_at_its_limit_fails_over_then_answers_503_naming_it(ups):
    a, b, h = ups
    a.script(ok(["slow"], chunk_delay=2.0))
    with drill(a, b, h, a_extra="max_concurrent = 1", a_timeout=5,
               extra="[router]\nslot_wait_secs = 0.2") as d:
        with d.http.stream("POST", "/v1/chat/completions", json={
                "model": "solo", "stream": True,
                "messages": [{"role": "user", "content": "x"}]}) as held:
            assert held.status_code == 200  # holds a's only slot while it streams
            sent = d.chat("r")
            assert sent.status == 200 and sent.response.headers["x-humpyard-target"] == "second"
            assert attempts(d.decision(sent.request_id)) == [("first", "rate_limit"),
                                                             ("second", None)]
            alone = d.chat("solo")
            assert alone.status == 503
            assert "max_concurrent=1 of provider a" in alone.error_message()
            text = d.http.get("/metrics").text
            assert 'humpyard_upstream_in_flight{provider="a"} 1' in text
            assert 'humpyard_upstream_slot_timeouts_total{provider="a"} 2' in text
        assert d.health("a/ma").state == "healthy"  # our limit, not the endpoint's fault


def test_more_than_512_calls_are_in_flight_at_once():
    """The old transport allowed 512 per process, silently queueing the rest."""
    n = 600
    arrived = 0
    release = asyncio.Event()

    async def main() -> None:
        nonlocal arrived
        all_in = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal arrived
            await reader.readuntil(b"\r\n\r\n")
            arrived += 1
            if arrived == n:
                all_in.set()
            await release.wait()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            writer.close()

        from humpyard.config.spec import ProviderSpec
        from humpyard.upstream.client import UpstreamClient
        server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        client = UpstreamClient()
        p = ProviderSpec(name="p", base_url=f"http://127.0.0.1:{port}", timeout_secs=30)

        async def one() -> bytes:
            resp = await client.open(p, "/x", b"{}")
            try:
                return await resp.read()
            finally:
                await resp.aclose()
        calls = [asyncio.ensure_future(one()) for _ in range(n)]
        try:
            async with asyncio.timeout(20):
                await all_in.wait()  # every call reached the upstream before any answered
            release.set()
            assert await asyncio.gather(*calls) == [b"ok"] * n
        finally:
            release.set()
            await client.aclose()
            server.close()
            await server.wait_closed()
    asyncio.run(main())

"""``FastTransport`` against real servers on loopback: bodies, keep-alive, errors, timeouts.

Most tests drive it through ``HttpxBridge`` (httpx's API, as the readiness probes
and quota polls use it); ``failure()`` reads the transport's own ``TransportFailure``
under the httpx exception. ``tests/faults/test_pool.py`` and the end-to-end tests
cover the request path, ``UpstreamClient.open`` on the transport directly.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import gc
import json
import select
import socket
import ssl
import threading
import time
import types
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from humpyard.config.spec import ProviderSpec
from humpyard.upstream import errors as E
from humpyard.upstream.bridge import HttpxBridge
from humpyard.upstream.client import UpstreamClient
from humpyard.upstream.errors import TransportFailure
from humpyard.upstream.transport import FastTransport
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import ServerThread, closed_port_url
from tests.support.steps import (
    Exchange,
    Step,
    delay,
    ok,
    reset,
    stall,
    status,
    stream_then_fail,
    stream_then_stall,
)

CHAT = "/chat/completions"


@pytest.fixture
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream() as server:
        yield server


def run(test: Callable[[httpx.AsyncClient, FastTransport], Awaitable[Any]],
        **transport: Any) -> Any:
    """Run ``test`` with a client over a fresh ``FastTransport``; both closed after."""
    async def main() -> Any:
        t = FastTransport(**transport)
        async with httpx.AsyncClient(transport=HttpxBridge(t), timeout=5) as client:
            return await test(client, t)
    return asyncio.run(main())


def chat(stream: bool = False) -> dict[str, Any]:
    return {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}


def sse_text(raw: bytes) -> str:
    parts = []
    for line in raw.decode().split("\n"):
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


@dataclass(frozen=True)
class Raw(Step):
    """Write ``data`` as is; then keep the connection (``keep``) or close it."""

    data: bytes
    keep: bool = True

    async def respond(self, ex: Exchange) -> bool:
        await ex.write(self.data)
        if not self.keep:
            ex.drop()
        return self.keep


@dataclass(frozen=True)
class CloseAfter(Step):
    """Do ``then``, then close the connection (no ``Connection: close`` header)."""

    then: Step

    async def respond(self, ex: Exchange) -> bool:
        await self.then.respond(ex)
        return False


@dataclass(frozen=True)
class CloseWhen(Step):
    """Answer ``ok()``, then close the connection once ``signal`` is set."""

    signal: threading.Event

    async def respond(self, ex: Exchange) -> bool:
        await ok().respond(ex)
        await asyncio.to_thread(self.signal.wait, 10)
        return False


# -- bodies ------------------------------------------------------------------------


def test_buffered_answer(up: FakeUpstream) -> None:
    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        r = await c.post(up.url + CHAT, json=chat(), headers={"x-test": "1"})
        assert r.status_code == 200 and r.http_version == "HTTP/1.1"
        assert r.json()["choices"][0]["message"]["content"] == "hello"
        assert r.headers["content-type"] == "application/json"
    run(test)
    [req] = up.requests
    assert req.method == "POST" and req.path == "/v1/chat/completions"
    assert req.headers["x-test"] == "1" and req.headers["host"] == f"127.0.0.1:{up.port}"
    assert req.json == chat()


def test_large_bodies_both_ways(up: FakeUpstream) -> None:
    text = "x" * 300_000

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        up.script(ok(text))
        big = chat() | {"pad": "y" * 200_000}  # more than one write
        r = await c.post(up.url + CHAT, json=big)
        assert r.json()["choices"][0]["message"]["content"] == text
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        assert t.connects == 1
    run(test)
    assert up.requests[0].json["pad"] == "y" * 200_000


def test_stream_chunks_arrive_as_they_are_sent(up: FakeUpstream) -> None:
    up.script(ok(["one ", "two ", "three"], chunk_delay=0.3))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        t0 = time.monotonic()
        seen: list[tuple[float, bytes]] = []
        async with c.stream("POST", up.url + CHAT, json=chat(True)) as r:
            assert r.headers["transfer-encoding"] == "chunked"
            async for chunk in r.aiter_raw():
                seen.append((time.monotonic() - t0, chunk))
        # each event as it was sent: the first long before the server sent the last
        assert seen[-1][0] - seen[0][0] > 0.8
        assert len(seen) >= 4
        raw = b"".join(chunk for _, chunk in seen)
        assert sse_text(raw) == "one two three" and raw.endswith(b"data: [DONE]\n\n")
        assert len(t.connections) == 1 and t.connections[0].is_idle()  # back in the pool
    run(test)


def test_chunked_with_extensions_and_trailers(up: FakeUpstream) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    up.script(Raw(head + b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-T: 1\r\n\r\n"))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        r = await c.get(up.origin + "/x")
        assert r.content == b"hello world"
        assert (await c.get(up.origin + "/y")).status_code == 200
        assert t.connects == 1
    run(test)


def test_body_until_close_and_informational_answers(up: FakeUpstream) -> None:
    up.script(Raw(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\nuntil the end", keep=False),
              Raw(b"HTTP/1.1 204 No Content\r\n\r\n"))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        r = await c.get(up.origin + "/x")
        assert r.status_code == 200 and r.content == b"until the end"
        assert (await c.get(up.origin + "/y")).status_code == 204
        assert (await c.head(up.origin + "/health")).status_code == 200  # no body read
        assert t.connects == 2
    run(test)


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    b"HTTP/1.1 2x0 OK\r\n\r\n", b"SPDY/3 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n"])
def test_malformed_answers_are_protocol_errors(up: FakeUpstream, data: bytes) -> None:
    up.script(Raw(data, keep=False))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        with pytest.raises(httpx.RemoteProtocolError):
            await c.get(up.origin + "/x")
        assert t.connections == []
    run(test)


def test_header_injection_is_refused(up: FakeUpstream) -> None:
    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        with pytest.raises(httpx.LocalProtocolError):
            await c.get(up.origin + "/x", headers={"x-a": "1\r\nx-b: 2"})
    run(test)
    assert up.requests == []


# -- keep-alive --------------------------------------------------------------------


def test_sequential_requests_share_one_connection(up: FakeUpstream) -> None:
    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        for i in range(30):
            r = await c.post(up.url + CHAT, json=chat(stream=i % 2 == 1))
            assert r.status_code == 200
        assert (await c.get(up.origin + "/health")).json() == {"status": "ok"}
        assert t.connects == 1
        assert [c.is_idle() for c in t.connections] == [True]
    run(test)
    assert len(up.requests) == 31


def test_fifty_concurrent_requests(up: FakeUpstream) -> None:
    up.default = delay(0.05)

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        async def one(i: int) -> str:
            r = await c.post(up.url + CHAT, json=chat(stream=i % 3 == 0))
            assert r.status_code == 200
            if i % 3 == 0:
                return sse_text(r.content)
            return str(r.json()["choices"][0]["message"]["content"])
        texts = await asyncio.gather(*(one(i) for i in range(50)))
        assert texts == ["hello"] * 50
        assert t.connects == 50 and len(t.connections) == 50
        assert all(c.is_idle() for c in t.connections)
        await asyncio.gather(*(one(i) for i in range(50)))
        assert t.connects == 50  # all reused
    run(test)
    assert len(up.requests) == 100


def test_connection_close_answers_are_not_reused(up: FakeUpstream) -> None:
    up.script(ok(headers={"Connection": "close"}), status(500, headers={"connection": "close"}))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        assert t.connections == []
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 500
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        assert t.connects == 3 and len(t.connections) == 1
        assert (await c.post(up.url + CHAT, json=chat(),  # the client asks to close
                             headers={"connection": "close"})).status_code == 200
        assert t.connects == 3 and t.connections == []
    run(test)


def test_idle_connection_closed_by_upstream_is_discarded(up: FakeUpstream) -> None:
    up.script(CloseAfter(ok()))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        [conn] = t.connections
        for _ in range(100):  # the FIN reaches the event loop
            if not conn.usable():
                break
            await asyncio.sleep(0.01)
        assert not conn.usable()
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        assert t.connects == 2 and len(t.connections) == 1
    run(test)
    assert len(up.requests) == 2


def test_an_idle_connection_closed_before_the_loop_saw_it_is_not_written_to(
        up: FakeUpstream) -> None:
    # A busy gateway's loop can take a pooled connection whose close (an upstream's
    # idle timeout, just then) is in the socket but not delivered yet. Written to,
    # it fails, and a request that was written is never re-sent.
    close = threading.Event()
    up.script(CloseWhen(close))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        [conn] = t.connections
        assert conn.usable()
        close.set()
        fd = conn.transport.get_extra_info("socket").fileno()
        assert select.select([fd], [], [], 10)[0] == [fd]  # the FIN is in; no loop turn
        assert conn.usable()  # as far as the loop knows
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        assert t.connects == 2
    run(test)
    assert len(up.requests) == 2


def test_idle_connections_expire(up: FakeUpstream) -> None:
    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        await asyncio.gather(*(c.post(up.url + CHAT, json=chat()) for _ in range(3)))
        assert len(t.connections) == 3
        await asyncio.sleep(0.3)
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        assert len(t.connections) == 1 and t.connects == 4
    run(test, keepalive_expiry=0.2)


def test_idle_connections_per_origin_are_capped(up: FakeUpstream) -> None:
    up.default = delay(0.05)

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        await asyncio.gather(*(c.post(up.url + CHAT, json=chat()) for _ in range(6)))
        assert t.connects == 6 and len(t.connections) == 2
    run(test, max_idle_per_origin=2)


def test_a_reused_connection_that_fails_after_sending_is_not_re_sent(up: FakeUpstream) -> None:
    # the upstream read the request, then dropped the connection: it may have run it,
    # so the transport reports the failure instead of sending the request again
    up.script(ok("first"), reset(), ok("again"), reset(hard=False), ok("third"))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        with pytest.raises(httpx.ReadError):
            await c.post(up.url + CHAT, json=chat())
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        with pytest.raises(httpx.ReadError):  # closed (FIN) after reading the request
            await c.post(up.url + CHAT, json=chat())
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        assert t.connects == 3
    run(test)
    assert len(up.requests) == 5


def test_a_pooled_connection_closed_while_idle_is_not_used(up: FakeUpstream) -> None:
    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        [conn] = t.connections
        conn.transport.abort()  # as if the upstream's FIN had arrived
        await asyncio.sleep(0)
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        assert t.connects == 2
    run(test)
    assert len(up.requests) == 2


def test_no_retry_on_a_new_connection_or_once_the_answer_started(up: FakeUpstream) -> None:
    up.script(reset(), ok(), stream_then_fail(), ok(), reset(), reset())

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        with pytest.raises(httpx.ReadError):  # a new connection: not retried
            await c.post(up.url + CHAT, json=chat())
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        with pytest.raises(httpx.ReadError):  # head and half a body, then FIN
            await c.post(up.url + CHAT, json=chat())
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        with pytest.raises(httpx.ReadError):  # reused, reset: never re-sent
            await c.post(up.url + CHAT, json=chat())
    run(test)
    assert len(up.requests) == 5


# -- closing -----------------------------------------------------------------------


def test_closing_a_stream_early_closes_its_connection(up: FakeUpstream) -> None:
    up.script(ok(["a", "b", "c", "d"], chunk_delay=0.2))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        async with c.stream("POST", up.url + CHAT, json=chat(True)) as r:
            [conn] = t.connections
            async for _ in r.aiter_raw():
                break
        assert conn.is_closed() and t.connections == []
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
        assert t.connects == 2
    run(test)


def test_closing_unread_but_complete_answer_keeps_the_connection(up: FakeUpstream) -> None:
    # One write: the body is in with the head, whenever the upstream's thread runs.
    body = b'{"status":"ok"}'
    up.health_step = Raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        for _ in range(3):
            async with c.stream("GET", up.origin + "/health") as r:
                assert r.status_code == 200
        assert t.connects == 1
    run(test)


def test_aclose_closes_every_connection(up: FakeUpstream) -> None:
    up.default = delay(0.05)

    async def main() -> None:
        t = FastTransport()
        c = httpx.AsyncClient(transport=HttpxBridge(t))
        await asyncio.gather(*(c.post(up.url + CHAT, json=chat()) for _ in range(5)))
        up.script(ok(["a", "b"], chunk_delay=0.5))  # still streaming at the close
        busy = await c.send(c.build_request("POST", up.url + CHAT, json=chat(True)), stream=True)
        conns = t.connections
        assert len(conns) == 5 and sum(not x.is_idle() for x in conns) == 1
        await c.aclose()
        assert all(x.is_closed() for x in conns) and t.connections == []
        await busy.aclose()
        with pytest.raises(httpx.ConnectError):
            await HttpxBridge(t).handle_async_request(httpx.Request("GET", up.origin + "/health"))
    asyncio.run(main())


# -- errors ------------------------------------------------------------------------


def failure(e: httpx.HTTPError, url: str) -> tuple[type, str]:
    """The transport's own failure (its class, its message) under the bridge's httpx one."""
    f = e.__cause__
    assert isinstance(f, TransportFailure), f
    assert f"{url.split('/')[2]}" in f.message or url.split("/")[2].split(":")[0] in f.message
    return type(f), f.message


def test_refused() -> None:
    url = closed_port_url()

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        with pytest.raises(httpx.ConnectError) as info:
            await c.get(url)
        assert isinstance(info.value.__cause__.__cause__, ConnectionRefusedError)
        assert "refused" in str(info.value)
        port = url.split(":")[2].split("/")[0]
        assert failure(info.value, url) == (E.ConnectRefused, f"connect refused 127.0.0.1:{port}")
        assert t.connections == []
    run(test)


def test_dns_failure() -> None:
    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        async def no_such_name(*args: Any, **kw: Any) -> Any:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        asyncio.get_running_loop().getaddrinfo = no_such_name  # type: ignore[method-assign]
        url = "http://no-such-host.invalid/v1"
        with pytest.raises(httpx.ConnectError) as info:
            await c.get(url)
        assert isinstance(info.value.__cause__.__cause__, socket.gaierror)
        assert failure(info.value, url) == (E.NameNotResolved,
                                            "dns lookup failed no-such-host.invalid")
    run(test)


@contextmanager
def unanswered_port() -> Iterator[int]:
    """A port whose accept queue is full: connecting hangs (SYNs are dropped)."""
    srv = socket.socket()
    fillers: list[socket.socket] = []
    try:
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        for _ in range(4):
            s = socket.socket()
            fillers.append(s)
            s.setblocking(False)
            try:
                s.connect(srv.getsockname())
            except BlockingIOError:
                pass
        yield srv.getsockname()[1]
    finally:
        for s in fillers:
            s.close()
        srv.close()


def test_connect_timeout() -> None:
    with unanswered_port() as port:
        url = f"http://127.0.0.1:{port}/v1"

        async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
            t0 = time.monotonic()
            with pytest.raises(httpx.ConnectTimeout) as info:
                await c.get(url, timeout=httpx.Timeout(5, connect=0.3))
            assert 0.25 < time.monotonic() - t0 < 2
            assert failure(info.value, url)[0] is E.ConnectTimeout
        run(test)


def test_read_timeouts_before_and_during_the_body(up: FakeUpstream) -> None:
    up.script(stall(), stream_then_stall(["partial "]), delay(0.1))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        quick = httpx.Timeout(5, read=0.3)
        with pytest.raises(httpx.ReadTimeout) as info:
            await c.post(up.url + CHAT, json=chat(), timeout=quick)
        assert failure(info.value, up.url)[0] is E.ReadTimeout
        async with c.stream("POST", up.url + CHAT, json=chat(True), timeout=quick) as r:
            got = b""
            with pytest.raises(httpx.ReadTimeout):
                async for chunk in r.aiter_raw():
                    got += chunk
            assert b"partial" in got
        # a slow answer within the read timeout is fine
        assert (await c.post(up.url + CHAT, json=chat(), timeout=quick)).status_code == 200
        assert len(t.connections) == 1
    run(test)


def test_write_timeout() -> None:
    srv = socket.socket()  # listens, never reads: the kernel buffers fill up
    try:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        url = f"http://127.0.0.1:{srv.getsockname()[1]}/v1"

        async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
            with pytest.raises(httpx.WriteTimeout) as info:
                await c.post(url, content=b"x" * (64 << 20), timeout=httpx.Timeout(5, write=0.3))
            assert failure(info.value, url)[0] is E.WriteTimeout
            assert t.connections == []
        run(test)
    finally:
        srv.close()


@pytest.mark.parametrize(("step", "closed"), [(reset(), False), (reset(hard=False), True)],
                         ids=["rst", "fin"])
def test_reset_before_the_answer(up: FakeUpstream, step: Step, closed: bool) -> None:
    up.script(step)

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        with pytest.raises(httpx.ReadError) as info:
            await c.post(up.url + CHAT, json=chat())
        kind, message = failure(info.value, up.url)
        assert kind is E.ConnectionLost and f"127.0.0.1:{up.port}" in message
        assert message.startswith("connection closed by upstream" if closed
                                  else "connection reset")
        assert t.connections == []
    run(test)


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
def test_connection_lost_mid_body(up: FakeUpstream, stream: bool) -> None:
    up.script(stream_then_fail(["partial "]))

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        async with c.stream("POST", up.url + CHAT, json=chat(stream)) as r:
            assert r.status_code == 200
            with pytest.raises(httpx.ReadError) as info:
                await r.aread()
        message = failure(info.value, up.url)[1]
        assert message == f"connection closed by upstream 127.0.0.1:{up.port}"
        assert t.connections == []
    run(test)


def test_cancelled_read_releases_the_slot_and_the_connection(up: FakeUpstream) -> None:
    up.script(stall())

    async def test(c: httpx.AsyncClient, t: FastTransport) -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await c.post(up.url + CHAT, json=chat())
        assert t.connections == []
        assert (await c.post(up.url + CHAT, json=chat())).status_code == 200
    run(test)


# -- wiring, TLS -----------------------------------------------------------------------


def test_upstream_client_uses_it_and_tls_context_is_lazy(up: FakeUpstream) -> None:
    async def main() -> None:
        client = UpstreamClient()
        t = client.fast
        assert isinstance(t, FastTransport)
        assert isinstance(client.http._transport, HttpxBridge)  # side traffic: same pool
        assert client.http._transport.fast is t
        assert t._contexts == {}
        assert (await client.http.get(up.origin + "/health")).status_code == 200
        assert t._contexts == {}  # plain http never builds one
        await client.aclose()
    asyncio.run(main())


def _certificate(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp / "cert.pem", tmp / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


async def _hello(scope: Any, receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"over tls"})


def test_https_to_a_local_tls_server(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    with ServerThread(_hello, lifespan="off", ssl_certfile=str(cert),
                      ssl_keyfile=str(key)) as srv:
        url = f"https://localhost:{srv.port}/x"

        async def trusted(c: httpx.AsyncClient, t: FastTransport) -> None:
            for _ in range(3):
                r = await c.get(url)
                assert r.status_code == 200 and r.text == "over tls"
            assert t.connects == 1
        run(trusted, ssl_context=ssl.create_default_context(cafile=str(cert)))

        async def default(c: httpx.AsyncClient, t: FastTransport) -> None:
            assert t._contexts == {}  # not built at construction
            with pytest.raises(httpx.ConnectError) as info:
                await c.get(url)  # the default trust store does not know this certificate
            assert isinstance(info.value.__cause__.__cause__, ssl.SSLCertVerificationError)
            assert isinstance(info.value.__cause__, E.TLSVerifyFailed)
            assert [type(x) for x in t._contexts.values()] == [ssl.SSLContext]
        run(default)


def test_a_write_timeout_leaves_no_cycles() -> None:
    """An upstream that never reads: the write waits for the socket's buffer to drain,
    times out, and the wait's future (which holds the ``TimeoutError``) is dropped
    before the failure goes on, so nothing of the call is left for the collector."""
    srv = socket.socket()  # listens, never reads: the kernel buffers fill up
    try:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        p = ProviderSpec(name="p", base_url=f"http://127.0.0.1:{srv.getsockname()[1]}/v1",
                         timeout_secs=0.3, connect_timeout_secs=5)

        async def once(client: UpstreamClient) -> None:
            try:
                await client.open(p, "/x", b"x" * (64 << 20))
            except E.WriteTimeout:
                return
            raise AssertionError("no write timeout")

        async def main() -> collections.Counter[str]:
            client = UpstreamClient(env={})
            try:
                await once(client)
                gc.collect()
                gc.set_debug(gc.DEBUG_SAVEALL)
                try:
                    await once(client)
                    gc.collect()
                    return collections.Counter(
                        type(o).__name__ for o in gc.garbage
                        if isinstance(o, BaseException) or type(o).__name__ == "Conn"
                        or (isinstance(o, types.FrameType)
                            and "humpyard" in o.f_code.co_filename))
                finally:
                    gc.set_debug(0)
                    gc.garbage.clear()
            finally:
                await client.aclose()
        left = asyncio.run(main())
        assert not left, f"left for the collector: {dict(left)}"
    finally:
        srv.close()

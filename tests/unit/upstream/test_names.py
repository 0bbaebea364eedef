"""Names and addresses: IDNA 2008, IPv6 literals, Happy Eyeballs over real sockets.

Name resolution is the event loop's ``getaddrinfo`` (the process edge); tests
that need a name to resolve somewhere replace it on the running loop.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import gc
import os
import socket
import time
import types
from typing import Any

import pytest

from humpyard.config.spec import ProviderSpec
from humpyard.upstream import errors as E
from humpyard.upstream.client import UpstreamClient
from tests.support.rawserver import RawServer

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def resolve_to(table: dict[str, list[tuple[int, str]]]) -> Any:
    async def getaddrinfo(host: str, port: int, *args: Any, **kw: Any) -> list[Any]:
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "",
                 (addr, port) if family == socket.AF_INET else (addr, port, 0, 0))
                for family, addr in table[host]]
    return getaddrinfo


async def call(client: UpstreamClient, url: str) -> bytes:
    p = ProviderSpec(name="p", base_url=url, timeout_secs=5, connect_timeout_secs=5)
    resp = await client.open(p, "/x", b"{}")
    try:
        return await resp.read()
    finally:
        await resp.aclose()


def test_an_idna_2008_name_is_sent_as_such() -> None:
    with RawServer([OK]) as srv:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            loop.getaddrinfo = resolve_to(  # type: ignore[method-assign]
                {"xn--strae-oqa.example": [(socket.AF_INET, "127.0.0.1")],
                 "strasse.example": [(socket.AF_INET, "127.0.0.1")]})
            client = UpstreamClient()
            try:
                assert await call(client, f"http://straße.example:{srv.port}/v1") == b"ok"
            finally:
                await client.aclose()
        asyncio.run(main())
        # IDNA 2003 (Python's "idna" codec) maps ß to ss: strasse.example
        assert b"\r\nHost: xn--strae-oqa.example:%d\r\n" % srv.port in srv.requests[0]


def test_an_ipv6_literal() -> None:
    with RawServer([OK], host="::1") as srv:
        async def main() -> None:
            client = UpstreamClient(env={})
            try:
                assert await call(client, f"http://[::1]:{srv.port}/v1") == b"ok"
                r = await client.http.get(f"http://[::1]:{srv.port}/health")
                assert r.status_code == 200
            finally:
                await client.aclose()
        asyncio.run(main())
        assert b"\r\nHost: [::1]:%d\r\n" % srv.port in srv.requests[0]


def _blackhole() -> tuple[socket.socket, list[socket.socket]]:
    """A listener on 127.0.0.2 whose accept queue is full: a connection to it gets no
    answer to its handshake (the SYN is dropped), so the attempt neither fails nor
    succeeds until it is cancelled."""
    hole = socket.socket()
    hole.bind(("127.0.0.2", 0))
    hole.listen(0)
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(hole.getsockname())
        except BlockingIOError:
            pass
        fillers.append(s)
    return hole, fillers


def test_happy_eyeballs_moves_on_from_an_address_that_does_not_answer() -> None:
    """The first address takes the connection and never answers the TCP handshake
    (its accept queue is full); the second answers at once."""
    blackhole, fillers = _blackhole()
    try:
        with RawServer([OK]) as srv:
            port = blackhole.getsockname()[1]

            async def main() -> float:
                loop = asyncio.get_running_loop()
                orig = loop.sock_connect

                async def connect(sock: socket.socket, address: Any) -> None:
                    if address[0] == "127.0.0.1":  # the good address, on the server's port
                        address = (address[0], srv.port)
                    await orig(sock, address)
                loop.sock_connect = connect  # type: ignore[method-assign]
                loop.getaddrinfo = resolve_to({"dual.example": [  # type: ignore[method-assign]
                    (socket.AF_INET, "127.0.0.2"), (socket.AF_INET, "127.0.0.1")]})
                client = UpstreamClient()
                try:
                    t0 = time.monotonic()
                    assert await call(client, f"http://dual.example:{port}/v1") == b"ok"
                    return time.monotonic() - t0
                finally:
                    await client.aclose()
            elapsed = asyncio.run(main())
            assert elapsed < 4  # not the 5 s connect timeout
    finally:
        for s in fillers:
            s.close()
        blackhole.close()


@pytest.mark.parametrize(("second", "want"), [
    (None, E.ConnectRefused),  # both refused: a refusal
    (errno.EHOSTUNREACH, E.HostUnreachable),  # a refusal and more: the more telling one
])
def test_when_every_address_fails_the_failure_names_the_most_telling(
        second: int | None, want: type) -> None:
    """Two addresses, nothing listening at either: the race's failures, not the first
    one alone, decide what is reported (a refusal only if every address refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there

    async def main() -> BaseException:
        loop = asyncio.get_running_loop()
        orig = loop.sock_connect

        async def connect(sock: socket.socket, address: Any) -> None:
            if address[0] == "127.0.0.2" and second is not None:
                raise OSError(second, os.strerror(second))
            await orig(sock, ("127.0.0.1", address[1]))
        loop.sock_connect = connect  # type: ignore[method-assign]
        loop.getaddrinfo = resolve_to({"dual.example": [  # type: ignore[method-assign]
            (socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "127.0.0.2")]})
        client = UpstreamClient()
        try:
            with pytest.raises(E.TransportFailure) as raised:
                await call(client, f"http://dual.example:{port}/v1")
            return raised.value
        finally:
            await client.aclose()
    failure = asyncio.run(main())
    assert type(failure) is want, failure


@pytest.mark.parametrize("first", ["refused", "silent", "both_refused", "cut_short"])
def test_a_raced_dial_leaves_nothing_for_the_collector(first: str) -> None:
    """A name with two addresses, dialled anew for every call (``connection: close``):
    the first address refuses, never answers (the second is tried after the Happy
    Eyeballs delay and wins), or both refuse (the call fails), or the connect
    timeout cuts the race short while the first is still silent. The race ran on
    ``asyncio.staggered``, whose closures and tasks hold each other: every such
    dial left its tasks, coroutines, futures and cancellations for the collector
    (ADR 0030). A collection that keeps what it finds (``gc.DEBUG_SAVEALL``) after
    the calls must find none of them, nor any exception or frame of the gateway's."""
    answer = (b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
    hole, fillers = _blackhole() if first in ("silent", "cut_short") else (None, [])
    with RawServer([answer]) as srv:
        good = srv.port
        if first == "both_refused":
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            good = s.getsockname()[1]
            s.close()  # nothing listens there
        port = hole.getsockname()[1] if hole is not None else srv.port

        async def main() -> list[object]:
            loop = asyncio.get_running_loop()
            orig = loop.sock_connect

            async def connect(sock: socket.socket, address: Any) -> None:
                if address[0] == "127.0.0.1":  # the good address, on the server's port
                    address = (address[0], good)
                await orig(sock, address)
            loop.sock_connect = connect  # type: ignore[method-assign]
            loop.getaddrinfo = resolve_to({"dual.example": [  # type: ignore[method-assign]
                (socket.AF_INET, "127.0.0.2"), (socket.AF_INET, "127.0.0.1")]})
            client = UpstreamClient()
            p = ProviderSpec(name="p", base_url=f"http://dual.example:{port}/v1",
                             timeout_secs=5,
                             connect_timeout_secs=0.05 if first == "cut_short" else 5)

            async def one() -> None:
                if first in ("both_refused", "cut_short"):
                    want = E.ConnectRefused if first == "both_refused" else E.ConnectTimeout
                    with pytest.raises(want):
                        await client.open(p, "/x", b"{}")
                    return
                resp = await client.open(p, "/x", b"{}")
                try:
                    assert await resp.read() == b"ok"
                finally:
                    await resp.aclose()
            try:
                await one()  # the client's own first-use objects
                gc.collect()
                gc.set_debug(gc.DEBUG_SAVEALL)
                try:
                    for _ in range(4):
                        await one()
                    await asyncio.sleep(0)  # the cancelled attempts finish
                    gc.collect()
                    return list(gc.garbage)
                finally:
                    gc.set_debug(0)
                    gc.garbage.clear()
            finally:
                await client.aclose()
        try:
            garbage = asyncio.run(main())
        finally:
            for s in fillers:
                s.close()
            if hole is not None:
                hole.close()
    left = collections.Counter(
        type(o).__name__ for o in garbage
        if isinstance(o, BaseException | asyncio.Future)
        or type(o).__name__ in ("coroutine", "TimerHandle", "Context")
        or (isinstance(o, types.FrameType) and "humpyard" in o.f_code.co_filename))
    assert not left, f"left for the collector: {dict(left)}"
    if first in ("refused", "silent"):
        assert len(srv.requests) == 5

"""``FastTransport``: the upstream HTTP/1.1 client transport, on asyncio protocols.

It replaces httpx + httpcore on the request path, most of the gateway's CPU per
upstream call (docs/decisions/0003): the caller hands over a pre-built request
head and body (sent in one write) and gets the answer's status, headers and an
unread ``Body``. Per ``Origin`` (scheme, host, port, proxy, TLS settings) a LIFO
list of idle keep-alive connections (up to ``max_idle_per_origin``: LLM traffic
holds hundreds of calls per origin at once, and every connection dropped when
they end is one to dial again when they come back); one found closed by the upstream, idle past
``keepalive_expiry``, or sent bytes nobody asked for is dropped when taken (closed
counts even when only the socket knows yet: ``Conn.stale``).
Framing is httptools' parser (``upstream/framing.py``); connecting, proxies and
TLS are ``upstream/dial.py``. A request that failed after it was written is
never re-sent (docs/health.md, "Never-delivered re-sends"). Every failure is a
``TransportFailure`` of the tree in ``upstream/errors.py``. One event loop at a
time (a new loop starts with an empty pool). ``upstream/bridge.py`` puts httpx's
transport API over it for the readiness probes and quota polls. How many calls
may be in flight is not the transport's business: ``upstream/limits.py`` decides
that per provider.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from humpyard.upstream.body import Body
from humpyard.upstream.connection import Conn
from humpyard.upstream.dial import Origin, dial
from humpyard.upstream.errors import (
    ConnectionLost,
    ProxyFailure,
    ReadTimeout,
    TransportClosed,
    TransportFailure,
)
from humpyard.upstream.framing import ResponseParser
from humpyard.upstream.tls import DEFAULT_TLS, TLSOptions, build_context

__all__ = ["Answer", "FastTransport", "Origin", "Timeouts"]


class Timeouts(NamedTuple):
    """Seconds (None: no limit) for connecting, the answer's head, and each write;
    ``idle`` bounds each wait inside the body (None: ``read``'s). A wait that runs
    out raises ``head_failure`` or ``body_failure`` (``ReadTimeout`` or a subclass
    naming the limit: ``FirstByteTimeout``, ``IdleTimeout``)."""

    connect: float | None
    read: float | None
    write: float | None
    idle: float | None = None
    head_failure: type[ReadTimeout] = ReadTimeout
    body_failure: type[ReadTimeout] = ReadTimeout


class Answer(NamedTuple):
    """An answer's head; ``body`` is still unread (iterate it, or ``aclose()`` it)."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: Body


class FastTransport:
    """A keep-alive HTTP/1.1 client transport; see the module docstring.

    ``ssl_context`` replaces the default trust (``upstream/tls.py``) for origins
    without their own TLS settings; ``env`` is where ``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR`` are read (default: the process environment, when first needed).
    """

    def __init__(self, *, max_idle_per_origin: int = 10_000, keepalive_expiry: float = 60.0,
                 ssl_context: ssl.SSLContext | None = None,
                 env: Mapping[str, str] | None = None):
        self.max_idle_per_origin = max_idle_per_origin
        self.keepalive_expiry = keepalive_expiry
        self._env = env
        self._contexts: dict[TLSOptions, ssl.SSLContext] = {}
        if ssl_context is not None:
            self._contexts[DEFAULT_TLS] = ssl_context
        self._idle: dict[Origin, list[Conn]] = {}
        self._all: set[Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.connects = 0  # connections opened so far

    @property
    def connections(self) -> list[Conn]:
        """Every open connection, idle or in use (``is_closed()``, ``is_idle()``)."""
        return list(self._all)

    def context(self, options: TLSOptions | None) -> ssl.SSLContext:
        """The TLS context for ``options`` (built on first use, then shared)."""
        key = options or DEFAULT_TLS
        ctx = self._contexts.get(key)
        if ctx is None:
            env = self._env if self._env is not None else os.environ
            ctx = self._contexts[key] = build_context(key, env)
        return ctx

    # -- the pool -----------------------------------------------------------------

    def _take(self, origin: Origin, now: float) -> Conn | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < self.keepalive_expiry and conn.usable() \
                    and not conn.stale():
                conn.busy = True
                return conn
            self._drop(conn)
            if now - conn.idle_since >= self.keepalive_expiry:  # LIFO: the rest is older
                while idle:
                    self._drop(idle.pop())
        return None

    def _putter(self, origin: Origin) -> Callable[[Conn], None]:
        return lambda conn: self._put(origin, conn)

    def _put(self, origin: Origin, conn: Conn) -> None:
        conn.parser = None
        if self._closed or conn not in self._all or not conn.usable():
            return self._drop(conn)
        idle = self._idle.setdefault(origin, [])
        now = conn.idle_since = asyncio.get_running_loop().time()
        conn.busy = False
        if idle and now - idle[0].idle_since >= self.keepalive_expiry:
            self._drop(idle.pop(0))
        if len(idle) >= self.max_idle_per_origin:
            return self._drop(conn)
        idle.append(conn)

    def _drop(self, conn: Conn) -> None:
        self._all.discard(conn)
        conn.close()

    # -- one request ----------------------------------------------------------------

    async def request(self, origin: Origin, head: bytes, body: bytes, timeouts: Timeouts,
                      *, head_only: bool = False, close: bool = False,
                      on_end: Callable[[], Any] | None = None) -> Answer:
        """Send ``head`` + ``body`` to ``origin``; the answer's body is unread.

        ``head`` is the request line and headers ending in an empty line (see
        ``upstream/wire.py``). ``on_end`` runs once the body is done with (or
        the request failed). Failures are ``TransportFailure``s.
        """
        try:
            loop = asyncio.get_running_loop()
            if loop is not self._loop:  # the old loop's connections cannot serve this one
                self._loop, self._idle, self._all = loop, {}, set()
            if self._closed:
                raise TransportClosed(f"the upstream client is closed ({origin.address})",
                                      origin.address)
            # A pooled connection found closed is dropped before anything is sent.
            # One that fails after the request was written is NOT re-sent: the
            # upstream may have received it (docs/health.md, "Never-delivered re-sends");
            # the executor fails over.
            conn = self._take(origin, loop.time())
            if conn is None:
                conn = await dial(origin, timeouts.connect, self.context)
                if self._closed:
                    conn.close()
                    raise TransportClosed("the upstream client is closed "
                                          f"({origin.address})", origin.address)
                self._all.add(conn)
                self.connects += 1
            answer = await self._exchange(conn, origin, head, body, timeouts, head_only,
                                          close, on_end)
        except BaseException:
            if on_end is not None:
                on_end()
            raise
        return answer

    async def _exchange(self, conn: Conn, origin: Origin, head: bytes, body: bytes,
                        timeouts: Timeouts, head_only: bool, close: bool,
                        on_end: Callable[[], Any] | None) -> Answer:
        """Send the request and read the answer's head on ``conn``, which this owns."""
        parser = conn.parser = ResponseParser(head_only)
        try:
            await conn.send(head + body if len(body) <= 65536 else head, timeouts.write)
            if len(body) > 65536:
                await conn.send(body, timeouts.write)
            status, reason, headers, _ = await conn.read_head(timeouts.read,
                                                              timeouts.head_failure)
        except TransportFailure:
            self._drop(conn)
            raise
        except OSError as e:  # a socket error the protocol did not see first
            self._drop(conn)
            raise ConnectionLost(f"connection reset {conn.addr}", conn.addr) from e
        except BaseException:
            self._drop(conn)
            raise
        if status == 407 and origin.absolute_form and origin.proxy is not None:
            # The proxy's refusal of a request sent through it in absolute form, not the
            # upstream's answer: a 407 handed on would ask the client for credentials.
            self._drop(conn)
            raise ProxyFailure(f"proxy {origin.proxy.address} answered 407 to the request "
                               f"for {origin.address}", origin.address)
        if close:
            parser.reusable = False
        return Answer(status, reason, headers,
                      Body(conn, timeouts.read if timeouts.idle is None else timeouts.idle,
                           self._putter(origin), self._drop, on_end, timeouts.body_failure))

    async def aclose(self) -> None:
        """Close every connection, idle or in use; later requests fail."""
        self._closed = True
        conns, self._all, self._idle = self._all, set(), {}
        for conn in conns:
            conn.close()
        if conns and self._loop is asyncio.get_running_loop():
            await asyncio.sleep(0)  # the transports close their sockets in a callback

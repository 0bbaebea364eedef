"""``FastTransport``: httpx's transport API over plain asyncio streams (HTTP/1.1).

It replaces httpcore, most of the gateway's CPU per upstream call, whose pool
checks every pooled connection on every request (docs/decisions/0003). Per
(scheme, host, port) a LIFO list of idle keep-alive connections (one found
closed by the upstream or idle past ``keepalive_expiry`` is dropped when taken);
at most ``max_connections`` requests in flight, each holding its connection
until its body ends or is closed; TLS context built on the first https dial.
Bodies stream as they arrive (chunked: one chunk at a time). A pooled connection
found closed is dropped before anything is sent; a request that failed after
it was written is never re-sent (seed 004). Errors are httpx's, as ``client._as_failure``
expects. One event loop at a time (a new loop starts with an empty pool).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from typing import Any

import httpx

from humpyard.upstream.wire import (
    MAX_HEAD,
    READ,
    Body,
    Conn,
    Head,
    Origin,
    closed_error,
    read_error,
    recv,
    request_head,
)


class FastTransport(httpx.AsyncBaseTransport):
    """A keep-alive HTTP/1.1 transport on asyncio streams; see the module docstring."""

    def __init__(self, max_connections: int = 512, *, max_idle_per_origin: int = 64,
                 keepalive_expiry: float = 60.0, ssl_context: ssl.SSLContext | None = None):
        self.max_connections = max_connections
        self.max_idle_per_origin = max_idle_per_origin
        self.keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[Conn]] = {}
        self._all: set[Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False
        self.connects = 0  # connections opened so far

    @property
    def connections(self) -> list[Conn]:
        """Every open connection, idle or in use (``is_closed()``, ``is_idle()``)."""
        return list(self._all)

    @property
    def _pool(self) -> FastTransport:  # the attribute tests/faults/test_soak.py reads
        return self

    # -- the pool -----------------------------------------------------------------

    def _take(self, origin: Origin, now: float) -> Conn | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < self.keepalive_expiry and conn.usable():
                conn.busy, conn.answered = True, False
                return conn
            self._drop(conn)
            if now - conn.idle_since >= self.keepalive_expiry:  # LIFO: the rest is older
                while idle:
                    self._drop(idle.pop())
        return None

    def _put(self, origin: Origin, conn: Conn) -> None:
        if self._closed or conn.buf or conn not in self._all or not conn.usable():
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

    async def _connect(self, origin: Origin, timeout: float | None,
                       request: httpx.Request) -> Conn:
        scheme, host, port = origin
        tls = None
        if scheme == "https":
            tls = self._ssl_context = self._ssl_context or _default_ssl_context()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None, limit=READ)
        except TimeoutError as e:
            raise httpx.ConnectTimeout(f"connect timeout {host}:{port}", request=request) from e
        except socket.gaierror as e:
            raise httpx.ConnectError(f"dns lookup failed {host}: {e}", request=request) from e
        except OSError as e:  # several addresses failing alike: "Multiple exceptions: [Errno…"
            refused = isinstance(e, ConnectionRefusedError) or e.errno == errno.ECONNREFUSED \
                or f"[Errno {errno.ECONNREFUSED}]" in str(e)
            why = "connection refused" if refused else f"connect failed: {e}"
            raise httpx.ConnectError(f"{why} {host}:{port}", request=request) from e
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(reader, writer)
        self._all.add(conn)
        self.connects += 1
        return conn

    # -- one request ----------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the old loop's connections cannot serve this one
            self._loop, self._idle, self._all = loop, {}, set()
            self._slots = asyncio.Semaphore(self.max_connections)
        if self._closed:
            raise httpx.ConnectError("the transport is closed", request=request)
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {url.scheme!r}",
                                            request=request)
        origin = (url.scheme, url.raw_host.decode("ascii"),
                  url.port or (443 if url.scheme == "https" else 80))
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        head = request_head(request, body)
        slots = self._slots
        if slots.locked():
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await slots.acquire()
            except TimeoutError as e:
                raise httpx.PoolTimeout("no free connection in the pool",
                                        request=request) from e
        else:
            await slots.acquire()
        try:
            # A pooled connection found closed is dropped before anything is sent.
            # One that fails after the request was written is NOT re-sent: the
            # upstream may have received it (seed 004: only never-delivered calls
            # are re-sent); the executor fails over instead.
            conn = self._take(origin, loop.time())
            if conn is None:
                conn = await self._connect(origin, timeouts.get("connect"), request)
            return await self._exchange(conn, origin, request, head, body, timeouts, slots)
        except BaseException:
            slots.release()
            raise

    async def _exchange(self, conn: Conn, origin: Origin, request: httpx.Request,
                        head: bytes, body: bytes, timeouts: dict[str, Any],
                        slots: asyncio.Semaphore) -> httpx.Response:
        """Send the request and read the answer's head on ``conn``, which this owns."""
        try:
            w = conn.writer
            if len(body) <= READ:
                w.write(head + body)
            else:
                w.write(head)
                w.write(body)
            if w.transport.get_write_buffer_size():
                try:
                    async with asyncio.timeout(timeouts.get("write")):
                        await w.drain()
                except TimeoutError as e:
                    raise httpx.WriteTimeout("write timeout", request=request) from e
                except OSError as e:
                    raise httpx.WriteError(f"write failed: {e}", request=request) from e
            status = 100
            while 100 <= status < 200 and status != 101:  # informational: more follows
                status, reason, headers, version = await self._read_head(
                    conn, request, timeouts.get("read"))
            stream = Body(self, origin, conn, request, status, headers, version,
                           timeouts.get("read"), slots)
        except BaseException:
            self._drop(conn)
            raise
        return httpx.Response(status, headers=headers, stream=stream, extensions={
            "http_version": b"HTTP/1.1", "reason_phrase": reason})

    async def _read_head(self, conn: Conn, request: httpx.Request,
                         timeout: float | None) -> Head:
        buf, start = conn.buf, 0
        while (end := buf.find(b"\r\n\r\n", start)) < 0:
            if len(buf) > MAX_HEAD:
                raise httpx.RemoteProtocolError("response head too large", request=request)
            start = max(0, len(buf) - 3)
            try:
                data = await recv(conn, timeout)
            except Exception as e:
                raise read_error(e, request) from e
            if not data:
                raise closed_error(request)
            conn.answered = True
            buf += data
        lines = bytes(buf[:end]).split(b"\r\n")
        del buf[:end + 4]
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}",
                                            request=request)
        headers = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}",
                                                request=request)
            headers.append((name, value.strip()))
        return int(code), reason, headers, version

    async def aclose(self) -> None:
        """Close every connection, idle or in use; later requests fail."""
        self._closed = True
        conns, self._all, self._idle = self._all, set(), {}
        for conn in conns:
            conn.close()
        if conns and self._loop is asyncio.get_running_loop():
            await asyncio.sleep(0)  # the transports close their sockets in a callback


def _default_ssl_context() -> ssl.SSLContext:
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())

"""``FastTransport``: the upstream HTTP/1.1 client transport, on plain asyncio streams.

It replaces httpx + httpcore on the request path, most of the gateway's CPU per
upstream call (docs/decisions/0003): the caller hands over a pre-built request
head and body and gets the answer's status, headers and an unread body. Per
(scheme, host, port) a LIFO list of idle keep-alive connections (one found
closed by the upstream or idle past ``keepalive_expiry`` is dropped when taken);
at most ``max_connections`` requests in flight, each holding its connection
until its body ends or is closed; TLS context built on the first https dial.
Bodies stream as they arrive (chunked: one chunk at a time). A pooled connection
found closed is dropped before anything is sent; a request that failed after
it was written is never re-sent (seed 004). Every failure is a ``TransportFailure``.
One event loop at a time (a new loop starts with an empty pool). ``upstream/bridge.py``
puts httpx's transport API over it for the readiness probes and quota polls.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from typing import NamedTuple

from humpyard.upstream.wire import (
    MAX_HEAD,
    READ,
    Body,
    Conn,
    Head,
    Origin,
    TransportFailure,
    closed_error,
    protocol_error,
    read_error,
    recv,
)


class Timeouts(NamedTuple):
    """Seconds (None: no limit) for connecting, each read, each write, a pool slot."""

    connect: float | None
    read: float | None
    write: float | None
    pool: float | None


class Answer(NamedTuple):
    """An answer's head; ``body`` is still unread (iterate it, or ``aclose()`` it)."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: Body


class FastTransport:
    """A keep-alive HTTP/1.1 client transport on asyncio streams; see the module docstring."""

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

    async def _connect(self, origin: Origin, timeout: float | None) -> Conn:
        scheme, host, port = origin
        addr = f"{host}:{port}"
        tls = None
        if scheme == "https":
            tls = self._ssl_context = self._ssl_context or _default_ssl_context()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None, limit=READ)
        except TimeoutError as e:
            raise TransportFailure("connect_timeout", f"connect timeout {addr}") from e
        except socket.gaierror as e:
            raise TransportFailure("dns", f"dns lookup failed {host}") from e
        except OSError as e:  # several addresses failing alike: "Multiple exceptions: [Errno…"
            if isinstance(e, ConnectionRefusedError) or e.errno == errno.ECONNREFUSED \
                    or f"[Errno {errno.ECONNREFUSED}]" in str(e):
                raise TransportFailure("connect_refused", f"connect refused {addr}") from e
            raise TransportFailure("connect_error",
                                   f"connect failed {addr}: {type(e).__name__}") from e
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(reader, writer, addr)
        self._all.add(conn)
        self.connects += 1
        return conn

    # -- one request ----------------------------------------------------------------

    async def request(self, origin: Origin, head: bytes, body: bytes, timeouts: Timeouts,
                      *, head_only: bool = False, close: bool = False) -> Answer:
        """Send ``head`` + ``body`` to ``origin``; the answer's body is unread.

        ``head`` is the request line and headers ending in an empty line (see
        ``build_head``). Failures are ``TransportFailure``s.
        """
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the old loop's connections cannot serve this one
            self._loop, self._idle, self._all = loop, {}, set()
            self._slots = asyncio.Semaphore(self.max_connections)
        if self._closed:
            raise TransportFailure("connect_error", "the transport is closed")
        slots = self._slots
        if slots.locked():
            try:
                async with asyncio.timeout(timeouts.pool):
                    await slots.acquire()
            except TimeoutError as e:
                raise TransportFailure("pool_timeout", "connection pool timeout "
                                       f"{origin[1]}:{origin[2]}") from e
        else:
            await slots.acquire()
        try:
            # A pooled connection found closed is dropped before anything is sent.
            # One that fails after the request was written is NOT re-sent: the
            # upstream may have received it (seed 004: only never-delivered calls
            # are re-sent); the executor fails over instead.
            conn = self._take(origin, loop.time())
            if conn is None:
                conn = await self._connect(origin, timeouts.connect)
            return await self._exchange(conn, origin, head, body, timeouts, slots,
                                        head_only, close)
        except BaseException:
            slots.release()
            raise

    async def _exchange(self, conn: Conn, origin: Origin, head: bytes, body: bytes,
                        timeouts: Timeouts, slots: asyncio.Semaphore, head_only: bool,
                        close: bool) -> Answer:
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
                    async with asyncio.timeout(timeouts.write):
                        await w.drain()
                except TimeoutError as e:
                    raise TransportFailure("write_timeout", f"write timeout {conn.addr}") from e
                except OSError as e:
                    raise TransportFailure("reset", f"connection reset {conn.addr}") from e
            status = 100
            while 100 <= status < 200 and status != 101:  # informational: more follows
                status, reason, headers, version = await self._read_head(conn, timeouts.read)
            stream = Body(self, origin, conn, status, headers, version, timeouts.read, slots,
                          head_only=head_only, close=close)
        except BaseException:
            self._drop(conn)
            raise
        return Answer(status, reason, headers, stream)

    async def _read_head(self, conn: Conn, timeout: float | None) -> Head:
        buf, start = conn.buf, 0
        while (end := buf.find(b"\r\n\r\n", start)) < 0:
            if len(buf) > MAX_HEAD:
                raise protocol_error(conn.addr, "response head too large")
            start = max(0, len(buf) - 3)
            try:
                data = await recv(conn, timeout)
            except Exception as e:
                raise read_error(e, conn.addr) from e
            if not data:
                raise closed_error(conn.addr)
            conn.answered = True
            buf += data
        lines = bytes(buf[:end]).split(b"\r\n")
        del buf[:end + 4]
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise protocol_error(conn.addr, f"malformed status line {lines[0][:80]!r}")
        headers = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise protocol_error(conn.addr, f"malformed header line {line[:80]!r}")
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

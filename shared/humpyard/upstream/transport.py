"""``FastTransport``: httpx's transport API over plain asyncio streams (HTTP/1.1).

It replaces httpcore, most of the gateway's CPU per upstream call, whose pool
checks every pooled connection on every request (docs/decisions/0003). Per
(scheme, host, port) a LIFO list of idle keep-alive connections (one found
closed by the upstream or idle past ``keepalive_expiry`` is dropped when taken);
at most ``max_connections`` requests in flight, each holding its connection
until its body ends or is closed; TLS context built on the first https dial.
Bodies stream as they arrive (chunked: one chunk at a time). A reused connection
failing before any byte of the answer (closed while idle) is retried once on a
new one; nothing else is retried. Errors are httpx's, as ``client._as_failure``
expects. One event loop at a time (a new loop starts with an empty pool).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from typing import Any

import httpx

_READ = 65536  # bytes per read; also the largest body sent with the head in one write
_MAX_HEAD = 65536
Origin = tuple[str, str, int]
Head = tuple[int, bytes, list[tuple[bytes, bytes]], bytes]


class _Conn:
    """One connection: asyncio streams plus bytes read but not consumed yet."""

    __slots__ = ("reader", "writer", "buf", "idle_since", "busy", "answered")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer, self.buf = reader, writer, bytearray()
        self.idle_since, self.busy, self.answered = 0.0, True, False

    def usable(self) -> bool:
        r = self.reader  # ``_buffer``: bytes the upstream sent unasked (e.g. a 408)
        return not (r.at_eof() or r.exception() is not None or getattr(r, "_buffer", None)
                    or self.writer.transport.is_closing())

    def close(self) -> None:
        self.busy = False
        self.writer.transport.abort()

    def is_closed(self) -> bool:
        return self.writer.transport.is_closing()

    def is_idle(self) -> bool:
        return not self.busy


async def _recv(conn: _Conn, timeout: float | None) -> bytes:
    if timeout is None:
        return await conn.reader.read(_READ)
    async with asyncio.timeout(timeout):
        return await conn.reader.read(_READ)


def _read_error(e: BaseException, request: httpx.Request) -> BaseException:
    """An exception from a read, as httpx's (others pass unchanged)."""
    if isinstance(e, TimeoutError):
        return httpx.ReadTimeout("read timeout", request=request)
    if isinstance(e, OSError):
        why = "connection reset by upstream" if isinstance(e, ConnectionResetError) else e
        return httpx.ReadError(f"read failed: {why}", request=request)
    return e


def _closed(request: httpx.Request) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError("connection closed by upstream", request=request)


class FastTransport(httpx.AsyncBaseTransport):
    """A keep-alive HTTP/1.1 transport on asyncio streams; see the module docstring."""

    def __init__(self, max_connections: int = 512, *, max_idle_per_origin: int = 64,
                 keepalive_expiry: float = 60.0, ssl_context: ssl.SSLContext | None = None):
        self.max_connections = max_connections
        self.max_idle_per_origin = max_idle_per_origin
        self.keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[_Conn]] = {}
        self._all: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False
        self.connects = 0  # connections opened so far

    @property
    def connections(self) -> list[_Conn]:
        """Every open connection, idle or in use (``is_closed()``, ``is_idle()``)."""
        return list(self._all)

    @property
    def _pool(self) -> FastTransport:  # the attribute tests/faults/test_soak.py reads
        return self

    # -- the pool -----------------------------------------------------------------

    def _take(self, origin: Origin, now: float) -> _Conn | None:
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

    def _put(self, origin: Origin, conn: _Conn) -> None:
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

    def _drop(self, conn: _Conn) -> None:
        self._all.discard(conn)
        conn.close()

    async def _connect(self, origin: Origin, timeout: float | None,
                       request: httpx.Request) -> _Conn:
        scheme, host, port = origin
        tls = None
        if scheme == "https":
            tls = self._ssl_context = self._ssl_context or _default_ssl_context()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None, limit=_READ)
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
        conn = _Conn(reader, writer)
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
        head = _request_head(request, body)
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

    async def _exchange(self, conn: _Conn, origin: Origin, request: httpx.Request,
                        head: bytes, body: bytes, timeouts: dict[str, Any],
                        slots: asyncio.Semaphore) -> httpx.Response:
        """Send the request and read the answer's head on ``conn``, which this owns."""
        try:
            w = conn.writer
            if len(body) <= _READ:
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
            stream = _Body(self, origin, conn, request, status, headers, version,
                           timeouts.get("read"), slots)
        except BaseException:
            self._drop(conn)
            raise
        return httpx.Response(status, headers=headers, stream=stream, extensions={
            "http_version": b"HTTP/1.1", "reason_phrase": reason})

    async def _read_head(self, conn: _Conn, request: httpx.Request,
                         timeout: float | None) -> Head:
        buf, start = conn.buf, 0
        while (end := buf.find(b"\r\n\r\n", start)) < 0:
            if len(buf) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("response head too large", request=request)
            start = max(0, len(buf) - 3)
            try:
                data = await _recv(conn, timeout)
            except Exception as e:
                raise _read_error(e, request) from e
            if not data:
                raise _closed(request)
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


def _request_head(request: httpx.Request, body: bytes) -> bytes:
    """Request line and headers (Content-Length computed); CR/LF in a header is refused."""
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    raw = request.headers.raw
    if not any(k.lower() == b"host" for k, _ in raw):
        lines.append(b"Host: " + request.url.netloc)
    lines += [b"%s: %s" % (k, v) for k, v in raw
              if k.lower() not in (b"content-length", b"transfer-encoding")]
    if body or request.method in ("POST", "PUT", "PATCH"):
        lines.append(b"Content-Length: %d" % len(body))
    lines.append(b"\r\n")
    head = b"\r\n".join(lines)
    if head.count(b"\n") != len(lines) or head.count(b"\r") != len(lines):
        raise httpx.LocalProtocolError("CR or LF in a request header", request=request)
    return head


_LENGTH, _CHUNKED, _UNTIL_CLOSE = 0, 1, 2  # how the body ends
_SIZE, _CRLF, _TRAILER = 0, 1, 2  # what a chunked body expects next (data: _left)


class _Body(httpx.AsyncByteStream):
    """A response body read from the wire as it arrives; see ``FastTransport``."""

    def __init__(self, owner: FastTransport, origin: Origin, conn: _Conn,
                 request: httpx.Request, status: int, headers: list[tuple[bytes, bytes]],
                 version: bytes, timeout: float | None, slots: asyncio.Semaphore):
        self._owner, self._origin, self._request = owner, origin, request
        self._conn: _Conn | None = conn
        self._timeout, self._slots = timeout, slots
        self._left, self._state, self._done = 0, _SIZE, False
        keep = version == b"HTTP/1.1"
        lengths, te = set(), None
        for name, value in headers:
            name, value = name.lower(), value.lower()
            if name == b"content-length":
                lengths.add(value)
            elif name == b"transfer-encoding":
                te = value.rsplit(b",", 1)[-1].strip()
            elif name == b"connection":
                keep = b"close" not in value and (keep or b"keep-alive" in value)
        if status < 200 or any(k.lower() == b"connection" and v.lower() == b"close"
                               for k, v in request.headers.raw):
            keep = False  # (a 101 switched protocols)
        if request.method == "HEAD" or status in (204, 304) or status < 200:
            self._mode = _LENGTH
        elif te is not None:  # chunked wins over Content-Length, but then do not reuse
            self._mode = _CHUNKED if te == b"chunked" else _UNTIL_CLOSE
            keep = keep and te == b"chunked" and not lengths
        elif lengths:
            length = lengths.pop()
            if lengths or not length.isdigit():
                raise httpx.RemoteProtocolError("bad Content-Length", request=request)
            self._mode, self._left = _LENGTH, int(length)
        else:
            self._mode, keep = _UNTIL_CLOSE, False
        self._keep = keep
        if self._mode == _LENGTH and not self._left:
            self._end(keep)

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn
        if conn is None:
            raise StopAsyncIteration
        try:
            while True:
                data = self._decode(conn.buf)
                if self._done:
                    self._end(self._keep)
                    if data:
                        return data
                    raise StopAsyncIteration
                if data:
                    return data
                got = await _recv(conn, self._timeout)
                if not got:
                    if self._mode != _UNTIL_CLOSE:
                        raise _closed(self._request)
                    self._done, self._keep = True, False
                conn.buf += got
        except StopAsyncIteration:
            raise
        except BaseException as e:
            self._end(False)
            mapped = _read_error(e, self._request)
            if mapped is e:
                raise
            raise mapped from e

    def _decode(self, buf: bytearray) -> bytes:
        """Take what ``buf`` holds of the body (chunked: up to one chunk's end)."""
        if self._mode != _CHUNKED:
            n = min(self._left, len(buf)) if self._mode == _LENGTH else len(buf)
            data = bytes(buf[:n])
            del buf[:n]
            if self._mode == _LENGTH:
                self._left -= n
                self._done = not self._left
            return data
        out = bytearray()
        while not self._done:
            if self._left:  # inside a chunk's data
                if not buf:
                    break
                n = min(self._left, len(buf))
                out += buf[:n]
                del buf[:n]
                self._left -= n
                continue
            i = buf.find(b"\r\n")
            if i < 0:
                if len(buf) > 4096:
                    raise httpx.RemoteProtocolError("chunk line too long", request=self._request)
                break
            if self._state == _CRLF:  # the end of a chunk's data
                if i:
                    raise httpx.RemoteProtocolError("bad chunk end", request=self._request)
                del buf[:2]
                self._state = _SIZE
                continue
            if self._state == _TRAILER:  # trailer lines, then an empty one
                del buf[:i + 2]
                self._done = not i
                continue
            digits = bytes(buf[:i]).split(b";", 1)[0].strip()
            if not digits or digits.strip(b"0123456789abcdefABCDEF"):
                raise httpx.RemoteProtocolError(f"bad chunk size {digits[:20]!r}",
                                                request=self._request)
            size = int(digits, 16)
            if size and out:  # one chunk at a time, as h11 gave them (the end comes along)
                break
            del buf[:i + 2]
            self._state, self._left = (_CRLF if size else _TRAILER), size
        return bytes(out)

    def _end(self, reuse: bool) -> None:
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        self._slots.release()
        if reuse:
            self._owner._put(self._origin, conn)
        else:
            self._owner._drop(conn)

    async def aclose(self) -> None:
        """Closed before the end: reuse only if the rest of the body is already here."""
        conn = self._conn
        if conn is None:
            return
        try:  # ``read`` returns at once while the reader holds data
            while not self._done:
                if not self._decode(conn.buf):
                    if not getattr(conn.reader, "_buffer", None):
                        break
                    conn.buf += await conn.reader.read(_READ)
        except httpx.HTTPError:
            self._done = False
        self._end(self._keep and self._done)

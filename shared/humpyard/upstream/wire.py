"""HTTP/1.1 on the wire for ``FastTransport``: connections, failures, bodies.

``Body`` streams a response body as it arrives (Content-Length, chunked, or
until close) and hands a reusable connection back to its owner's pool when
the body has been read to its end; a body closed early closes its connection.
Every failure is a ``TransportFailure`` naming its kind and the address.
"""

from __future__ import annotations

import asyncio
from typing import Any

READ = 65536  # bytes per read; also the largest body sent with the head in one write
MAX_HEAD = 65536
Origin = tuple[str, str, int]
Head = tuple[int, bytes, list[tuple[bytes, bytes]], bytes]


class TransportFailure(Exception):
    """No HTTP answer: ``kind`` is one of connect_refused, dns, connect_timeout,
    connect_error, read_timeout, write_timeout, pool_timeout, reset, protocol."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def never_delivered(self) -> bool:
        """True when no byte of the request can have reached the upstream."""
        return self.kind in ("connect_refused", "dns", "connect_timeout", "connect_error")


class Conn:
    """One connection: asyncio streams plus bytes read but not consumed yet."""

    __slots__ = ("reader", "writer", "buf", "idle_since", "busy", "answered", "addr")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 addr: str = "?"):
        self.reader, self.writer, self.buf = reader, writer, bytearray()
        self.idle_since, self.busy, self.answered = 0.0, True, False
        self.addr = addr

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


async def recv(conn: Conn, timeout: float | None) -> bytes:
    if timeout is None:
        return await conn.reader.read(READ)
    async with asyncio.timeout(timeout):
        return await conn.reader.read(READ)


def read_error(e: BaseException, addr: str) -> BaseException:
    """An exception from a read, as a ``TransportFailure`` (others pass unchanged)."""
    if isinstance(e, TimeoutError):
        return TransportFailure("read_timeout", f"read timeout {addr}")
    if isinstance(e, OSError):
        return TransportFailure("reset", f"connection reset {addr}")
    return e


def closed_error(addr: str) -> TransportFailure:
    return TransportFailure("reset", f"connection closed by upstream {addr}")


def protocol_error(addr: str, why: str) -> TransportFailure:
    return TransportFailure("protocol", f"upstream protocol error {addr}: {why}")


def head_prefix(method: str, target: bytes, host: bytes,
                headers: list[tuple[bytes, bytes]]) -> bytes:
    """The request line and headers, each ending in CRLF, without Content-Length and
    the closing empty line (``finish_head`` adds them). A CR or LF inside a header,
    or in the target, is refused."""
    lines = [b"%s %s HTTP/1.1" % (method.encode("ascii"), target)]
    if not any(k.lower() == b"host" for k, _ in headers):
        lines.append(b"Host: " + host)
    lines += [b"%s: %s" % (k, v) for k, v in headers
              if k.lower() not in (b"content-length", b"transfer-encoding")]
    prefix = b"".join(line + b"\r\n" for line in lines)
    if prefix.count(b"\n") != len(lines) or prefix.count(b"\r") != len(lines):
        raise TransportFailure("protocol", "CR or LF in a request header")
    return prefix


def finish_head(prefix: bytes, method: str, body: bytes) -> bytes:
    """``prefix`` with Content-Length (when there is a body or the method takes one)."""
    if body or method in ("POST", "PUT", "PATCH"):
        return prefix + b"Content-Length: %d\r\n\r\n" % len(body)
    return prefix + b"\r\n"


_LENGTH, _CHUNKED, _UNTIL_CLOSE = 0, 1, 2  # how the body ends
_SIZE, _CRLF, _TRAILER = 0, 1, 2  # what a chunked body expects next (data: _left)


class Body:
    """A response body read from the wire as it arrives; see ``upstream/transport.py``.

    ``head_only``: the request was a HEAD; ``close``: it asked for ``Connection: close``.
    """

    def __init__(self, owner: Any, origin: Origin, conn: Conn, status: int,
                 headers: list[tuple[bytes, bytes]], version: bytes, timeout: float | None,
                 slots: asyncio.Semaphore, *, head_only: bool = False, close: bool = False):
        self._owner, self._origin, self._addr = owner, origin, conn.addr
        self._conn: Conn | None = conn
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
        if status < 200 or close:
            keep = False  # (a 101 switched protocols)
        if head_only or status in (204, 304) or status < 200:
            self._mode = _LENGTH
        elif te is not None:  # chunked wins over Content-Length, but then do not reuse
            self._mode = _CHUNKED if te == b"chunked" else _UNTIL_CLOSE
            keep = keep and te == b"chunked" and not lengths
        elif lengths:
            length = lengths.pop()
            if lengths or not length.isdigit():
                raise protocol_error(conn.addr, "bad Content-Length")
            self._mode, self._left = _LENGTH, int(length)
        else:
            self._mode, keep = _UNTIL_CLOSE, False
        self._keep = keep
        if self._mode == _LENGTH and not self._left:
            self._end(keep)

    def __aiter__(self) -> Body:
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
                got = await recv(conn, self._timeout)
                if not got:
                    if self._mode != _UNTIL_CLOSE:
                        raise closed_error(self._addr)
                    self._done, self._keep = True, False
                conn.buf += got
        except StopAsyncIteration:
            raise
        except BaseException as e:
            self._end(False)
            mapped = read_error(e, self._addr)
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
                    raise protocol_error(self._addr, "chunk line too long")
                break
            if self._state == _CRLF:  # the end of a chunk's data
                if i:
                    raise protocol_error(self._addr, "bad chunk end")
                del buf[:2]
                self._state = _SIZE
                continue
            if self._state == _TRAILER:  # trailer lines, then an empty one
                del buf[:i + 2]
                self._done = not i
                continue
            digits = bytes(buf[:i]).split(b";", 1)[0].strip()
            if not digits or digits.strip(b"0123456789abcdefABCDEF"):
                raise protocol_error(self._addr, f"bad chunk size {digits[:20]!r}")
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
                    conn.buf += await conn.reader.read(READ)
        except TransportFailure:
            self._done = False
        self._end(self._keep and self._done)

"""A small HTTP forward proxy for tests: CONNECT tunnels and absolute-form requests.

``ForwardProxy`` listens on 127.0.0.1 in a background thread. A ``CONNECT
host:port`` is answered ``200`` and then bytes are copied both ways; a request
in absolute form (``GET http://host:port/path``) is forwarded to that origin
with its path over a new upstream connection (``Connection: close``), and the
answer copied back; the client's connection stays open for its next request.
With ``credentials=("user", "pass")`` every request must carry the
matching ``Proxy-Authorization`` or gets a 407. ``seen`` records
``(method, target, proxy_authorization)`` for every request it received.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from urllib.parse import urlsplit

from tests.support.listener import ListenerThread


class ForwardProxy:
    """See the module docstring; ``url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, credentials: tuple[str, str] | None = None):
        self.credentials = credentials
        self.port = 0
        self.seen: list[tuple[str, str, str | None]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url_with(self, user: str, password: str) -> str:
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

    def __enter__(self) -> ForwardProxy:
        self._server = ListenerThread(self._serve, name="ForwardProxy").__enter__()
        self.port = self._server.port
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)

    def _authorized(self, auth: str | None) -> bool:
        if self.credentials is None:
            return True
        want = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
        return auth == want

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_writer: asyncio.StreamWriter | None = None
        try:
            while True:  # absolute-form requests keep the client's connection alive
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        k, _, v = line.partition(":")
                        headers[k.strip().lower()] = v.strip()
                auth = headers.get("proxy-authorization")
                self.seen.append((method, target, auth))
                if not self._authorized(auth):
                    writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                                 b"Content-Length: 0\r\n\r\n")
                    await writer.drain()
                    return
                if method == "CONNECT":
                    host, _, port = target.rpartition(":")
                    try:
                        up_reader, up_writer = await asyncio.open_connection(
                            host.strip("[]"), int(port))
                    except OSError:
                        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                        await writer.drain()
                        return
                    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    await writer.drain()
                    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
                    return
                # absolute form: one upstream connection per request, read to its close
                parts = urlsplit(target)
                up_reader, up_writer = await asyncio.open_connection(
                    parts.hostname, parts.port or 80)
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                kept = [line for line in lines[1:] if line and not line.lower().startswith(
                    ("proxy-authorization:", "connection:"))]
                up_writer.write(f"{method} {path} HTTP/1.1\r\n".encode("latin-1")
                                + "".join(f"{x}\r\n" for x in kept).encode("latin-1")
                                + b"Connection: close\r\n\r\n")
                length = int(headers.get("content-length") or 0)
                if length:
                    up_writer.write(await reader.readexactly(length))
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                up_writer.transport.abort()
                up_writer = None
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError,
                ValueError):
            pass
        finally:
            writer.transport.abort()
            if up_writer is not None:
                up_writer.transport.abort()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.CancelledError):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    with contextlib.suppress(OSError, RuntimeError):
        dst.write_eof()

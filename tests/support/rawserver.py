"""A raw-socket server that plays a script of bytes, pauses and closes, for wire tests.

``RawServer(script)`` listens on 127.0.0.1 (or ``::1``) in a background thread,
optionally over TLS (``ssl_context``). For every connection it reads a request
head (and a ``Content-Length`` body), then plays ``script(n)`` for the n-th
request on that connection (0-based): a list of actions::

    b"bytes"          write them
    Pause(0.2)        sleep
    CLOSE             close (FIN) and stop
    RESET             close with a TCP reset (RST) and stop
    HOLD              keep the connection open without answering, until stopped

After the last action the server reads the next request on the same
connection. ``requests`` records each request's raw head. Nothing is parsed
beyond that: the point is to send exactly the bytes a test wants.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tests.support.listener import ListenerThread


@dataclass(frozen=True)
class Pause:
    seconds: float


CLOSE, RESET, HOLD = "close", "reset", "hold"
Action = bytes | Pause | str
Script = Callable[[int], Sequence[Action]]


class RawServer:
    """See the module docstring. ``url`` is ``scheme://host:port``."""

    def __init__(self, script: Script | Sequence[Action], *,
                 ssl_context: ssl.SSLContext | None = None, host: str = "127.0.0.1"):
        self._script: Script = script if callable(script) else (lambda n, s=script: s)
        self._ssl = ssl_context
        self.host = host
        self.port = 0
        self.requests: list[bytes] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self._ssl else 'http'}://{h}:{self.port}"

    def __enter__(self) -> RawServer:
        self._server = ListenerThread(self._serve, self.host, ssl_context=self._ssl,
                                      name="RawServer").__enter__()
        self.port = self._server.port
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                    return
                with self._lock:
                    self.requests.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length:
                    await reader.readexactly(length)
                for action in self._script(n):
                    if isinstance(action, bytes):
                        writer.write(action)
                        await writer.drain()
                    elif isinstance(action, Pause):
                        await asyncio.sleep(action.seconds)
                    elif action == HOLD:
                        await asyncio.Event().wait()
                    elif action == RESET:
                        sock = writer.get_extra_info("socket")
                        if sock is not None:
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                            struct.pack("ii", 1, 0))
                        writer.transport.abort()
                        return
                    elif action == CLOSE:
                        return
                n += 1
        except (asyncio.CancelledError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.transport.abort()

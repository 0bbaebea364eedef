"""``humpyard serve``'s HTTP protocol: uvicorn's, with a response's head and body
sent in one write.

uvicorn writes a response's status line and headers to the socket as soon as
the app sends ``http.response.start``, and the body when it sends the body: two
``send`` system calls, and two wake-ups of the client, for every buffered
answer. On this kind of machine a loopback ``send`` costs ~100 µs of the
gateway's own time (docs/decisions/0003-performance.md). ``HeadHoldingTransport``
keeps a response head back until the next write, which it joins to it, or until
the end of the current event-loop turn (a stream's head goes out before its first
event has arrived, as before). Everything else passes straight through.
"""

from __future__ import annotations

import asyncio
from typing import Any

_HEAD_START = b"HTTP/1.1 "
_HEAD_END = b"\r\n\r\n"


class HeadHoldingTransport:
    """A transport wrapper that holds a response head back until the body's write."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data[:9] == _HEAD_START and data[-4:] == _HEAD_END:
            self._held = bytes(data)
            self._loop.call_soon(self._release)
        elif data:
            self._transport.write(data)

    def writelines(self, lines: Any) -> None:
        self.write(b"".join(lines))

    def _release(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._release()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def protocol_class() -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol (h11 when httptools is missing), head-holding."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:  # httptools is not installed
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]

    class HeadHoldingProtocol(Base):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(HeadHoldingTransport(transport, self.loop))

    return HeadHoldingProtocol

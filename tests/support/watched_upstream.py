"""An upstream on a real socket that plays a script per request and notes when the
gateway closes each connection: the witness that a call was cancelled, not
left running.

``WatchedUpstream(script)`` listens on 127.0.0.1 in a background thread. For
every connection it reads one request (head and ``Content-Length`` body,
parsed as JSON into ``requests``), then plays ``script(n, body)`` for the n-th
request (0-based) while it watches the connection: a list of ::

    b"bytes"      written as they are
    0.25          a pause of that many seconds
    HOLD          wait, answering nothing more, until the connection closes

The connection is closed after the script (answers here say
``connection: close``). ``closed`` holds, per connection, the
``time.monotonic()`` at which the gateway closed it (None while open), and
``wait_closed(n)`` waits until n connections were closed. ``sse_head``,
``chat_event``, ``anthropic_event`` and ``chunk_end`` build the bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tests.support.listener import ListenerThread

HOLD = "hold"
Action = bytes | float | str
Script = Callable[[int, Any], Sequence[Action]]


def sse_head() -> bytes:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def chat_event(delta: dict[str, Any] | None = None, *, finish: str | None = None,
               usage: dict[str, int] | None = None) -> bytes:
    """One OpenAI chat chunk as an HTTP chunk; ``usage`` alone makes the usage chunk."""
    obj: dict[str, Any] = {"id": "chatcmpl-w", "object": "chat.completion.chunk",
                           "created": 1_700_000_000, "model": "m"}
    if usage is not None and delta is None:
        obj["choices"] = []
        obj["usage"] = usage
    else:
        obj["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return _chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


def anthropic_event(kind: str, body: dict[str, Any]) -> bytes:
    data = json.dumps({"type": kind, **body}).encode()
    return _chunk(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")


def done() -> bytes:
    """``data: [DONE]`` and the end of the chunked body."""
    return _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def chunk_end() -> bytes:
    return b"0\r\n\r\n"


def buffered(body: dict[str, Any]) -> bytes:
    raw = json.dumps(body).encode()
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (len(raw), raw))


class WatchedUpstream:
    """See the module docstring. ``url`` is the OpenAI base URL (``…/v1``)."""

    def __init__(self, script: Script):
        self._script = script
        self._lock = threading.Lock()
        self.requests: list[Any] = []
        self.closed: list[float | None] = []
        self.held = 0  # scripts that reached HOLD: what came before it is sent
        self.port = 0

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.origin + "/v1"

    def __enter__(self) -> WatchedUpstream:
        self._server = ListenerThread(self._serve, name="WatchedUpstream").__enter__()
        self.port = self._server.port
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)

    def wait_requests(self, count: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.requests) < count:
            assert time.monotonic() < deadline, f"{len(self.requests)} of {count} requests"
            time.sleep(0.005)

    def wait_held(self, count: int = 1, timeout: float = 5.0) -> None:
        """Wait until ``count`` scripts sent everything before their ``HOLD``."""
        deadline = time.monotonic() + timeout
        while self.held < count:
            assert time.monotonic() < deadline, f"{self.held} of {count} scripts held"
            time.sleep(0.005)

    def wait_closed(self, count: int, timeout: float) -> float:
        """Wait until ``count`` connections were closed by the gateway; the time of
        the last of them (``time.monotonic()``). Fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                done = [t for t in self.closed if t is not None]
            if len(done) >= count:
                return max(done)
            assert time.monotonic() < deadline, \
                f"{len(done)} of {count} upstream connections closed within {timeout}s"
            time.sleep(0.005)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        raw = await reader.readexactly(length) if length else b""
        with self._lock:
            n = len(self.requests)
            self.requests.append(json.loads(raw) if raw else None)
            self.closed.append(None)
        play = asyncio.ensure_future(self._play(self._script(n, self.requests[n]), writer))
        eof = asyncio.ensure_future(reader.read())  # nothing more is sent: b"" at close
        try:
            await asyncio.wait({play, eof}, return_when=asyncio.FIRST_COMPLETED)
            if eof.done():  # the gateway closed the connection
                with self._lock:
                    self.closed[n] = time.monotonic()
        finally:
            for task in (play, eof):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _play(self, actions: Sequence[Action], writer: asyncio.StreamWriter) -> None:
        for action in actions:
            if isinstance(action, bytes):
                writer.write(action)
                await writer.drain()
            elif isinstance(action, float | int):
                await asyncio.sleep(action)
            elif action == HOLD:
                with self._lock:
                    self.held += 1
                await asyncio.Event().wait()

"""A scriptable OpenAI-compatible upstream on a real socket, for tests.

``FakeUpstream`` is a small HTTP/1.1 server (raw asyncio, in a background
thread) so that it can do what a well-behaved ASGI server cannot: reset a
connection, stall forever, drop a stream half-way. It supports keep-alive,
``Content-Length`` and chunked request bodies, and answers with
``Content-Length`` bodies or chunked SSE, which is all httpx needs::

    with FakeUpstream() as up:
        up.script(status(429, headers={"Retry-After": "3"}), ok("hi"))
        ...                          # point the gateway at up.url
        assert [r.path for r in up.requests] == ["/v1/chat/completions"] * 2

Contract:

- Every request except ``GET <health_path>`` consumes the next scripted step,
  in arrival order; with the queue empty, ``default`` (``ok()``) applies.
- ``GET <health_path>`` answers ``health_step`` if set, otherwise
  ``health_status`` (200 → ``{"status":"ok"}``), and never consumes a step.
- Every request, health probes included, is recorded in ``requests``
  *before* it is answered; ``wait_for_requests`` blocks until enough arrived.
- Steps that answer decide buffered vs streamed from the request body's
  ``stream`` flag; the usage chunk is sent only for
  ``stream_options.include_usage``, as OpenAI does.
- ``stop()`` (or leaving the ``with``) cancels stalls and delays, closes every
  connection and joins the thread; nothing leaks.
- All public methods are thread-safe.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
from typing import Any, NamedTuple

from tests.support.listener import Listener
from tests.support.steps import Exchange, Status, Step, ok


class RecordedRequest(NamedTuple):
    """One request as received: unpacks as ``(method, path, headers, json)``.

    ``path`` excludes the query string; header names are lowercased (repeated
    headers joined with ``", "``); ``json`` is the parsed body, or None.
    """

    method: str
    path: str
    headers: dict[str, str]
    json: Any


class _Incoming(NamedTuple):
    request: RecordedRequest
    close: bool  # the client asked to close after this exchange


async def _read_request(reader: asyncio.StreamReader) -> _Incoming | None:
    """Read one HTTP/1.1 request; None at a clean end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")  # no trailers expected
    else:
        body = await reader.readexactly(int(headers.get("content-length") or 0))
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
    return _Incoming(RecordedRequest(method, target.split("?", 1)[0], headers, parsed), close)


class FakeUpstream:
    """A scriptable upstream; see the module docstring for the contract.

    ``url`` is the OpenAI base URL (``http://127.0.0.1:PORT/v1``), ``origin``
    the same without ``/v1``. Use as a context manager, or ``start()``/``stop()``.
    """

    def __init__(self, *, default: Step | None = None, health_path: str = "/health",
                 start_timeout: float = 5.0, port: int = 0):
        self.default: Step = default or ok()
        self.health_path = health_path
        self.health_status = 200
        self.health_step: Step | None = None
        self._start_timeout = start_timeout
        self._cond = threading.Condition()
        self._queue: collections.deque[Step] = collections.deque()
        self._requests: list[RecordedRequest] = []
        self._seq = 0
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self.port = port

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> FakeUpstream:
        """Start serving; returns once the port accepts connections."""
        if self._thread is not None:
            raise RuntimeError("FakeUpstream already started")
        self._thread = threading.Thread(target=self._run, name="fake-upstream", daemon=True)
        self._thread.start()
        if not self._started.wait(self._start_timeout) or self._error is not None:
            self.stop()
            raise RuntimeError(f"FakeUpstream failed to start: {self._error!r}")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close every connection (stalled ones too) and join the thread. Idempotent."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and thread.is_alive():
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # the loop already closed
                pass
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError("FakeUpstream thread did not stop")

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/v1"

    # -- scripting and inspection ----------------------------------------------

    def script(self, *steps: Step) -> None:
        """Queue steps; each later request (health probes aside) consumes one."""
        with self._cond:
            self._queue.extend(steps)

    @property
    def pending(self) -> int:
        """Scripted steps not consumed yet."""
        with self._cond:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._cond:
            return list(self._requests)

    def requests_to(self, path: str, method: str | None = None) -> list[RecordedRequest]:
        """The received requests for one path (and method, if given)."""
        return [r for r in self.requests
                if r.path == path and (method is None or r.method == method)]

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` requests arrived; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._requests) >= count, timeout)

    # -- the server thread --------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start(); never leak out of the thread
            self._error = exc
            self._started.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        listener = Listener(self._on_connection, "127.0.0.1", self.port, limit=1 << 22)
        self.port = listener.start().port
        self._started.set()
        try:
            await self._stopping.wait()
        finally:
            await listener.close()  # cancels stalls and delays, closes every connection

    def _accept(self, request: RecordedRequest) -> tuple[Step, int]:
        with self._cond:
            self._requests.append(request)
            self._seq += 1
            self._cond.notify_all()
            if request.method == "GET" and request.path == self.health_path:
                step = self.health_step or Status(self.health_status, {
                    "status": "ok" if 200 <= self.health_status < 300 else "unavailable"})
            else:
                step = self._queue.popleft() if self._queue else self.default
            return step, self._seq

    async def _on_connection(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        # With no write buffer, drain() returns only once bytes reached the kernel,
        # so a later drop cannot lose what a step meant to send.
        writer.transport.set_write_buffer_limits(0)
        try:
            while True:
                incoming = await _read_request(reader)
                if incoming is None:
                    break
                step, seq = self._accept(incoming.request)
                keep = await step.respond(Exchange(incoming.request, writer, seq))
                if not keep or incoming.close:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError):
            pass  # the client went away or sent garbage: just close
        except asyncio.CancelledError:
            pass  # stop(): end quietly, the finally below closes the socket
        finally:
            writer.transport.abort()
            writer.close()


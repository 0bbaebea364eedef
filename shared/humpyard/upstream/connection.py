"""One upstream connection as an ``asyncio.Protocol``.

``Conn`` feeds every byte the socket delivers straight into the current
request's ``ResponseParser`` (``upstream/framing.py``): no stream reader, no
copy, and no guessing at a private buffer. Bytes that arrive while no request
is out (an upstream's 408 before it closes an idle connection) mark the
connection unusable. Reading pauses while more than ``HIGH_WATER`` body bytes
wait for the caller. Waits are bounded by one lazily moved timer per connection,
not one per wait: a stream's reads 200 ms apart under a 300 s idle limit arm it
once (ADR 0003, "Relay CPU per stream").
Failures become ``TransportFailure``s of the right class (``upstream/errors.py``).
An answer's body is read through ``Body`` (``upstream/body.py``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

from humpyard.upstream.errors import (
    ConnectionLost,
    FirstByteTimeout,
    ProtocolViolation,
    ReadTimeout,
    TransportFailure,
    WriteTimeout,
)
from humpyard.upstream.framing import FramingError, ResponseParser, Truncated

HIGH_WATER = 1 << 20  # body bytes read ahead of the caller before reading pauses
LOW_WATER = 1 << 16
SINK_GO, SINK_STOP, SINK_PAUSE = 0, 1, 2  # what a splice's sink says of a read


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())


def timed_out(failure: type[ReadTimeout], timeout: float | None, addr: str) -> ReadTimeout:
    """The failure for a wait that ran out: ``read timeout host:port``, or the
    limit's own class and name (``first byte timeout after 120s host:port``)."""
    if failure is ReadTimeout:
        return ReadTimeout(f"read timeout {addr}", addr)
    name = "first byte" if issubclass(failure, FirstByteTimeout) else "idle"
    return failure(f"{name} timeout: nothing from the upstream for {timeout or 0:g}s "
                   f"{addr}", addr)


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


class Conn(asyncio.Protocol):
    """One keep-alive connection; ``addr`` (host:port) names it in every failure."""

    def __init__(self, addr: str, sock: socket.socket | None = None):
        self.addr = addr
        self.sock = sock  # the connected socket under the transport (and TLS)
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        self.failure: TransportFailure | None = None
        self.idle_since = 0.0
        self.busy = True
        self.closed = False  # the upstream closed, or the connection broke
        self.unsolicited = False
        self._waiter: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._write_paused = False
        self._read_paused = False
        self._deadline: float | None = None  # when the current wait runs out
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        # A direct relay (``splice``): each read is handed to ``_sink`` in this callback.
        self._sink: Callable[[bytes], int] | None = None
        self._sink_timeout: float | None = None
        self._sink_paused = False

    # -- protocol callbacks ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        p = self.parser
        if p is None or p.done:
            self.unsolicited = True  # nobody asked: never reuse this connection
            return
        try:
            p.feed(data)
        except FramingError as e:
            self.failure = ProtocolViolation(f"upstream protocol error {self.addr}: {e}",
                                             self.addr)
        sink = self._sink
        if sink is not None:
            if self._sink_paused or p.done or self.failure is not None:
                self._sink = None  # the waiting task takes the rest, the old way
            else:
                verdict = SINK_GO
                if p.buffered:  # a read may hold several chunks of a chunked body: one write
                    verdict = sink(p.take_all())
                if verdict == SINK_GO:
                    timeout = self._sink_timeout
                    if timeout is not None:  # the idle limit runs from this read
                        self._deadline = asyncio.get_running_loop().time() + timeout
                    return
                if verdict == SINK_PAUSE and self.transport is not None:
                    self._sink_paused = True  # the client's buffer is full: stop reading
                    self.transport.pause_reading()
                else:
                    self._sink = None
        if p.buffered > HIGH_WATER and not self._read_paused and self.transport is not None:
            self._read_paused = True
            self.transport.pause_reading()
        _wake(self._waiter)

    def eof_received(self) -> bool | None:
        self._ended(None)
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended(exc)
        _wake(self._drain)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        _wake(self._drain)

    def _ended(self, exc: BaseException | None) -> None:
        self.closed = True
        self._stop_timer()
        p = self.parser
        if p is not None and not p.done and self.failure is None:
            try:
                p.feed_eof()
            except Truncated:
                what = "connection reset" if exc is not None else "connection closed by upstream"
                self.failure = ConnectionLost(f"{what} {self.addr}", self.addr)
            except FramingError as e:
                self.failure = ProtocolViolation(f"upstream protocol error {self.addr}: {e}",
                                                 self.addr)
        _wake(self._waiter)

    # -- use -----------------------------------------------------------------------

    def usable(self) -> bool:
        """Whether an idle connection can carry another request."""
        t = self.transport
        return not (self.closed or self.unsolicited or t is None or t.is_closing())

    def stale(self) -> bool:
        """Whether the socket holds what the loop has not delivered yet: the
        upstream's close (FIN or reset) or bytes nobody asked for.

        Asked of an idle connection as it is taken: on a busy loop an upstream's
        idle timeout can close it before ``eof_received`` runs, and a request
        written to it then fails and is never re-sent. One non-blocking peek.
        """
        sock = self.sock
        if sock is None:
            return False
        try:
            sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return False  # nothing waiting: the usual case
        except OSError:
            return True  # reset
        return True  # b"" is the close; anything else was not asked for

    def is_closed(self) -> bool:
        t = self.transport
        return t is None or t.is_closing()

    def is_idle(self) -> bool:
        return not self.busy

    def close(self) -> None:
        self.busy = False
        self.closed = True
        self._stop_timer()
        if self.transport is not None:
            self.transport.abort()

    async def wait(self, timeout: float | None) -> None:
        """Until the socket delivers something (bytes, the end, an error), or TimeoutError.

        The connection's timer is left running between waits and only moved when a
        wait must end sooner than it fires; when it fires early for the wait then
        current, it is set again for that wait's deadline."""
        loop = asyncio.get_running_loop()
        fut = self._waiter = loop.create_future()
        if timeout is None:
            self._deadline = None
        else:
            deadline = self._deadline = loop.time() + timeout
            if self._timer is None or self._timer_at > deadline:
                self._arm(loop, deadline)
        try:
            await fut
        except BaseException:
            # The failure's traceback holds this frame, and the future holds the
            # failure: drop the future, or the two make a cycle per timed-out wait.
            del fut
            raise
        finally:
            self._waiter = None

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._check_deadline, loop)

    def _check_deadline(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        fut, deadline = self._waiter, self._deadline
        if fut is None or fut.done() or deadline is None:
            return  # not waiting: the next wait arms it again
        if loop.time() >= deadline - 0.001:  # the loop's timers may fire a hair early
            fut.set_exception(TimeoutError())
        else:
            self._arm(loop, deadline)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def splice(self, sink: Callable[[bytes], int], timeout: float | None,
                     drain: Callable[[], Awaitable[None]]) -> None:
        """Hand each read of the current answer's body to ``sink`` inside
        ``data_received``, without waking the caller, until ``sink`` says stop
        (``SINK_STOP``), the answer ends or fails, or ``timeout`` passes with
        nothing read (``TimeoutError``). ``SINK_PAUSE``: the reader's own
        buffer is full; reading pauses until ``drain()`` returns. Whatever the
        sink was not given stays in the parser for ``take``."""
        p = self.parser
        assert p is not None
        self._sink, self._sink_timeout = sink, timeout
        try:
            while self._sink is not None and not self.closed and self.failure is None:
                await self.wait(timeout)
                if self._sink_paused:
                    self._sink_paused = False
                    await drain()
                    if self.transport is not None and not self._read_paused:
                        self.transport.resume_reading()
                    if p.buffered or p.done:  # arrived meanwhile: the caller takes it
                        return
        finally:
            self._sink = None
            if self._sink_paused:
                self._sink_paused = False
                if self.transport is not None and not self._read_paused:
                    self.transport.resume_reading()

    async def send(self, data: bytes, timeout: float | None) -> None:
        """Write ``data``; wait (up to ``timeout``) only while the socket's buffer is full."""
        assert self.transport is not None
        self.transport.write(data)
        while self._write_paused:
            if self.closed:
                raise ConnectionLost(f"connection reset {self.addr}", self.addr)
            loop = asyncio.get_running_loop()
            fut = self._drain = loop.create_future()
            timer = loop.call_later(timeout, _expire, fut) if timeout is not None else None
            try:
                await fut
            except TimeoutError:
                del fut  # as in ``wait``: no cycle through the future's failure
                raise WriteTimeout(f"write timeout {self.addr}", self.addr) from None
            finally:
                self._drain = None
                if timer is not None:
                    timer.cancel()

    async def read_head(self, timeout: float | None,
                        failure: type[ReadTimeout] = ReadTimeout,
                        ) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes]:
        """The answer's head (informational answers skipped)."""
        p = self.parser
        assert p is not None
        while p.head is None:
            if self.failure is not None:
                raise self.failure.again()
            if self.closed:  # closed before this request's parser was there to see it
                raise ConnectionLost(f"connection closed by upstream {self.addr}", self.addr)
            try:
                await self.wait(timeout)
            except TimeoutError:
                raise timed_out(failure, timeout, self.addr) from None
        return p.head

    def take(self, p: ResponseParser) -> bytes:
        data = p.take()
        if self._read_paused and p.buffered < LOW_WATER and self.transport is not None:
            self._read_paused = False
            self.transport.resume_reading()
        return data

    def take_all(self, p: ResponseParser) -> bytes:
        """``take``, every piece parsed so far at once (``ResponseParser.take_all``)."""
        data = p.take_all()
        if self._read_paused and self.transport is not None:
            self._read_paused = False
            self.transport.resume_reading()
        return data

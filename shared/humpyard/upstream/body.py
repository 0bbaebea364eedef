"""The body of one upstream answer, read off its connection as it arrives.

``Body`` takes the body bytes a ``Conn`` (``upstream/connection.py``) has fed
to the answer's parser, waits on the connection for more under the idle limit,
and hands the connection back to its pool (or closes it) as soon as the whole
answer is in. ``splice`` lends the body's reads to a direct relay (ADR 0021).
Kept apart from the connection: the connection knows sockets and parsers, the
body knows when a caller is done with an answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from humpyard.upstream.connection import timed_out
from humpyard.upstream.errors import ConnectionLost, ReadTimeout

if TYPE_CHECKING:
    from humpyard.upstream.connection import Conn


class Body:
    """An answer's body as it arrives: iterate it to the end, or ``aclose()`` it.

    The connection goes back to its pool as soon as the whole answer is in
    (``put``), or is closed if it cannot be reused; ``on_end`` runs once when the
    caller is done with the body (read to the end, failed, or closed), e.g. to
    free a concurrency slot.
    """

    __slots__ = ("_conn", "_parser", "_timeout", "_put", "_drop", "_on_end", "_released",
                 "_failure")

    def __init__(self, conn: Conn, timeout: float | None, put: Callable[[Conn], None],
                 drop: Callable[[Conn], None], on_end: Callable[[], Any] | None = None,
                 failure: type[ReadTimeout] = ReadTimeout):
        p = conn.parser
        assert p is not None
        self._conn, self._parser, self._timeout = conn, p, timeout
        self._put, self._drop, self._on_end = put, drop, on_end
        self._released = False
        self._failure = failure  # what a wait past ``timeout`` raises
        if p.done:
            self._release()

    def _release(self) -> None:
        """Hand the connection back (or close it); the body bytes stay in the parser."""
        if self._released:
            return
        self._released = True
        conn, p = self._conn, self._parser
        if p.done and p.reusable and not p.extra and not conn.unsolicited:
            self._put(conn)
        else:
            self._drop(conn)

    def _end(self) -> None:
        """The body is done with, however it ended: the connection released, the end told."""
        self._release()
        self._finish()

    def _abandoned(self, e: BaseException) -> BaseException:
        """A wait on the connection failed with ``e``: the body is ended, and this is
        what to raise: a wait past the idle limit as this body's ``failure`` (with no
        context, as ``raise ... from None``), anything else as it came."""
        self._end()
        if not isinstance(e, TimeoutError):
            return e
        failure = timed_out(self._failure, self._timeout, self._conn.addr)
        failure.__suppress_context__ = True
        return failure

    def _finish(self) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end()

    def __aiter__(self) -> Body:
        return self

    async def __anext__(self) -> bytes:
        conn, p = self._conn, self._parser
        while True:
            if self._released:  # the whole answer is in (or the body was closed)
                data = p.take()
                if data:
                    return data
                self._finish()
                raise StopAsyncIteration
            data = conn.take(p)
            if p.done:
                self._release()
                if data:
                    return data
                continue
            if data:
                return data
            failure = conn.failure
            if failure is None and conn.closed:
                failure = ConnectionLost(f"connection closed by upstream {conn.addr}", conn.addr)
            if failure is not None:
                self._end()
                raise failure.again()  # not the kept one, nor one this frame holds
            try:
                await conn.wait(self._timeout)
            except BaseException as e:
                raise self._abandoned(e)  # noqa: B904 - _abandoned says what it chains

    def rest(self) -> bytes:
        """The rest of the read ``__anext__`` took its piece from, joined (b"" when
        nothing else is parsed): ``__anext__`` hands a chunked body one chunk at a
        time, as the upstream framed them; a relay passes a read on as one write."""
        p = self._parser
        if not p.buffered:
            return b""
        if self._released:  # the connection may serve another answer by now
            return p.take_all()
        data = self._conn.take_all(p)
        if p.done:
            self._release()
        return data

    @property
    def complete(self) -> bool:
        """The whole answer is in and taken: the next ``__anext__`` ends the body."""
        return self._parser.done and not self._parser.buffered

    async def splice(self, sink: Callable[[bytes], int],
                     drain: Callable[[], Awaitable[None]]) -> None:
        """``Conn.splice`` for this body's reads, when none wait and the answer is
        not all in; afterwards ``__anext__`` takes what is left (the end, a failure).
        A wait past the idle limit fails as ``__anext__``'s would."""
        conn, p = self._conn, self._parser
        if self._released or p.done or p.buffered or conn.failure is not None or conn.closed:
            return
        try:
            await conn.splice(sink, self._timeout, drain)
        except BaseException as e:
            raise self._abandoned(e)  # noqa: B904 - _abandoned says what it chains

    async def aclose(self) -> None:
        """Stop reading: a connection whose answer is not all in is closed."""
        self._end()


def rest_of_read(body: object) -> bytes:
    """``Body.rest`` of ``body`` if it is a connection's own (b"" for a decoded one)."""
    return body.rest() if type(body) is Body else b""


def complete(body: object) -> bool:
    """``Body.complete`` of ``body`` if it is a connection's own (else False)."""
    return type(body) is Body and body.complete

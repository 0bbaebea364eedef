"""uvicorn's httptools protocol within a ``ConnectionGuard``'s limits
(``connections.py``): ``guarded(base, guard)``, which ``serving.protocol_class``
applies.

The protocol counts a request head's bytes as they arrive (a 431 past
``max_header_bytes``, before parsing), notes when each head and body began for
the guard's sweep (a 408 past ``header_timeout_secs`` or ``body_timeout_secs``),
cuts a client that takes none of its answer for ``send_timeout_secs``, answers
what the parser refuses in the gateway's JSON shape (a head or a body that is
not HTTP/1.1: ``http1.py``), and lingers on each close it makes so the client
reads its answer rather than a reset.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools

from humpyard.connections import ConnectionGuard
from humpyard.errors import BodyMalformed, BodyTimeout, RequestError
from humpyard.http1 import (
    HeadRefused,
    check_head,
    close_if_answered_unread,
    malformed_reason,
    not_http1,
    resume_after_upgrade,
)

LINGER_SECS = 1.0
"""How long a refused connection keeps reading (and dropping) what the client still
sends after its answer: closing a socket with unread bytes sends a reset, and the
client would see the reset instead of the answer."""


def _refusal(status: bytes, code: str, message: str) -> bytes:
    body = (b'{"error":{"message":"' + message.encode() + b'","type":"invalid_request_error",'
            b'"code":"' + code.encode() + b'"}}')
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
            + body)


def guarded(base: type[Any], guard: ConnectionGuard) -> type[asyncio.Protocol]:
    class GuardedProtocol(base):  # type: ignore[valid-type, misc]
        """``base`` within ``guard``'s limits. ``head_since``: when the request head
        being read began (the connection's start for the first), None between heads;
        ``head_bytes``: bytes received since then; ``body_since``: when the head of
        the request whose body is being read ended (None once the request is read
        whole); ``stalled_since``: when the transport last asked to pause writing (its
        buffer past the high-water mark: the client is not taking the answer), None
        once it drained; ``refused``: answered and draining."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            spec = guard.settings()
            self.timeout_keep_alive = spec.keepalive_timeout_secs
            self.max_head = spec.max_header_bytes
            self.head_since: float | None = None
            self.head_bytes = 0
            self._began = self._body_seen = False  # in the read being parsed
            self.body_since: float | None = None
            self.stalled_since: float | None = None
            self.refused = False
            self._linger: asyncio.TimerHandle | None = None
            self._draining = False  # lingering until the client stops sending a body
            self._stopping = False  # the server is shutting down: closes are closes

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(guard.open) >= guard.cap():
                self.refused = True
                self.transport = transport
                guard.over_cap()
                if len(guard.lingering) >= max(16, guard.nofile // 8):
                    # Refusing many at once: the oldest refused one has had its answer.
                    oldest = next(iter(guard.lingering))
                    del guard.lingering[oldest]
                    oldest.transport.close()
                guard.lingering[self] = None
                self._answer_and_close(_refusal(
                    b"503 Service Unavailable", "too_many_connections",
                    "too many open connections; retry later"))
                return
            guard.open.add(self)
            self.head_since = self.loop.time()
            super().connection_made(transport)
            wire: Any = self.transport  # serving.HeadHoldingTransport
            wire.closing = self._closed_by_server

        def connection_lost(self, exc: Exception | None) -> None:
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
            guard.lingering.pop(self, None)
            if self not in guard.open:
                return
            guard.open.discard(self)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.refused:  # answered already: what follows is dropped
                if self._draining and self._linger is not None:
                    self._linger.cancel()  # the close waits for the client to stop
                    self._linger = self.loop.call_later(LINGER_SECS, self.transport.close)
                return
            while True:  # more than once only when an upgrade offer cut a read short
                n = len(data)
                if self.head_bytes + n > self.max_head and self._at_head():
                    # A read that may hold a whole oversized head (reads are up to
                    # 256 KiB): measure the head up to its end before parsing any of it.
                    end = data.find(b"\r\n\r\n")
                    size = (self.head_bytes if self.head_since is not None else 0) + (
                        end + 4 if end >= 0 else n)
                    if size > self.max_head:
                        self._head_too_large()
                        return
                self._began = self._body_seen = False
                # uvicorn's own data_received, its two exceptions answered here
                self._unset_keepalive_if_required()
                try:
                    self.parser.feed_data(data)
                except httptools.HttpParserUpgrade as cut:  # an offer cut the read short
                    resume_after_upgrade(self)
                    if self.cycle.more_body:  # its body is read as ever
                        self.body_since = self.loop.time()
                    at = cut.args[0] if cut.args else n
                    if at >= n or self.refused:
                        return
                    data = data[at:]  # the rest of the read, as a read of its own
                    continue
                except httptools.HttpParserError as e:
                    self._malformed(e)
                    return
                if self.head_since is not None and not self.transport.is_closing():
                    if not self._began:  # the whole read is more of the same head
                        self.head_bytes += n
                    elif not self._body_seen:
                        # Pipelined requests: the head begun in this read is what follows
                        # the last complete head in it (it has no end of its own yet).
                        end = data.rfind(b"\r\n\r\n")
                        self.head_bytes = n - (end + 4) if end >= 0 else n
                    # else a body ended in this read before the head began: where is not
                    # known, so this read is not counted (at most one read; the next ones
                    # are, and the header timeout still runs)
                    if self.head_bytes > self.max_head:
                        self._head_too_large()
                return

        def _malformed(self, error: Exception) -> None:
            """Bytes that are not HTTP/1.1 (the parser's ``error``): a 400 naming what
            the parser found, counted, and a WARNING at most every ``LOG_EVERY_SECS``.
            uvicorn answered in plain text, counted nothing and logged a WARNING for
            every one, so a client without a key could fill the log."""
            reason = malformed_reason(error)
            guard.malformed(reason, error)
            refused = error.__context__
            if isinstance(refused, HeadRefused):  # a head check_head refused: its answer
                self._stop_reading(_refusal(refused.status, refused.code, refused.message))
                return
            message = not_http1(reason)
            cycle = self.cycle
            if self.body_since is not None and cycle is not None:
                if not cycle.response_started:
                    # In the body, the head gone to the app: answered here, and the app's
                    # request ends with the same 400 (it closed with no answer, a 499).
                    self._cut_body(BodyMalformed(message), b"400 Bad Request")
                    return
                if cycle.response_complete:  # the body of a request answered already (a
                    self.head_since = None  # 413 while it still came): a second answer
                    self._linger_close()  # would be read as the next request's
                    return
            self._stop_reading(_refusal(b"400 Bad Request", "bad_request", message))

        def _at_head(self) -> bool:
            """Whether what arrives now is (part of) a request head, not a body: a
            body still arriving after its answer (a 413 sent before the body was
            read; uvicorn reads the rest and drops it) is not the next head."""
            if self.head_since is not None:
                return True
            cycle = self.cycle
            return self.body_since is None and (cycle is None or cycle.response_complete)

        def on_message_begin(self) -> None:
            if self.head_since is None:
                self.head_since = self.loop.time()
            self.head_bytes = 0
            self._began = True
            super().on_message_begin()

        def on_body(self, body: bytes) -> None:
            self._body_seen = True
            super().on_body(body)

        def on_headers_complete(self) -> None:
            check_head(self.parser.get_http_version(), self.headers)  # else not the app's
            self.head_since = None
            self.head_bytes = 0
            self.body_since = self.loop.time()
            super().on_headers_complete()
            if self.expect_100_continue:
                close_if_answered_unread(self.cycle)

        def on_message_complete(self) -> None:
            self.body_since = None
            super().on_message_complete()

        def pause_writing(self) -> None:
            if self.stalled_since is None:
                self.stalled_since = self.loop.time()
            super().pause_writing()

        def resume_writing(self) -> None:
            self.stalled_since = None
            super().resume_writing()

        def send_timed_out(self) -> None:
            """The client has taken nothing of its answer for the send timeout (the
            transport's buffer stayed past its high-water mark): the connection is
            aborted (a close would wait for the buffer to drain). The request's
            client watch sees the loss, so the request is cancelled and recorded as a
            client that left (499), and its upstream connection and slot are freed."""
            guard.count("send_timeout")
            self.stalled_since = None
            self.refused = True
            self.transport.abort()

        def _head_too_large(self) -> None:
            guard.count("headers_too_large")
            limit = self.max_head
            self._stop_reading(_refusal(
                b"431 Request Header Fields Too Large", "headers_too_large",
                f"request head: more than {limit} bytes (the line and headers together)"))

        def head_timed_out(self) -> None:
            guard.count("header_timeout")
            if self.head_bytes or (self.cycle is not None and not self.cycle.response_complete):
                self._stop_reading(_refusal(b"408 Request Timeout", "request_timeout",
                                            "the request head did not arrive in time"))
            else:  # nothing sent since the connection (or the last answer): just close
                self.head_since = None
                self.transport.close()

        def body_timed_out(self, limit: float) -> None:
            """The body is still arriving ``limit`` seconds after its head (a slow
            POST): a 408 if no answer has begun, and the request's ``receive()``
            answers ``http.disconnect`` at once (the intake records a ``BodyTimeout``,
            seeing ``body_timed_out`` on the transport); else the connection closes."""
            guard.count("body_timeout")
            cycle = self.cycle
            if cycle is None or cycle.response_started:
                self.body_since = None
                self.refused = True
                self.transport.close()
                return
            self._cut_body(BodyTimeout(f"the request body did not arrive within {limit:g}s "
                                       "of its head (body_timeout_secs)"),
                           b"408 Request Timeout")

        def _cut_body(self, error: RequestError, status: bytes) -> None:
            """End a request's body before its end, no answer begun: the client gets
            ``error`` as ``status``, the connection closes, and the request's
            ``receive()`` answers ``http.disconnect`` at once; the intake raises
            ``error`` (marked on the transport: ``http/body.py``'s ``body_cut``), so
            the record says what the client was told."""
            cycle = self.cycle
            self.body_since = None
            wire: Any = self.transport  # serving.HeadHoldingTransport
            wire.body_cut = error
            self.refused = True
            self._answer_and_close(_refusal(status, error.code, error.message))
            # As uvicorn's own connection_lost does: the app's receive() returns.
            cycle.disconnected = True
            cycle.message_event.set()

        def _stop_reading(self, answer: bytes) -> None:
            """Answer (unless a response is under way, then just close) and drain."""
            self.head_since = None
            self.refused = True
            if self.cycle is not None and not self.cycle.response_complete:
                self.transport.close()
                return
            self._answer_and_close(answer)

        def _answer_and_close(self, answer: bytes) -> None:
            self.transport.write(answer)
            self._linger_close()

        def _closed_by_server(self) -> None:
            """The first close of the connection from the server's side (uvicorn's, at
            the end of an answer that closes it, or the guard's own). Closing while
            the client is still sending the body of the request just answered (a 413
            from its ``Content-Length``, a 401 from its head, on a ``Connection:
            close`` request) would meet those bytes with a reset, and a client that
            sends its whole body before reading (Python's ``http.client``) saw
            ``ConnectionResetError`` instead of the answer. Such a close drains: the
            rest is read and dropped, and the connection closes ``LINGER_SECS`` after
            the client stops sending, or at the body timeout (``expire``); not when the
            server is stopping, which would wait that long for it."""
            cycle = self.cycle
            if (self.body_since is not None and not self.refused and cycle is not None
                    and cycle.response_complete and not self._stopping):
                self._draining = True
                self._linger_close()
            else:
                self.transport.close()  # the hook is spent: this one closes

        def shutdown(self) -> None:
            self._stopping = True
            super().shutdown()

        def _linger_close(self) -> None:
            """Close after what was written, reading and dropping what the client
            still sends for ``LINGER_SECS`` (closing a socket with unread bytes sends
            a reset, and the client would see the reset instead of the answer)."""
            self.refused = True
            transport = self.transport
            try:
                transport.write_eof()
            except (NotImplementedError, AttributeError, RuntimeError, OSError):
                transport.close()
                return
            self._linger = self.loop.call_later(LINGER_SECS, transport.close)

    return GuardedProtocol

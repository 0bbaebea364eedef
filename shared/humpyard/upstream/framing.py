"""HTTP/1.1 response framing, sans-I/O: bytes in, one answer's head and body out.

``ResponseParser`` wraps httptools' response parser (llhttp, the parser of
Node.js) and never touches a socket: ``feed()`` the bytes as they arrive,
``feed_eof()`` when the upstream closes, and read ``head``, ``take()`` body bytes
and ``done``. llhttp owns the framing (Content-Length, chunked with extensions
and trailers, informational answers, 204/304); this module adds what RFC 9112
says a client must also accept and llhttp refuses: line folding (obs-fold) and
bare-LF line ends in the head (llhttp's lenient modes), a Content-Length
repeated with one value (``Content-Length: 255, 255``, §6.3: replaced by one
field), and a body delimited by the connection's close. See docs/upstream.md.
"""

from __future__ import annotations

import re

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

MAX_HEAD = 65536
"""The largest response head accepted, in bytes."""

_EOL = re.compile(rb"\r?\n")
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length[ \t]*:")


class FramingError(Exception):
    """The bytes are not a valid HTTP/1.1 answer; the message says why."""


class Truncated(FramingError):
    """The connection closed before the answer was complete."""


class ResponseParser:
    """One answer's framing (a new parser per request).

    ``head_only``: the request was a HEAD or a CONNECT, so the answer has no body.
    After ``done``, ``reusable`` says whether the connection may carry another
    request. Raises ``FramingError`` from ``feed``/``feed_eof``.
    """

    __slots__ = ("_p", "_head_only", "_fed", "_head_bytes", "_headers", "_reason", "_info",
                 "_until_close", "_chunks", "_size", "head", "done", "reusable", "extra",
                 "_retried")

    def __init__(self, head_only: bool = False):
        self._head_only = head_only
        self._new_parser()
        self._fed = 0
        self._head_bytes = b""
        self._retried = False
        self._chunks: list[bytes] = []
        self._size = 0
        self._until_close = False
        self.head: tuple[int, bytes, list[tuple[bytes, bytes]], bytes] | None = None
        self.done = False
        self.reusable = False
        self.extra = False  # bytes after the answer's end: the connection is not reused

    def _new_parser(self) -> None:
        self._p: HttpResponseParser | None = HttpResponseParser(self)
        self._p.set_dangerous_leniencies(lenient_headers=True,
                                         lenient_optional_cr_before_lf=True)
        self._headers: list[tuple[bytes, bytes]] = []
        self._reason = b""
        self._info = False

    # -- llhttp callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.done:
            self.extra = True

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value.strip(b" \t")))  # RFC 9110 §5.5: not part of it

    def on_headers_complete(self) -> None:
        p = self._p
        assert p is not None  # dropped only once the answer is complete
        status = p.get_status_code()
        if 100 <= status < 200:  # informational: the answer follows
            self._info = True
            self._headers, self._reason = [], b""
            return
        version = b"HTTP/" + p.get_http_version().encode("ascii")
        self.head = (status, self._reason, self._headers, version)
        self.reusable = p.should_keep_alive()
        if self._head_only:
            self.done, self.reusable = True, False  # llhttp cannot skip a HEAD's body
            return
        framed = status in (204, 304)
        for name, value in self._headers:
            n = name.lower()
            if n == b"content-length" or (n == b"transfer-encoding"
                                          and value.lower().rstrip().endswith(b"chunked")):
                framed = True
        self._until_close = not framed

    def on_body(self, data: bytes) -> None:
        if not self.done:
            self._chunks.append(data)
            self._size += len(data)

    def on_message_complete(self) -> None:
        if self._info:
            self._info = False
        elif self.head is not None:
            self.done = True

    # -- feeding ------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Parse ``data``; afterwards ``head``, ``done`` and the body bytes may be set."""
        parser = self._p
        if parser is None:  # the answer was complete: these bytes were not asked for
            self.extra = True
            return
        if self.head is None:
            self._fed += len(data)
            self._head_bytes += data
        try:
            parser.feed_data(data)
        except HttpParserUpgrade:
            self._p = None
            raise FramingError("the upstream switched protocols (101), never asked for") from None
        except HttpParserError as e:
            if self.head is None and not self._retried and self._one_length():
                return
            self._p = None  # complete or failed: nothing more is parsed
            if self.done:  # garbage after a complete answer: it is still complete
                self.extra = True
                return
            raise FramingError(str(e) or type(e).__name__) from None
        if self.done:
            # llhttp holds this object's callbacks and this object holds llhttp: a
            # cycle only the garbage collector would free, once per request.
            self._p = None
        if self.head is None:
            if self._fed > MAX_HEAD:
                self._p = None
                raise FramingError(f"response head larger than {MAX_HEAD} bytes")
        else:
            self._head_bytes = b""

    def _one_length(self) -> bool:
        """Re-parse a head whose Content-Length fields all say one number, with one field.

        True when it was re-parsed (llhttp refuses repeated Content-Length fields)."""
        data = self._head_bytes
        end = re.search(rb"\r?\n\r?\n", data)
        if end is None or not _CONTENT_LENGTH.search(data, 0, end.start() + 1):
            return False
        lines = _EOL.split(data[:end.start()])
        values: set[bytes] = set()
        kept: list[bytes] = []
        for line in lines:
            if _CONTENT_LENGTH.match(line):
                values.update(v.strip() for v in line.split(b":", 1)[1].split(b","))
                continue
            kept.append(line)
        if len(values) != 1 or not next(iter(values)).isdigit():
            return False
        kept.insert(1, b"Content-Length: " + values.pop())
        self._retried = True
        self._new_parser()
        self._head_bytes, self._fed = b"", 0
        self.feed(b"\r\n".join(kept) + b"\r\n\r\n" + data[end.end():])
        return True

    def feed_eof(self) -> None:
        """The upstream closed the connection: ends a close-delimited body, else fails."""
        if self.done:
            return
        self._p = None  # nothing more can come: let llhttp go (see ``feed``)
        if self.head is None:
            raise Truncated("connection closed before the answer's head")
        if not self._until_close:
            raise Truncated("connection closed before the end of the answer")
        self.done, self.reusable = True, False

    # -- the body -----------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Body bytes parsed but not taken yet."""
        return self._size

    def take(self) -> bytes:
        """The next piece of body parsed and not taken yet (b"" when none): one
        chunk of a chunked body at a time, as the upstream framed them."""
        chunks = self._chunks
        if not chunks:
            return b""
        data = chunks.pop(0) if len(chunks) > 1 else chunks.pop()
        self._size -= len(data)
        return data

    def take_all(self) -> bytes:
        """Every piece of body parsed and not taken yet, joined (b"" when none)."""
        chunks = self._chunks
        if len(chunks) == 1:
            data = chunks.pop()
        else:
            data = b"".join(chunks)
            chunks.clear()
        self._size = 0
        return data

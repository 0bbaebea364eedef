"""Two HTTP/1.1 requests uvicorn's httptools protocol reads wrong, read right.

An offer to change protocol is read as HTTP/1.1 all the same
(``resume_after_upgrade``). ``curl --http2`` on a plain-http URL sends
``Connection: Upgrade`` and ``Upgrade: h2c`` with its request, a POST and its body
included (other HTTP/2 clients offer ``h2c`` on plain http as well). The
gateway speaks HTTP/1.1 only and may ignore the offer (RFC 9110, 7.8). httptools
cannot: it ends the request at its head and stops (``HttpParserUpgrade`` at the
head's end), so the body was never read (a 400 "request body is empty"), the
requests pipelined after it were dropped, and uvicorn logged two WARNING lines.
A new parser takes the old one's place, primed with a head of our own that
carries the request's framing (its ``Content-Length`` or ``Transfer-Encoding``,
which llhttp has checked): the bytes after the real head are then its body, and
the requests after it are parsed as ever. The primed head's own callbacks are
dropped (``_Resumed``); everything after goes to the protocol. Only a connection
that made such an offer pays the indirection
(docs/decisions/0032-upgrade-offers-read-as-http1.md).

A request that asked ``Expect: 100-continue`` and is answered before any of its
body came closes its connection (``close_if_answered_unread``).

Bytes that are not HTTP/1.1 are named in their 400 (``malformed_reason``), and
so is a head llhttp takes that HTTP/1.1 does not (``check_head``: RFC 9112's Host
rule, a version other than 1.0 or 1.1).
"""

from __future__ import annotations

import re
from types import MethodType
from typing import Any

import httptools


class _Resumed:
    """The parser callbacks of a protocol, less those of the primed head."""

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._primed = True
        self.on_body = protocol.on_body
        self.on_message_complete = protocol.on_message_complete

    def on_message_begin(self) -> None:
        if not self._primed:
            self._protocol.on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self._primed:
            self._protocol.on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._primed:
            self._protocol.on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._primed:
            self._primed = False
        else:
            self._protocol.on_headers_complete()


def resume_after_upgrade(protocol: Any) -> None:
    """Replace ``protocol.parser`` (uvicorn's httptools protocol, its request just cut
    at the head by an upgrade offer) with one that reads on as HTTP/1.1: the request's
    body next, if it has one, then the requests after it. The request already went to
    the app with no body; it is told more is coming."""
    framing = [b"%s: %s\r\n" % (name, value) for name, value in protocol.headers
               if name in (b"content-length", b"transfer-encoding")]
    parser = protocol.parser = httptools.HttpRequestParser(_Resumed(protocol))
    if framing:
        protocol.cycle.more_body = True  # the old parser had ended it at its head
    # Last: a framing of no body (Content-Length: 0) ends the request right here.
    parser.feed_data(b"POST / HTTP/1.1\r\n" + b"".join(framing) + b"\r\n")


def close_if_answered_unread(cycle: Any) -> None:
    """A request that asked ``Expect: 100-continue`` and is answered before its body
    was asked for (a 401, 404 or 413 from its head alone) while none of the body has
    come: the client may or may not send it now, so the connection cannot tell the
    body from the next request. The answer says ``connection: close`` and the
    connection closes after it (RFC 9110, 10.1.1). uvicorn kept it open and took the
    client's next request for the body. The close lingers (the connection guard's
    ``_closed_by_server``): what the client sends meanwhile is dropped, not met with
    a reset that could cost it the answer. A client that sent its body without
    waiting (some of it has come) keeps its connection; the rest is read and
    dropped. The wrapper is a method of the cycle, as uvicorn's ``send`` is, so a
    stream's direct relay still finds the cycle under it (``http/reply.py``)."""
    send = cycle.send

    async def send_closing(self: Any, message: Any) -> None:
        if (self.waiting_for_100_continue and self.more_body and not self.body
                and message["type"] == "http.response.start"):
            self.keep_alive = False  # uvicorn adds connection: close and closes after
        await send(message)
    cycle.send = MethodType(send_closing, cycle)


class HeadRefused(Exception):
    """A request head llhttp parsed that the gateway does not take (``check_head``),
    raised from the parser's ``on_headers_complete``: the parser stops there, before
    the app is given the request, and the connection answers ``status`` with
    ``code`` and ``message``; ``reason`` is what the log and ``malformed_reason``
    name."""

    def __init__(self, status: bytes, code: str, reason: str, message: str) -> None:
        super().__init__(reason)
        self.status, self.code, self.reason, self.message = status, code, reason, message


def not_http1(reason: str) -> str:
    """The message of a 400 for a request that is not HTTP/1.1, naming ``reason``."""
    return f"the request is not valid HTTP/1.1 ({reason})"


def _bad_head(reason: str) -> HeadRefused:
    return HeadRefused(b"400 Bad Request", "bad_request", reason, not_http1(reason))


# RFC 3986 ``host [ ":" port ]``: an IP literal (with a zone, or IPvFuture) or a
# reg-name (an IPv4 address is one)
_HOST = re.compile(rb"(\[[0-9A-Za-z:.%_~-]{2,100}\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(:[0-9]{0,5})?")
VERSIONS = frozenset({"1.1", "1.0"})


def check_head(version: str, headers: list[tuple[bytes, bytes]]) -> None:
    """Raise ``HeadRefused`` for a head llhttp took that HTTP/1.1 does not: a version
    the gateway does not speak (``HTTP/2.0`` or a bare ``GET /path``, HTTP/0.9) is a
    505, and an HTTP/1.1 request without a Host header, with more than one, or with
    one that is not ``host[:port]`` is a 400 (RFC 9112, 3.2: a server MUST). uvicorn
    served all of them. ``headers`` are uvicorn's, names lowercased."""
    if version not in VERSIONS:
        reason = f"HTTP/{version} is not served; this server speaks HTTP/1.1"
        raise HeadRefused(b"505 HTTP Version Not Supported", "http_version_not_supported",
                          reason, reason)
    host = None
    for name, value in headers:
        if name == b"host":
            if host is not None:
                raise _bad_head("more than one Host header")
            host = value
    if host is None:
        if version == "1.1":
            raise _bad_head("an HTTP/1.1 request needs a Host header")
    elif not _HOST.fullmatch(host):
        raise _bad_head("the Host header is not a host[:port]")


def malformed_reason(error: Exception) -> str:
    """What the parser's ``error`` says is wrong, never quoting the request: llhttp's
    own words, or, when llhttp took the request and one of the protocol's callbacks
    did not (uvicorn's reading of ``CONNECT``'s ``host:port``, ``check_head``), what
    that was."""
    if isinstance(error, httptools.HttpParserCallbackError):
        if isinstance(error.__context__, HeadRefused):
            return error.__context__.reason
        invalid_url = isinstance(error.__context__, httptools.HttpParserInvalidURLError)
        return "Invalid request target" if invalid_url else "Unreadable request"
    words = "".join(c for c in str(error)[:80] if c.isalnum() or c in " ,.:/-'")
    return words or "unreadable"

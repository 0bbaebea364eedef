"""The differential corpus: wire cases played to our transport and to httpx alike.

Each ``Case`` is a script for ``tests.support.rawserver.RawServer`` (the exact
bytes an upstream sends, pauses, closes and resets) plus how to call it. The
observable outcome must agree between the two clients, unless ``differs``
names the deliberate difference (each is written down in docs/upstream.md,
"Differences from httpx").
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.support.rawserver import CLOSE, HOLD, RESET, Action, Pause


@dataclass(frozen=True)
class Case:
    name: str
    script: Sequence[Action] | tuple[Sequence[Action], ...]  # a tuple of lists: per request
    method: str = "GET"
    requests: int = 1  # sent one after another on one client (keep-alive cases)
    read_timeout: float = 3.0
    connect_timeout: float = 5.0  # the dial and the TLS handshake
    tls: str | None = None  # "trusted" or "untrusted" (a private CA made by trustme)
    proxy: bool = False  # through the test's forward proxy
    plain_to_tls: bool = False  # an https URL to a plain-HTTP port
    refused: bool = False  # nothing listens
    client: bool = False  # also through UpstreamClient.open (POST, decoded body)
    differs: str | None = None  # the section of docs/upstream.md that explains it
    ours: dict[str, object] = field(default_factory=dict)  # what we do, when it differs


def ok(body: bytes = b"hello", *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n%s\r\n%s"
            % (len(body), extra, body))


def chunked(*chunks: bytes, head: bytes = b"", trailer: bytes = b"") -> bytes:
    out = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
    out += head + b"\r\n"
    for c in chunks:
        out += b"%x\r\n%s\r\n" % (len(c), c)
    return out + b"0\r\n" + trailer + b"\r\n"


def deflate(data: bytes, raw: bool = False) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


GZ = gzip.compress(b'{"choices": [{"message": {"content": "zipped"}}]}' * 20)
CHAT_JSON = b'{"choices": [{"message": {"content": "zipped"}}]}' * 20


def _gzip_stream() -> list[Action]:
    c = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    parts = [c.compress(b"data: {\"n\": %d}\n\n" % i) + c.flush(zlib.Z_SYNC_FLUSH)
             for i in range(5)]
    parts.append(c.flush())
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
    out: list[Action] = [head]
    for p in parts:
        out += [b"%x\r\n%s\r\n" % (len(p), p), Pause(0.02)]
    return [*out, b"0\r\n\r\n"]


CASES: list[Case] = [
    # -- framing ----------------------------------------------------------------
    Case("content-length", [ok()]),
    Case("content-length-zero", [ok(b"")]),
    Case("content-length-large", [ok(b"x" * 300_000)]),
    Case("chunked", [chunked(b"hello", b" ", b"world")]),
    Case("chunked-extensions-and-trailers",
         [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
          b"5;ext=1\r\nhello\r\n1;a=b;c\r\n \r\n5\r\nworld\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n"]),
    Case("chunked-many-small", [chunked(*[b"%d" % i for i in range(50)])]),
    Case("chunked-uppercase-hex-size",
         [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n"]),
    Case("chunked-split-across-writes",
         [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r", Pause(0.02),
          b"\nhel", Pause(0.02), b"lo\r\n0\r", Pause(0.02), b"\n\r\n"]),
    Case("close-delimited", [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end",
                             CLOSE]),
    Case("http10-close-delimited", [b"HTTP/1.0 200 OK\r\n\r\nold style", CLOSE]),
    Case("http10-content-length", [b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi"]),
    Case("informational-100", [b"HTTP/1.1 100 Continue\r\n\r\n" + ok()]),
    Case("informational-103-with-headers",
         [b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n" + ok()]),
    Case("no-content-204", [b"HTTP/1.1 204 No Content\r\n\r\n"], requests=2),
    Case("not-modified-304-with-length",
         [b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n"], requests=2),
    Case("head-with-length", [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"], method="HEAD"),
    Case("status-without-reason", [b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nhi"]),
    Case("status-599", [b"HTTP/1.1 599 Whatever\r\nContent-Length: 2\r\n\r\nhi"]),
    Case("error-status-with-body",
         [b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Type: application/json"
          b"\r\nContent-Length: 11\r\n\r\n{\"e\": \"rl\"}"]),
    Case("header-whitespace", [b"HTTP/1.1 200 OK\r\nContent-Length:   2  \r\nX-A:\tv \r\n\r\nhi"]),
    Case("repeated-header", [ok(b"hi", b"X-A: 1", b"X-A: 2")]),
    Case("repeated-identical-content-length",
         [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi"]),
    Case("content-length-list", [b"HTTP/1.1 200 OK\r\nContent-Length: 255, 255\r\n\r\n"
                                 + b"x" * 255]),
    Case("conflicting-content-length",
         [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi!", CLOSE]),
    Case("obs-fold", [b"HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 2\r\n\r\nhi"]),
    Case("bare-lf-head", [b"HTTP/1.1 200 OK\nX-A: one\nContent-Length: 2\n\nhi"], requests=2),
    Case("bare-lf-chunk-lines",
         [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nhi\n0\n\n", CLOSE]),
    Case("bad-status-line", [b"HTTP/1.1 2x0 OK\r\n\r\n", CLOSE]),
    Case("not-http", [b"SPDY/3 200 OK\r\n\r\n", CLOSE]),
    Case("header-without-colon", [b"HTTP/1.1 200 OK\r\nbad header\r\nContent-Length: 0\r\n\r\n",
                                  CLOSE]),
    Case("bad-chunk-size", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                            CLOSE]),
    Case("bad-chunk-end", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n",
                           CLOSE]),
    Case("oversized-head", [b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
                            CLOSE]),
    Case("data-after-complete-answer", [ok(b"hi") + b"garbage", CLOSE]),
    # -- content codings ---------------------------------------------------------
    Case("gzip-buffered", [ok(GZ, b"Content-Encoding: gzip")], client=True),
    Case("gzip-streamed", _gzip_stream(), client=True),
    Case("deflate-zlib", [ok(deflate(CHAT_JSON), b"Content-Encoding: deflate")], client=True),
    Case("deflate-raw", [ok(deflate(CHAT_JSON, raw=True), b"Content-Encoding: deflate")],
         client=True),
    Case("gzip-then-identity-list", [ok(GZ, b"Content-Encoding: gzip, identity")],
         client=True),
    Case("gzip-corrupt", [ok(b"\x1f\x8b\x08\x00garbage-garbage", b"Content-Encoding: gzip")],
         client=True),
    Case("unknown-coding-passed-through", [ok(b"opaque", b"Content-Encoding: br")],
         client=True),
    # -- connections ending and stalling -------------------------------------------
    Case("truncated-chunk", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"a\r\nabc", CLOSE]),
    Case("close-mid-body", [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcde", CLOSE]),
    Case("reset-mid-body", [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcde",
                            Pause(0.05), RESET]),
    Case("close-before-answer", [CLOSE]),
    Case("reset-before-answer", [RESET]),
    Case("slow-trickle-head", [*(x for b in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
                                 for x in (bytes([b]), Pause(0.002)))]),
    Case("slow-trickle-body", [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                               *(x for c in b"hello" for x in (bytes([c]), Pause(0.05)))]),
    Case("read-timeout-before-head", [HOLD], read_timeout=0.3),
    Case("read-timeout-mid-body", [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", HOLD],
         read_timeout=0.3),
    Case("keep-alive-reuse", ([ok(b"one")], [ok(b"two")]), requests=2),
    Case("connection-close-then-new-connection",
         [ok(b"bye", b"Connection: close"), CLOSE], requests=2),
    Case("refused", [], refused=True),
    # -- TLS and proxies -------------------------------------------------------------
    Case("tls-private-ca", [ok(b"over tls")], tls="trusted", requests=2),
    Case("tls-untrusted-certificate", [ok()], tls="untrusted"),
    # The plain server waits for a request head that never comes: both clients end
    # at their handshake timeout, so a short one shows the same.
    Case("tls-to-a-plain-port", [ok()], plain_to_tls=True, connect_timeout=0.5),
    Case("proxy-connect-tls", [ok(b"tunnelled")], tls="trusted", proxy=True),
    Case("proxy-absolute-form", [ok(b"forwarded")], proxy=True),
]

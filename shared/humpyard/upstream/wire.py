"""Request heads on the wire: the request line and headers, built once and reused.

``head_prefix`` builds everything but the length (cached per provider and path
by ``upstream/client.py``); ``finish_head`` adds ``Content-Length`` and the
empty line per request. A CR or LF inside a header or the target is refused
(``HeaderInjection``), so no value can smuggle a second header or request.
"""

from __future__ import annotations

from humpyard.upstream.errors import UnsupportedURL


class HeaderInjection(UnsupportedURL):
    """A header name or value, or the target, carried a CR or LF."""


def head_prefix(method: str, target: bytes, host: bytes,
                headers: list[tuple[bytes, bytes]]) -> bytes:
    """The request line and headers, each ending in CRLF, without Content-Length and
    the closing empty line (``finish_head`` adds them)."""
    lines = [b"%s %s HTTP/1.1" % (method.encode("ascii"), target)]
    if not any(k.lower() == b"host" for k, _ in headers):
        lines.append(b"Host: " + host)
    lines += [b"%s: %s" % (k, v) for k, v in headers
              if k.lower() not in (b"content-length", b"transfer-encoding")]
    prefix = b"".join(line + b"\r\n" for line in lines)
    if prefix.count(b"\n") != len(lines) or prefix.count(b"\r") != len(lines):
        raise HeaderInjection("CR or LF in a request header")
    return prefix


def finish_head(prefix: bytes, method: str, body: bytes) -> bytes:
    """``prefix`` with Content-Length (when there is a body or the method takes one)."""
    if body or method in ("POST", "PUT", "PATCH"):
        return prefix + b"Content-Length: %d\r\n\r\n" % len(body)
    return prefix + b"\r\n"


def host_header(host: str, port: int | None) -> str:
    """``host[:port]`` for the Host header (IPv6 literals in brackets)."""
    h = f"[{host}]" if ":" in host else host
    return h if port is None else f"{h}:{port}"

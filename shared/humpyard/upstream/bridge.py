"""httpx at the edges: its transport API over ``FastTransport``, and calls over any
httpx transport.

The request path never imports httpx (``upstream/client.py`` speaks to
``FastTransport`` directly). Two things still want httpx: the side traffic that
uses an ``httpx.AsyncClient`` (readiness probes, quota polls), which goes over the
gateway's own connection pool through ``HttpxBridge``; and tests that inject an
``httpx.MockTransport`` as the gateway's transport, whose chat calls go through
``open_via_httpx``. Failures map both ways: ``TransportFailure`` kinds to httpx's
exception classes here, httpx's back to kinds in ``as_failure``.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import AsyncIterator
from http.cookiejar import CookieJar
from typing import Any
from urllib.parse import urlsplit

import httpx

from humpyard.config.spec import ProviderSpec
from humpyard.upstream.transport import FastTransport, Timeouts
from humpyard.upstream.wire import Body, TransportFailure, finish_head, head_prefix

_HTTPX_ERRORS: dict[str, type[httpx.TransportError]] = {
    "connect_refused": httpx.ConnectError,
    "dns": httpx.ConnectError,
    "connect_error": httpx.ConnectError,
    "connect_timeout": httpx.ConnectTimeout,
    "read_timeout": httpx.ReadTimeout,
    "write_timeout": httpx.WriteTimeout,
    "pool_timeout": httpx.PoolTimeout,
    "reset": httpx.ReadError,
    "protocol": httpx.RemoteProtocolError,
}


def as_httpx(tf: TransportFailure, request: httpx.Request) -> httpx.TransportError:
    """``tf`` as the httpx exception of its kind (raised ``from tf``: the cause chain
    keeps the failure and, under it, the socket's own error)."""
    return _HTTPX_ERRORS[tf.kind](tf.message, request=request)


class _Stream(httpx.AsyncByteStream):
    def __init__(self, body: Body, request: httpx.Request):
        self._body, self._request = body, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._body:
                yield chunk
        except TransportFailure as tf:
            raise as_httpx(tf, self._request) from tf

    async def aclose(self) -> None:
        await self._body.aclose()


class HttpxBridge(httpx.AsyncBaseTransport):
    """httpx's transport API over a ``FastTransport`` (which keeps owning the pool)."""

    def __init__(self, fast: FastTransport):
        self.fast = fast

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {url.scheme!r}",
                                            request=request)
        origin = (url.scheme, url.raw_host.decode("ascii"),
                  url.port or (443 if url.scheme == "https" else 80))
        t: dict[str, Any] = request.extensions.get("timeout") or {}
        timeouts = Timeouts(t.get("connect"), t.get("read"), t.get("write"), t.get("pool"))
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        raw = request.headers.raw
        close = any(k.lower() == b"connection" and v.lower() == b"close" for k, v in raw)
        try:
            head = finish_head(head_prefix(request.method, url.raw_path, url.netloc, raw),
                               request.method, body)
            ans = await self.fast.request(origin, head, body, timeouts,
                                          head_only=request.method == "HEAD", close=close)
        except TransportFailure as tf:
            if tf.message.startswith("CR or LF"):
                raise httpx.LocalProtocolError(tf.message, request=request) from None
            raise as_httpx(tf, request) from tf
        return httpx.Response(ans.status, headers=ans.headers,
                              stream=_Stream(ans.body, request),
                              extensions={"http_version": b"HTTP/1.1",
                                          "reason_phrase": ans.reason})

    async def aclose(self) -> None:
        await self.fast.aclose()


def http_client(transport: httpx.AsyncBaseTransport | FastTransport) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over the gateway's transport (no cookies, no proxies
    from the environment)."""
    if isinstance(transport, FastTransport):
        transport = HttpxBridge(transport)
    return httpx.AsyncClient(transport=transport, trust_env=False, cookies=_NoCookies())


class _NoCookies(CookieJar):
    """Upstream APIs take no cookies: none kept, none sent, none parsed."""

    def extract_cookies(self, response: object, request: object) -> None:  # type: ignore[override]
        return None

    def add_cookie_header(self, request: object) -> None:  # type: ignore[override]
        return None


class _HttpxBody:
    """An httpx response's body with ``Body``'s interface (and ``TransportFailure``s)."""

    def __init__(self, resp: httpx.Response):
        self._resp = resp
        self._it: AsyncIterator[bytes] | None = None

    def __aiter__(self) -> _HttpxBody:
        return self

    async def __anext__(self) -> bytes:
        if self._it is None:  # (a MockTransport's answer with content is read already)
            self._it = self._resp.aiter_bytes()
        try:
            return await self._it.__anext__()
        except httpx.HTTPError as e:
            raise as_failure(e, self._resp.request.url) from None

    async def aclose(self) -> None:
        await self._resp.aclose()


async def open_via_httpx(http: httpx.AsyncClient, provider: ProviderSpec, path: str,
                         body: bytes, headers: dict[str, str]
                         ) -> tuple[int, dict[str, str], _HttpxBody]:
    """``UpstreamClient.open`` over an injected httpx transport (tests' MockTransport)."""
    url = provider.base_url + path
    timeout = httpx.Timeout(provider.timeout_secs, connect=provider.connect_timeout_secs)
    req = http.build_request("POST", url, content=body, headers=headers, timeout=timeout)
    try:
        resp = await http.send(req, stream=True)
    except httpx.HTTPError as e:
        raise as_failure(e, url) from None
    return resp.status_code, dict(resp.headers), _HttpxBody(resp)


def _address(url: httpx.URL | str) -> str:
    parts = urlsplit(str(url))
    host = parts.hostname or "?"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{host}:{port}"


def _root_cause(e: BaseException) -> BaseException:
    seen = 0
    while (e.__cause__ or e.__context__) is not None and seen < 10:
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
        seen += 1
    return e


def as_failure(e: httpx.HTTPError, url: httpx.URL | str) -> TransportFailure:
    """An httpx failure as a ``TransportFailure`` naming its kind and address."""
    addr = _address(url)
    root = _root_cause(e)
    if isinstance(e, httpx.ConnectTimeout):
        return TransportFailure("connect_timeout", f"connect timeout {addr}")
    if isinstance(e, httpx.ReadTimeout):
        return TransportFailure("read_timeout", f"read timeout {addr}")
    if isinstance(e, httpx.WriteTimeout):
        return TransportFailure("write_timeout", f"write timeout {addr}")
    if isinstance(e, httpx.PoolTimeout):
        return TransportFailure("pool_timeout", f"connection pool timeout {addr}")
    if isinstance(e, httpx.ConnectError):
        if isinstance(root, socket.gaierror) or "name or service" in str(e).lower() \
                or "nodename" in str(e).lower() or "name resolution" in str(e).lower():
            host = urlsplit(str(url)).hostname or addr
            return TransportFailure("dns", f"dns lookup failed {host}")
        if isinstance(root, ConnectionRefusedError) or getattr(root, "errno", None) == \
                errno.ECONNREFUSED or "refused" in str(e).lower():
            return TransportFailure("connect_refused", f"connect refused {addr}")
        return TransportFailure("connect_error", f"connect failed {addr}: {type(root).__name__}")
    if isinstance(e, httpx.RemoteProtocolError):
        return TransportFailure("reset", f"connection closed by upstream {addr}")
    if isinstance(e, httpx.ReadError | httpx.WriteError):
        return TransportFailure("reset", f"connection reset {addr}")
    return TransportFailure("protocol", f"upstream protocol error {addr}: {type(e).__name__}")

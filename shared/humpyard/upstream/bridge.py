"""httpx at the edges: its transport API over ``FastTransport``, and calls over any
httpx transport.

The request path never imports httpx (``upstream/client.py`` speaks to
``FastTransport`` directly). Two things still want httpx: the side traffic that
uses an ``httpx.AsyncClient`` (readiness probes, quota polls), which goes over the
gateway's own connection pool through ``HttpxBridge`` (so it follows the same
proxy and TLS rules); and tests that inject an ``httpx.MockTransport`` as the
gateway's transport, whose chat calls go through ``open_via_httpx``. Failures
map both ways by class: ``TransportFailure`` classes to httpx's exception classes
here (``as_httpx``), httpx's back to ours in ``as_failure``.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator, Callable
from http.cookiejar import CookieJar
from typing import Any
from urllib.parse import urlsplit

import httpx

from humpyard.config.spec import ProviderSpec
from humpyard.upstream import errors as E
from humpyard.upstream.body import Body
from humpyard.upstream.dial import UNREACHABLE, Origin
from humpyard.upstream.transport import FastTransport, Timeouts
from humpyard.upstream.wire import HeaderInjection, finish_head, head_prefix, host_header

Router = Callable[[str, str, int], Origin]

_HTTPX_ERRORS: dict[type[E.TransportFailure], type[httpx.TransportError]] = {
    E.ConnectTimeout: httpx.ConnectTimeout,
    E.UnsupportedURL: httpx.UnsupportedProtocol,
    HeaderInjection: httpx.LocalProtocolError,
    E.ProxyFailure: httpx.ProxyError,
    E.ConnectFailure: httpx.ConnectError,
    E.SlotTimeout: httpx.PoolTimeout,
    E.ReadTimeout: httpx.ReadTimeout,
    E.WriteTimeout: httpx.WriteTimeout,
    E.ConnectionLost: httpx.ReadError,
    E.ProtocolViolation: httpx.RemoteProtocolError,
    E.DecodingFailure: httpx.ReadError,
    E.TransportFailure: httpx.TransportError,
}


def as_httpx(tf: E.TransportFailure, request: httpx.Request) -> httpx.TransportError:
    """``tf`` as the httpx exception of its class (the nearest mapped ancestor; raise it
    ``from tf``: the cause chain keeps the failure and, under it, the socket's error)."""
    for cls in type(tf).__mro__:
        mapped = _HTTPX_ERRORS.get(cls)  # type: ignore[call-overload]
        if mapped is not None:
            return mapped(tf.message, request=request)
    return httpx.TransportError(tf.message, request=request)  # not reached: the root maps


class _Stream(httpx.AsyncByteStream):
    def __init__(self, body: Body, request: httpx.Request):
        self._body, self._request = body, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._body:
                yield chunk
        except E.TransportFailure as tf:
            raise as_httpx(tf, self._request) from tf

    async def aclose(self) -> None:
        await self._body.aclose()


def _direct(scheme: str, host: str, port: int) -> Origin:
    return Origin(scheme, host, port)


class HttpxBridge(httpx.AsyncBaseTransport):
    """httpx's transport API over a ``FastTransport`` (which keeps owning the pool).

    ``route`` decides each call's ``Origin`` (proxy and TLS settings); by default
    every call goes direct with the default trust.
    """

    def __init__(self, fast: FastTransport, route: Router | None = None):
        self.fast = fast
        self.route = route or _direct

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {url.scheme!r}",
                                            request=request)
        host = url.raw_host.decode("ascii")
        t: dict[str, Any] = request.extensions.get("timeout") or {}
        timeouts = Timeouts(t.get("connect"), t.get("read"), t.get("write"))
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        raw = list(request.headers.raw)
        close = any(k.lower() == b"connection" and v.lower() == b"close" for k, v in raw)
        try:
            origin = self.route(url.scheme, host, url.port or (443 if url.scheme == "https"
                                                               else 80))
            target = url.raw_path
            if origin.absolute_form and origin.proxy is not None:
                target = b"http://" + host_header(host, url.port).encode("ascii") + target
                if origin.proxy.authorization is not None:
                    raw.append((b"Proxy-Authorization", origin.proxy.authorization))
            head = finish_head(head_prefix(request.method, target, url.netloc, raw),
                               request.method, body)
            ans = await self.fast.request(origin, head, body, timeouts,
                                          head_only=request.method == "HEAD", close=close)
        except E.TransportFailure as tf:
            raise as_httpx(tf, request) from tf
        return httpx.Response(ans.status, headers=ans.headers,
                              stream=_Stream(ans.body, request),
                              extensions={"http_version": b"HTTP/1.1",
                                          "reason_phrase": ans.reason})

    async def aclose(self) -> None:
        await self.fast.aclose()


def http_client(transport: httpx.AsyncBaseTransport | FastTransport,
                route: Router | None = None) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over the gateway's transport: no cookies; proxies and
    TLS settings are the bridge's (``route``), not httpx's own reading of the
    environment."""
    if isinstance(transport, FastTransport):
        transport = HttpxBridge(transport, route)
    return httpx.AsyncClient(transport=transport, trust_env=False, cookies=_NoCookies())


class _NoCookies(CookieJar):
    """Upstream APIs take no cookies: none kept, none sent, none parsed."""

    def extract_cookies(self, response: object, request: object) -> None:  # type: ignore[override]
        return None

    def add_cookie_header(self, request: object) -> None:  # type: ignore[override]
        return None


class _HttpxBody:
    """An httpx response's body with ``Body``'s interface (and ``TransportFailure``s)."""

    def __init__(self, resp: httpx.Response, on_end: Callable[[], Any] | None = None):
        self._resp = resp
        self._it: AsyncIterator[bytes] | None = None
        self._on_end = on_end

    def __aiter__(self) -> _HttpxBody:
        return self

    async def __anext__(self) -> bytes:
        if self._it is None:  # (a MockTransport's answer with content is read already)
            self._it = self._resp.aiter_bytes()
        try:
            return await self._it.__anext__()
        except StopAsyncIteration:
            self._end()
            raise
        except httpx.HTTPError as e:
            self._end()
            raise as_failure(e, self._resp.request.url) from None

    def _end(self) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end()

    async def aclose(self) -> None:
        self._end()
        await self._resp.aclose()


async def open_via_httpx(http: httpx.AsyncClient, provider: ProviderSpec, path: str,
                         body: bytes, headers: dict[str, str],
                         on_end: Callable[[], Any] | None = None
                         ) -> tuple[int, dict[str, str], _HttpxBody]:
    """``UpstreamClient.open`` over an injected httpx transport (tests' MockTransport)."""
    url = provider.base_url + path
    timeout = httpx.Timeout(provider.timeout_secs, connect=provider.connect_timeout_secs)
    req = http.build_request("POST", url, content=body, headers=headers, timeout=timeout)
    try:
        resp = await http.send(req, stream=True)
    except httpx.HTTPError as e:
        raise as_failure(e, url) from None
    return resp.status_code, dict(resp.headers), _HttpxBody(resp, on_end)


def _address(url: httpx.URL | str) -> str:
    parts = urlsplit(str(url))
    host = parts.hostname or "?"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{host}:{port}"


def _causes(e: BaseException) -> list[BaseException]:
    out, seen = [], 0
    cur: BaseException | None = e
    while cur is not None and seen < 10:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return out


def as_failure(e: httpx.HTTPError, url: httpx.URL | str) -> E.TransportFailure:
    """An httpx failure as the ``TransportFailure`` of its class, by the classes of the
    exception and of its causes (never by its message)."""
    addr = _address(url)
    causes = _causes(e)
    ours = next((c for c in causes if isinstance(c, E.TransportFailure)), None)
    if ours is not None:  # our own transport under httpx (the bridge)
        return ours
    if isinstance(e, httpx.ConnectTimeout | httpx.PoolTimeout):
        return E.ConnectTimeout(f"connect timeout {addr}", addr)
    if isinstance(e, httpx.ReadTimeout):
        return E.ReadTimeout(f"read timeout {addr}", addr)
    if isinstance(e, httpx.WriteTimeout):
        return E.WriteTimeout(f"write timeout {addr}", addr)
    if isinstance(e, httpx.ProxyError):
        return E.ProxyFailure(f"proxy failure for {addr}", addr)
    if isinstance(e, httpx.ConnectError):
        return _connect_failure(causes, addr, urlsplit(str(url)).hostname or addr)
    if isinstance(e, httpx.UnsupportedProtocol):
        return E.UnsupportedURL(f"unsupported upstream URL {addr}", addr)
    if isinstance(e, httpx.DecodingError):
        return E.DecodingFailure(f"the upstream's body does not decode ({addr})", addr)
    if isinstance(e, httpx.RemoteProtocolError):
        return E.ConnectionLost(f"connection closed by upstream {addr}", addr)
    if isinstance(e, httpx.ReadError | httpx.WriteError | httpx.NetworkError):
        return E.ConnectionLost(f"connection reset {addr}", addr)
    return E.ProtocolViolation(f"upstream protocol error {addr}: {type(e).__name__}", addr)


def _connect_failure(causes: list[BaseException], addr: str, host: str) -> E.TransportFailure:
    for c in causes:
        if isinstance(c, socket.gaierror):
            return E.NameNotResolved(f"dns lookup failed {host}", addr)
        if isinstance(c, ssl.SSLCertVerificationError):
            why = c.verify_message or c.reason or "untrusted"
            return E.TLSVerifyFailed(f"TLS certificate verify failed for {addr}: {why}", addr)
        if isinstance(c, ssl.SSLError):
            return E.TLSFailure(f"TLS handshake failed for {addr}: {c.reason or 'error'}", addr)
        if isinstance(c, ConnectionRefusedError):
            return E.ConnectRefused(f"connect refused {addr}", addr)
        if isinstance(c, OSError) and c.errno in UNREACHABLE:
            return E.HostUnreachable(f"no route to {addr}", addr)
    return E.ConnectFailure(f"connect failed {addr}: {type(causes[-1]).__name__}", addr)

"""Calling an OpenAI-compatible upstream: one pooled httpx client, named failures.

``UpstreamClient.open()`` sends one request to one endpoint and returns an
``UpstreamResponse`` whose body has not been read yet (the executor decides
whether to buffer it or relay it as a stream); the caller must ``aclose()``
it. Transport failures become ``TransportFailure`` with a message that names
the cause and the address (``connect refused 127.0.0.1:9``) and whether the
request can have reached the wire (``never_delivered``).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http.cookiejar import CookieJar
from urllib.parse import urlsplit

import httpx

from humpyard.config.spec import ProviderSpec
from humpyard.upstream.transport import FastTransport


class TransportFailure(Exception):
    """No HTTP answer: ``kind`` is one of connect_refused, dns, connect_timeout,
    connect_error, read_timeout, write_timeout, pool_timeout, reset, protocol."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def never_delivered(self) -> bool:
        """True when no byte of the request can have reached the upstream."""
        return self.kind in ("connect_refused", "dns", "connect_timeout", "connect_error")


@dataclass(slots=True)
class UpstreamResponse:
    """An answered call whose body is still unread."""

    status: int
    headers: httpx.Headers
    _resp: httpx.Response

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body (or its first ``limit`` bytes, then closes)."""
        if limit is None:
            try:
                return await self._resp.aread()
            except httpx.HTTPError as e:
                raise _as_failure(e, self._resp.request.url) from None
        buf = bytearray()
        try:
            async for chunk in self._resp.aiter_raw():
                buf += chunk
                if len(buf) >= limit:
                    break
        except httpx.HTTPError as e:
            raise _as_failure(e, self._resp.request.url) from None
        return bytes(buf[:limit])

    async def iter_raw(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; transport errors become ``TransportFailure``."""
        try:
            async for chunk in self._resp.aiter_raw():
                yield chunk
        except httpx.HTTPError as e:
            raise _as_failure(e, self._resp.request.url) from None

    async def aclose(self) -> None:
        await self._resp.aclose()


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


def _as_failure(e: httpx.HTTPError, url: httpx.URL | str) -> TransportFailure:
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


class _NoCookies(CookieJar):
    """Upstream APIs take no cookies: skip httpx's per-response cookie parsing."""

    def extract_cookies(self, response: object, request: object) -> None:  # type: ignore[override]
        return None

    def add_cookie_header(self, request: object) -> None:  # type: ignore[override]
        return None


class UpstreamClient:
    """One pooled HTTP client for every provider; the transport is the test seam."""

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None,
                 max_connections: int = 512):
        if transport is None:  # asyncio streams, not httpcore: see upstream/transport.py
            transport = FastTransport(max_connections=max_connections)
        self.http = httpx.AsyncClient(transport=transport, trust_env=False,
                                      cookies=_NoCookies())

    async def open(self, provider: ProviderSpec, path: str, body: bytes, *,
                   extra_headers: dict[str, str] | None = None) -> UpstreamResponse:
        """POST ``body`` to ``provider.base_url + path``; the body is unread."""
        url = provider.base_url + path
        headers = {"content-type": "application/json", "accept": "application/json"}
        headers.update(provider.headers)
        if extra_headers:
            headers.update(extra_headers)
        if provider.api_key:
            headers["authorization"] = f"Bearer {provider.api_key}"
        timeout = httpx.Timeout(provider.timeout_secs, connect=provider.connect_timeout_secs)
        req = self.http.build_request("POST", url, content=body, headers=headers,
                                      timeout=timeout)
        try:
            resp = await self.http.send(req, stream=True)
        except httpx.HTTPError as e:
            raise _as_failure(e, url) from None
        return UpstreamResponse(status=resp.status_code, headers=resp.headers, _resp=resp)

    async def aclose(self) -> None:
        await self.http.aclose()

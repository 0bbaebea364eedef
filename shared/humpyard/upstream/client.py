"""Calling an OpenAI-compatible upstream: one pooled client, named failures.

``UpstreamClient.open()`` sends one request to one endpoint and returns an
``UpstreamResponse`` whose body has not been read yet (the executor decides
whether to buffer it or relay it as a stream); the caller must ``aclose()``
it. Transport failures are ``TransportFailure``s with a message that names
the cause and the address (``connect refused 127.0.0.1:9``) and whether the
request can have reached the wire (``never_delivered``).

The request path is ``FastTransport`` with a request head built once per
provider and path (the key, static headers and address do not change between
requests); httpx is imported only for side traffic (``http``: readiness probes,
quota polls) or when a test injects an httpx transport (``upstream/bridge.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlsplit

from humpyard import __version__
from humpyard.config.spec import ProviderSpec
from humpyard.upstream.transport import FastTransport, Timeouts
from humpyard.upstream.wire import Origin, TransportFailure, finish_head, head_prefix

if TYPE_CHECKING:
    import httpx

__all__ = ["TransportFailure", "UpstreamClient", "UpstreamResponse"]

MAX_CACHED_HEADS = 256
USER_AGENT = f"humpyard/{__version__}"


class _Body(Protocol):
    def __aiter__(self) -> AsyncIterator[bytes]: ...
    async def aclose(self) -> None: ...


class UpstreamResponse:
    """An answered call whose body is still unread."""

    __slots__ = ("status", "headers", "_body")

    def __init__(self, status: int, headers: Mapping[str, str], body: _Body):
        self.status = status
        self.headers = headers  # lower-case names
        self._body = body

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body (or its first ``limit`` bytes)."""
        chunks: list[bytes] = []
        n = 0
        async for chunk in self._body:
            chunks.append(chunk)
            n += len(chunk)
            if limit is not None and n >= limit:
                break
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return data if limit is None else data[:limit]

    def iter_raw(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; transport errors are ``TransportFailure``s."""
        return self._body.__aiter__()

    async def aclose(self) -> None:
        await self._body.aclose()


def _header_map(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in raw:
        name, value = k.decode("latin-1").lower(), v.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def _request_headers(provider: ProviderSpec, extra: dict[str, str] | None) -> dict[str, str]:
    # No accept-encoding: bodies are relayed as they come, never decompressed here.
    headers = {"content-type": "application/json", "accept": "application/json",
               "user-agent": USER_AGENT}
    headers.update(provider.headers)
    if extra:
        headers.update(extra)
    if provider.api_key:
        headers["authorization"] = f"Bearer {provider.api_key}"
    return headers


_Head = tuple[ProviderSpec, Origin, bytes, Timeouts]


class UpstreamClient:
    """One pooled client for every provider; the transport is the test seam.

    ``transport`` is a ``FastTransport`` (default) or any httpx transport (then
    every call goes through httpx: tests with ``httpx.MockTransport``).
    """

    def __init__(self, transport: FastTransport | httpx.AsyncBaseTransport | None = None,
                 max_connections: int = 512):
        if transport is None:
            transport = FastTransport(max_connections=max_connections)
        self._transport: Any = transport
        self.fast = transport if isinstance(transport, FastTransport) else None
        self._http: httpx.AsyncClient | None = None
        self._heads: dict[tuple[int, str], _Head] = {}

    @property
    def http(self) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` over the same transport (built on first use)."""
        if self._http is None:
            from humpyard.upstream.bridge import http_client
            self._http = http_client(self._transport)
        return self._http

    def _head(self, provider: ProviderSpec, path: str,
              extra_headers: dict[str, str] | None) -> _Head:
        key = (id(provider), path)
        got = self._heads.get(key)
        if got is not None and got[0] is provider and not extra_headers:
            return got
        parts = urlsplit(provider.base_url + path)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportFailure("protocol", f"unsupported upstream URL scheme "
                                   f"{parts.scheme!r} for provider {provider.name}")
        origin = (parts.scheme, parts.hostname,
                  parts.port or (443 if parts.scheme == "https" else 80))
        target = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
        if parts.query:
            target += "?" + parts.query
        headers = _request_headers(provider, extra_headers)
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        netloc = parts.netloc.rpartition("@")[2]
        try:
            host = netloc.encode("ascii")
        except UnicodeEncodeError:  # an internationalised name: its ASCII form
            host = parts.hostname.encode("idna") + (b":%d" % parts.port if parts.port else b"")
        prefix = head_prefix("POST", target.encode("ascii"), host, raw)
        timeouts = Timeouts(provider.connect_timeout_secs, provider.timeout_secs,
                            provider.timeout_secs, provider.timeout_secs)
        head = (provider, origin, prefix, timeouts)
        if not extra_headers:
            if len(self._heads) >= MAX_CACHED_HEADS:  # providers replaced by reloads
                self._heads.clear()
            self._heads[key] = head
        return head

    async def open(self, provider: ProviderSpec, path: str, body: bytes, *,
                   extra_headers: dict[str, str] | None = None,
                   connect_timeout: float | None = None) -> UpstreamResponse:
        """POST ``body`` to ``provider.base_url + path``; the body is unread.

        ``connect_timeout`` (seconds) replaces the provider's
        ``connect_timeout_secs`` for this call when shorter (the re-send
        window's last dial, ``upstream/resend.py``).
        """
        cut = connect_timeout if connect_timeout is not None and \
            connect_timeout < provider.connect_timeout_secs else None
        fast = self.fast
        if fast is None:
            if cut is not None:
                provider = replace(provider, connect_timeout_secs=cut)
            return await self._open_via_httpx(provider, path, body, extra_headers)
        _, origin, prefix, timeouts = self._head(provider, path, extra_headers)
        if cut is not None:
            timeouts = timeouts._replace(connect=cut)
        ans = await fast.request(origin, finish_head(prefix, "POST", body), body, timeouts)
        return UpstreamResponse(ans.status, _header_map(ans.headers), ans.body)

    async def _open_via_httpx(self, provider: ProviderSpec, path: str, body: bytes,
                              extra_headers: dict[str, str] | None) -> UpstreamResponse:
        from humpyard.upstream.bridge import open_via_httpx
        status, got, resp_body = await open_via_httpx(
            self.http, provider, path, body, _request_headers(provider, extra_headers))
        return UpstreamResponse(status, got, resp_body)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()  # and the transport under it
        else:
            await self._transport.aclose()

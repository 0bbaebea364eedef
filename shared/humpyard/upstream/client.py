"""Calling an upstream: one pooled client, failures as types.

``UpstreamClient.open()`` sends one request to one endpoint and returns an
``UpstreamResponse`` (``upstream/response.py``) whose body has not been read yet
(the executor decides whether to buffer it or relay it as a stream); the caller
must ``aclose()`` it. The body comes decoded (gzip, deflate: ``upstream/encoding.py``). A call
holds a concurrency slot (``upstream/limits.py``) until its body is done.
Failures are ``TransportFailure``s (``upstream/errors.py``) whose class says
what happened and whose message names the cause and the address
(``connect refused 127.0.0.1:9``).

The request path is ``FastTransport`` with a request head built once per
provider and path (the key, static headers, address, proxy and TLS settings do
not change between requests); httpx is imported only for side traffic
(``http``: readiness probes, quota polls) or when a test injects an httpx
transport (``upstream/bridge.py``). Proxies and TLS trust follow the provider's
settings and the environment (``upstream/proxies.py``, ``upstream/tls.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from humpyard import __version__
from humpyard.config.spec import Config, ProviderSpec
from humpyard.protocols.anthropic_upstream import ANTHROPIC_VERSION
from humpyard.upstream.dial import Origin
from humpyard.upstream.encoding import decoder_for
from humpyard.upstream.errors import (
    FirstByteTimeout,
    IdleTimeout,
    ReadTimeout,
    TransportFailure,
    UnsupportedURL,
)
from humpyard.upstream.limits import Slots
from humpyard.upstream.proxies import ProxyRules, ProxyURLError, choose
from humpyard.upstream.response import DecodedBody, UpstreamResponse
from humpyard.upstream.tls import TLSOptions
from humpyard.upstream.transport import FastTransport, Timeouts
from humpyard.upstream.wire import HeaderInjection, finish_head, head_prefix, host_header

if TYPE_CHECKING:
    import httpx

    from humpyard.upstream.aws_sign import AwsSigner

__all__ = ["TransportFailure", "UpstreamClient"]

MAX_CACHED_HEADS = 256
USER_AGENT = f"humpyard/{__version__}"
ACCEPT_ENCODING = "identity"
"""What the gateway asks upstreams for; docs/upstream.md says why (a provider's
static ``headers`` may ask otherwise, and whatever comes is decoded)."""


def _header_map(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in raw:
        name, value = k.decode("latin-1").lower(), v.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def _request_headers(provider: ProviderSpec, extra: dict[str, str] | None) -> dict[str, str]:
    """The head of a call: ours, the provider's static headers, ``extra``, then the
    key as the provider's protocol wants it (``x-api-key`` for Anthropic, else
    ``Authorization: Bearer``; never both)."""
    headers = {"content-type": "application/json", "accept": "application/json",
               "accept-encoding": ACCEPT_ENCODING, "user-agent": USER_AGENT}
    anthropic = provider.protocol == "anthropic"
    if anthropic:
        headers["anthropic-version"] = ANTHROPIC_VERSION
    headers.update((k.lower(), v) for k, v in provider.headers)
    if extra:
        headers.update(extra)
    if provider.api_key:
        headers["x-api-key" if anthropic else "authorization"] = \
            provider.api_key if anthropic else f"Bearer {provider.api_key}"
    return headers


def ascii_host(hostname: str) -> str:
    """A URL's host as sent: lower-case ASCII, IDNA 2008 (UTS 46) for a non-ASCII name."""
    if hostname.isascii():
        return hostname.lower()
    import idna  # only internationalised names need it

    try:
        return idna.encode(hostname, uts46=True).decode("ascii")
    except idna.IDNAError as e:
        raise UnsupportedURL(f"host name {hostname!r} is not a valid internationalised "
                             f"name: {e}") from None


def call_timeouts(provider: ProviderSpec) -> tuple[Timeouts, Timeouts]:
    """A provider's timeouts for a buffered call and for a streamed one.

    A limit shorter than ``timeout_secs`` fails as its own class (``FirstByteTimeout``,
    ``IdleTimeout``); otherwise the wait is ``timeout_secs``'s (``ReadTimeout``)."""
    total, lim = provider.timeout_secs, provider.limits
    idle, idle_failure = (lim.idle_timeout_secs, IdleTimeout) \
        if lim.idle_timeout_secs < total else (total, ReadTimeout)
    buffered = Timeouts(provider.connect_timeout_secs, total, total, idle, ReadTimeout,
                        idle_failure)
    if lim.first_byte_timeout_secs < total:
        return buffered, buffered._replace(read=lim.first_byte_timeout_secs,
                                           head_failure=FirstByteTimeout)
    return buffered, buffered


_Head = tuple[ProviderSpec, Origin, bytes, tuple[Timeouts, Timeouts]]


class UpstreamClient:
    """One pooled client for every provider; the transport is the test seam.

    ``transport`` is a ``FastTransport`` (default) or any httpx transport (then
    every call goes through httpx: tests with ``httpx.MockTransport``).
    ``metrics`` (a ``GatewayMetrics``) gets the concurrency gauges; ``env`` is
    where proxy and TLS variables are read (default: the process environment).
    ``configure(config)`` applies a configuration's limits and providers.
    """

    def __init__(self, transport: FastTransport | httpx.AsyncBaseTransport | None = None,
                 *, metrics: Any = None, env: Mapping[str, str] | None = None):
        self._env = os.environ if env is None else env
        if transport is None:
            transport = FastTransport(env=self._env)
        self._transport: Any = transport
        self.fast = transport if isinstance(transport, FastTransport) else None
        self.proxies = ProxyRules(self._env)
        self.slots = Slots(metrics=metrics)
        self._http: httpx.AsyncClient | None = None
        self._heads: dict[tuple[Any, ...], _Head] = {}
        self._providers: dict[tuple[str, str, int], ProviderSpec] = {}
        self.aws: AwsSigner | None = None  # Bedrock's signer, made on first use

    def configure(self, config: Config) -> None:
        """Use ``config``'s concurrency limits, and its providers' proxy and TLS
        settings for side traffic (probes, quota polls) to their hosts."""
        self.slots.configure(config.router.max_concurrent, config.router.slot_wait_secs)
        table: dict[tuple[str, str, int], ProviderSpec] = {}
        for p in config.providers.values():
            parts = urlsplit(p.base_url)
            if parts.hostname:
                try:
                    key = (parts.scheme, ascii_host(parts.hostname),
                           parts.port or (443 if parts.scheme == "https" else 80))
                except UnsupportedURL:
                    continue
                table.setdefault(key, p)
        self._providers = table

    @property
    def http(self) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` over the same transport (built on first use)."""
        if self._http is None:
            from humpyard.upstream.bridge import http_client
            self._http = http_client(self._transport, self.origin_for)
        return self._http

    def origin_for(self, scheme: str, host: str, port: int,
                   provider: ProviderSpec | None = None) -> Origin:
        """Where a call to ``scheme://host:port`` goes: proxy and TLS settings applied
        (the provider's, else those of the configured provider with that address)."""
        if provider is None:
            provider = self._providers.get((scheme, host, port))
        setting = provider.proxy if provider is not None else None
        try:
            proxy = choose(setting, self.proxies, scheme, host)
        except ProxyURLError as e:
            raise UnsupportedURL(str(e)) from None
        tls = None
        if provider is not None and scheme == "https" and (
                provider.ca_file or provider.client_cert):
            tls = TLSOptions(provider.ca_file, provider.client_cert, provider.client_key)
        return Origin(scheme, host, port, proxy, tls)

    def _head(self, provider: ProviderSpec, path: str,
              extra_headers: dict[str, str] | None) -> _Head:
        # Per-request headers (an Anthropic client's version and betas) take a few
        # values, so their heads are cached too, keyed by them.
        key: tuple[Any, ...] = (id(provider), path) if not extra_headers else \
            (id(provider), path, *extra_headers.items())
        got = self._heads.get(key)
        if got is not None and got[0] is provider:
            return got
        parts = urlsplit(provider.base_url + path)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UnsupportedURL(f"unsupported upstream URL scheme {parts.scheme!r} for "
                                 f"provider {provider.name}")
        host = ascii_host(parts.hostname)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        origin = self.origin_for(parts.scheme, host, port, provider)
        target = quote(parts.path or "/", safe="/%:@!$&'()*+,;=-._~")
        if parts.query:
            target += "?" + parts.query
        headers = _request_headers(provider, extra_headers)
        hosthdr = host_header(host, parts.port)
        if origin.absolute_form and origin.proxy is not None:
            target = f"http://{hosthdr}{target}"
            if origin.proxy.authorization is not None:
                headers["proxy-authorization"] = origin.proxy.authorization.decode("ascii")
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        prefix = head_prefix("POST", target.encode("ascii"), hosthdr.encode("ascii"), raw)
        head = (provider, origin, prefix, call_timeouts(provider))
        if len(self._heads) >= MAX_CACHED_HEADS:  # providers replaced by reloads
            self._heads.clear()
        self._heads[key] = head
        return head

    async def open(self, provider: ProviderSpec, path: str, body: bytes, *,
                   extra_headers: dict[str, str] | None = None,
                   connect_timeout: float | None = None,
                   stream: bool = False) -> UpstreamResponse:
        """POST ``body`` to ``provider.base_url + path``; the body is unread.

        ``stream``: an event stream was asked for, so its head is awaited at most
        ``first_byte_timeout_secs`` (a buffered answer's head comes with the whole
        answer: only ``timeout_secs`` bounds it).

        Waits for a concurrency slot first (``SlotTimeout`` when none frees in time).
        ``connect_timeout`` (seconds) replaces the provider's ``connect_timeout_secs``
        for this call when shorter (the re-send window's last dial, ``upstream/resend.py``).
        """
        cut = connect_timeout if connect_timeout is not None and \
            connect_timeout < provider.connect_timeout_secs else None
        fast = self.fast
        if fast is None:
            if cut is not None:
                provider = replace(provider, connect_timeout_secs=cut)
            return await self._open_via_httpx(provider, path, body, extra_headers)
        _, origin, prefix, timings = self._head(provider, path, extra_headers)
        timeouts = timings[stream]
        if cut is not None:
            timeouts = timeouts._replace(connect=cut)
        release = await self.slots.acquire(provider.name, provider.max_concurrent)
        if provider.protocol == "bedrock":  # signed once the slot is had: a wait for it
            try:  # (up to slot_wait_secs) would otherwise age the signature past AWS's 5 min
                prefix += await self._signature(provider, path, body, extra_headers)
            except BaseException:
                release()
                raise
        ans = await fast.request(origin, finish_head(prefix, "POST", body), body, timeouts,
                                 on_end=release)
        headers = _header_map(ans.headers)
        coding = headers.get("content-encoding")
        if coding is not None:
            decoder = decoder_for(coding)
            if decoder is not None:
                return UpstreamResponse(ans.status, headers, DecodedBody(
                    ans.body, decoder, f"{coding} from {origin.address}",
                    provider.limits.max_decompression_ratio, origin.address), origin.address)
        return UpstreamResponse(ans.status, headers, ans.body, origin.address)

    def secrets_for(self, provider: ProviderSpec) -> tuple[str | None, ...]:
        """What an answer of ``provider`` must never be passed on with: its key and, for
        Bedrock, the secret parts of the AWS credentials its calls were signed with."""
        if provider.protocol == "bedrock" and self.aws is not None:
            return (provider.api_key, *self.aws.used)
        return (provider.api_key,)

    def _signer(self) -> AwsSigner:
        if self.aws is None:
            from humpyard.upstream.aws_sign import AwsSigner
            self.aws = AwsSigner()
        return self.aws

    async def _signed(self, provider: ProviderSpec, path: str, body: bytes,
                      extra: dict[str, str] | None) -> list[tuple[str, str]]:
        """A Bedrock call's SigV4 headers (``upstream/aws_sign.py``): the host and the
        content type are signed with the body; the rest of the head goes unsigned."""
        parts = urlsplit(provider.base_url + path)
        host = host_header(ascii_host(parts.hostname or ""), parts.port)
        ctype = (extra or {}).get("content-type", "application/json")
        return await self._signer().sign(provider.region or "", provider.base_url + path,
                                         host, body, {"content-type": ctype})

    async def _signature(self, provider: ProviderSpec, path: str, body: bytes,
                         extra: dict[str, str] | None) -> bytes:
        lines = [f"{k}: {v}\r\n".encode("latin-1")
                 for k, v in await self._signed(provider, path, body, extra)]
        out = b"".join(lines)
        if out.count(b"\n") != len(lines) or out.count(b"\r") != len(lines):
            raise HeaderInjection("CR or LF in a signature header")
        return out

    async def _open_via_httpx(self, provider: ProviderSpec, path: str, body: bytes,
                              extra_headers: dict[str, str] | None) -> UpstreamResponse:
        from humpyard.upstream.bridge import open_via_httpx
        release = await self.slots.acquire(provider.name, provider.max_concurrent)
        try:
            if provider.protocol == "bedrock":  # signed once the slot is had (as above)
                extra_headers = {**(extra_headers or {}),
                                 **dict(await self._signed(provider, path, body, extra_headers))}
            status, got, resp_body = await open_via_httpx(
                self.http, provider, path, body, _request_headers(provider, extra_headers),
                on_end=release)
        except BaseException:
            release()
            raise
        return UpstreamResponse(status, got, resp_body)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()  # and the transport under it
        else:
            await self._transport.aclose()

"""An upstream's answer: its status and headers, and a body not read yet.

``UpstreamResponse`` is what ``UpstreamClient.open()`` (``upstream/client.py``)
returns, over either transport's body. ``read()`` buffers the body under a size
limit, ``iter_raw()`` relays it as it arrives, and ``aclose()`` is owed either way.
A body sent with a content coding comes wrapped in ``DecodedBody``, which undoes it
a bounded step at a time (``upstream/encoding.py``) and refuses one that inflates
too far. The executor reads answers through this module; how a call is made
stays in ``upstream/client.py``.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from humpyard.upstream.encoding import STEP, Decoder
from humpyard.upstream.errors import BodyTooLarge, DecodingFailure, DecompressionBomb

__all__ = ["RATIO_FLOOR", "UpstreamResponse"]


class _Body(Protocol):
    def __aiter__(self) -> AsyncIterator[bytes]: ...
    async def aclose(self) -> None: ...


class UpstreamResponse:
    """An answered call whose body is still unread (and will be decoded).

    ``address`` (host:port) names the upstream in a limit's failure."""

    __slots__ = ("status", "headers", "_body", "address")

    def __init__(self, status: int, headers: Mapping[str, str], body: _Body,
                 address: str = ""):
        self.status = status
        self.headers = headers  # lower-case names, as the upstream sent them
        self._body = body
        self.address = address

    async def read(self, limit: int | None = None, *, max_bytes: int | None = None) -> bytes:
        """The whole decoded body (or its first ``limit`` bytes).

        ``max_bytes``: a body longer than that (after decoding) is a ``BodyTooLarge``,
        raised as soon as it is known (a ``Content-Length`` over it: before reading)."""
        if max_bytes is not None and "content-encoding" not in self.headers:
            declared = self.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise self._too_large(max_bytes)
        chunks: list[bytes] = []
        n = 0
        async for chunk in self._body:
            chunks.append(chunk)
            n += len(chunk)
            if limit is not None and n >= limit:
                break
            if max_bytes is not None and n > max_bytes:
                chunks.clear()
                raise self._too_large(max_bytes)
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return data if limit is None else data[:limit]

    def _too_large(self, max_bytes: int) -> BodyTooLarge:
        return BodyTooLarge(f"the upstream's answer is over max_response_bytes={max_bytes} "
                            f"{self.address}", self.address)

    def iter_raw(self) -> AsyncIterator[bytes]:
        """Decoded body chunks as they arrive; failures are ``TransportFailure``s."""
        return self._body.__aiter__()

    async def aclose(self) -> None:
        await self._body.aclose()


RATIO_FLOOR = 1 << 18
"""Decoded bytes before the ratio guard looks: a small body may inflate any amount."""


class DecodedBody:
    """A body with its content coding undone, a bounded step at a time.

    Nothing is inflated ahead of the reader (``upstream/encoding.py``); past
    ``RATIO_FLOOR`` decoded bytes, a body that has inflated more than
    ``max_ratio`` times the compressed bytes it took is a ``DecompressionBomb``.
    A step decoded from input already in hand lets the event loop run first, so
    a small body that inflates far is never one long stretch of the loop's time."""

    __slots__ = ("_body", "_it", "_decoder", "_what", "_ended", "_max_ratio", "_address",
                 "_owed")

    def __init__(self, body: _Body, decoder: Decoder, what: str, max_ratio: float,
                 address: str):
        self._body, self._decoder, self._what = body, decoder, what
        self._max_ratio, self._address = max_ratio, address
        self._it = body.__aiter__()
        self._ended = False
        self._owed = False  # the last step came without waiting: yield before the next

    def __aiter__(self) -> DecodedBody:
        return self

    async def __anext__(self) -> bytes:
        d = self._decoder
        if self._owed:
            self._owed = False
            await asyncio.sleep(0)
        while True:
            out = self._pull(d)
            if out:
                self._owed = len(out) == STEP  # more may be in hand: not all of it now
                return out
            if self._ended:
                raise StopAsyncIteration
            try:
                chunk = await self._it.__anext__()
            except StopAsyncIteration:
                self._ended = True
                d.finish()
                continue
            d.push(chunk)

    def _pull(self, d: Decoder) -> bytes:
        try:
            out = d.pull()
        except zlib.error as e:
            self._ended = True
            raise DecodingFailure(f"the upstream's body does not decode ({self._what}): "
                                  f"{e}") from None
        if d.produced > RATIO_FLOOR and d.produced > self._max_ratio * max(d.consumed, 1):
            self._ended = True
            raise DecompressionBomb(
                f"the upstream's body inflates over max_decompression_ratio="
                f"{self._max_ratio:g} ({self._what}: {d.consumed} bytes gave "
                f"{d.produced})", self._address)
        return out

    async def aclose(self) -> None:
        await self._body.aclose()

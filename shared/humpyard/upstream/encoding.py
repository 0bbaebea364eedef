"""Content codings: gzip and deflate bodies decoded as they arrive.

``decoder_for(header)`` returns None for an identity body (no work at all), or
a ``Decoder`` whose ``decode(data)`` returns what ``data`` decodes to so far,
and ``flush()`` the rest. Codings apply in the order listed, so they are undone
in reverse (``Content-Encoding: gzip, deflate``). Like httpx, a coding the
gateway does not know (br, zstd) is left undone. A deflate body is
taken as zlib-wrapped, or raw when it is not (servers send both). Output per
call is bounded (``MAX_OUT``) so a small compressed body cannot blow up memory
in one step; a body that does not decode raises ``zlib.error``.
"""

from __future__ import annotations

import zlib

MAX_OUT = 1 << 20  # bytes of output per ``decode`` step per coding


class _Zlib:
    __slots__ = ("_d", "_raw_fallback", "_seen")

    def __init__(self, gzip: bool):
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS)
        self._raw_fallback = not gzip
        self._seen = False

    def decode(self, data: bytes) -> bytes:
        try:
            out = self._step(data)
        except zlib.error:
            if not self._raw_fallback or self._seen:
                raise
            self._raw_fallback = False  # deflate without the zlib wrapper
            self._d = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._step(data)
        self._seen = self._seen or bool(data)
        return out

    def _step(self, data: bytes) -> bytes:
        d = self._d
        parts = [d.decompress(data, MAX_OUT)]
        while d.unconsumed_tail:
            parts.append(d.decompress(d.unconsumed_tail, MAX_OUT))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def flush(self) -> bytes:
        return self._d.flush()


class Decoder:
    """Undo a chain of content codings, incrementally."""

    __slots__ = ("_steps",)

    def __init__(self, steps: list[_Zlib]):
        self._steps = steps

    def decode(self, data: bytes) -> bytes:
        for step in self._steps:
            data = step.decode(data)
        return data

    def flush_all(self, _: bytes = b"") -> bytes:
        """What is left once the body has ended."""
        data = b""
        for step in self._steps:
            data = step.decode(data) + step.flush() if data else step.flush()
        return data


def decoder_for(content_encoding: str | None) -> Decoder | None:
    """A decoder for a ``Content-Encoding`` value, or None when nothing is to undo."""
    if not content_encoding:
        return None
    steps: list[_Zlib] = []
    for coding in reversed(content_encoding.lower().split(",")):
        coding = coding.strip()
        if coding in ("gzip", "x-gzip"):
            steps.append(_Zlib(gzip=True))
        elif coding == "deflate":
            steps.append(_Zlib(gzip=False))
        # any other coding (br, zstd) is left as it is, as httpx does
    return Decoder(steps) if steps else None

"""Content codings: gzip and deflate bodies decoded as they arrive, a bounded step at a time.

``decoder_for(header)`` returns None for an identity body (no work at all), or
a ``Decoder``. ``push(data)`` hands it compressed bytes; ``pull()`` returns at
most ``STEP`` decoded bytes (b"" when it needs more input), keeping the input
it has not inflated yet; ``finish()`` says the body has ended. Nothing is ever
inflated ahead of the caller: a 1 MB body that inflates to 1 GiB costs what the
caller reads of it, and a caller that stops (a size limit, an error read of 64
KiB) stops the inflating. Codings apply in the order listed, so they are undone
in reverse (``Content-Encoding: gzip, deflate``). Like httpx, a coding the
gateway does not know (br, zstd) is left undone. A deflate body is taken as
zlib-wrapped, or raw when it is not (servers send both). A body that does not
decode raises ``zlib.error``. A gzip body of several members (RFC 1952) is
undone member by member, at most ``MAX_MEMBERS`` of them (``TooManyMembers``,
a ``zlib.error``); bytes after a member that are not one are dropped, as
urllib3 does. ``consumed`` and ``produced`` count compressed
bytes inflated and bytes out, for the ratio guard (``upstream/response.py``).
"""

from __future__ import annotations

import zlib

STEP = 1 << 16
"""The most one ``pull`` returns (and so the most inflated at once)."""
MAX_MEMBERS = 64
"""The most gzip members one body may have (a body of many empty ones would cost a
copy of what is left per member)."""


class TooManyMembers(zlib.error):
    """A gzip body of more than ``MAX_MEMBERS`` members."""


class _Zlib:
    __slots__ = ("_d", "_gzip", "_raw_fallback", "_seen", "_pending", "_first", "_later",
                 "_dead", "_members")

    def __init__(self, gzip: bool):
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS)
        self._gzip = gzip
        self._raw_fallback = not gzip
        self._seen = False  # output came (or input went in): no more falling back to raw
        self._pending = b""  # input not inflated yet
        self._first = b""  # a deflate body's first input, for the raw fallback
        self._later = False  # inflating a gzip member after the first
        self._dead = False  # what followed the last member was not one: dropped
        self._members = 1

    def push(self, data: bytes) -> None:
        if not data or self._dead:
            return
        if self._raw_fallback and not self._seen:
            if len(self._first) < STEP:
                self._first += data
            else:  # no output after 64 KiB: whatever this is, it is not raw deflate either
                self._raw_fallback, self._first = False, b""
        self._pending = self._pending + data if self._pending else data

    @property
    def pending(self) -> int:
        return len(self._pending) + (len(self._d.unused_data) if self._d.eof else 0)

    def pull(self, n: int) -> bytes:
        """At most ``n`` bytes of output from the input pushed so far."""
        while True:
            out = self._pull(n)
            if out or not (self._d.eof and self._gzip and self._d.unused_data):
                return out
            # a member ended with this input and gave nothing more: on to the next

    def _pull(self, n: int) -> bytes:
        if self._d.eof and self._gzip:
            self._next_member()
        if not self._pending:
            return b""
        try:
            out = self._d.decompress(self._pending, n)
        except zlib.error:
            if self._later and not self._seen:
                # After a whole member, something that is not one (zero padding, trailing
                # bytes): dropped, as urllib3 does; before, every later member was.
                self._dead, self._pending = True, b""
                return b""
            if not self._raw_fallback or self._seen:
                raise
            self._raw_fallback = False  # deflate without the zlib wrapper
            self._d = zlib.decompressobj(-zlib.MAX_WBITS)
            self._pending, self._first = self._first, b""
            out = self._d.decompress(self._pending, n)
        # At a stream's end what is left is in unused_data (unconsumed_tail may hold a
        # copy of it when max_length cut the call short).
        if self._d.eof:
            self._pending = b""
            self._dead = not self._gzip  # after a deflate stream: dropped, never held
        else:
            self._pending = self._d.unconsumed_tail
        if out and not self._seen:
            self._seen = True
            self._first = b""
        return out

    def _next_member(self) -> None:
        """A gzip body is a series of members (RFC 1952, 2.2), each undone in turn; at
        most ``MAX_MEMBERS`` (each new one copies the input left after the last)."""
        rest = self._d.unused_data + self._pending
        if not rest:
            return
        if self._members >= MAX_MEMBERS:
            raise TooManyMembers(f"more than {MAX_MEMBERS} gzip members")
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending, self._later, self._seen = rest, True, False
        self._members += 1

    def flush(self) -> bytes:
        """What is left once all input is in and inflated (the tail of a block)."""
        return self._d.flush() if not self._pending else b""


class Decoder:
    """Undo a chain of content codings, incrementally and in bounded steps."""

    __slots__ = ("_steps", "consumed", "produced", "_pushed", "_ended")

    def __init__(self, steps: list[_Zlib]):
        self._steps = steps
        self._pushed = 0
        self.consumed = 0  # compressed bytes inflated so far
        self.produced = 0  # decoded bytes returned so far
        self._ended = False

    def push(self, data: bytes) -> None:
        self._pushed += len(data)
        self._steps[0].push(data)

    def finish(self) -> None:
        """The body has ended: ``pull`` may now return what flushing gives."""
        self._ended = True

    def pull(self, n: int = STEP) -> bytes:
        """At most ``n`` decoded bytes; b"" when every pushed byte is decoded."""
        out = self._pull(len(self._steps) - 1, n)
        self.consumed = self._pushed - self._steps[0].pending
        self.produced += len(out)
        return out

    def _pull(self, i: int, n: int) -> bytes:
        step = self._steps[i]
        while True:
            out = step.pull(n)
            if out:
                return out
            if i > 0:
                more = self._pull(i - 1, STEP)
                if more:
                    step.push(more)
                    continue
            # At the end, what inflating cannot give before it (a few bytes, once).
            return step.flush() if self._ended else b""

    def decode(self, data: bytes) -> bytes:
        """All of ``data`` decoded at once (tests and small bodies only: unbounded)."""
        self.push(data)
        parts = []
        while out := self.pull():
            parts.append(out)
        return b"".join(parts)

    def flush_all(self, _: bytes = b"") -> bytes:
        """What is left once the body has ended (unbounded: see ``decode``)."""
        self.finish()
        return self.decode(b"")


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

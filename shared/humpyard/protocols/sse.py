"""Server-sent events: an incremental decoder (WHATWG rules) and an encoder.

The decoder takes bytes as they arrive (any split, including inside a line, a
multi-byte character or a CRLF pair) and returns complete events, following the
HTML standard's event-stream interpretation: one leading U+FEFF (BOM) is
skipped; lines end with CRLF, LF or CR, in any mix; a blank line dispatches the
event; a line starting with ``:`` is a comment; a line without ``:`` is a field
with an empty value; one space after the colon is dropped; ``data`` lines are
joined with ``\\n``; ``event`` names the type; ``id`` sets the last event id
(kept across events; ignored if it contains NUL); ``retry`` is kept when it is
all ASCII digits; unknown fields are ignored. A block with no ``data`` field
dispatches nothing (its ``event`` is dropped), and a block cut off by the end of
the stream is never dispatched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event. ``wire`` is its exact bytes as received (a leading BOM
    aside), for pass-through; ``id`` is the last event id when it was dispatched;
    ``retry`` the reconnection time it set, in ms, if it set one."""

    data: str
    event: str | None = None
    wire: bytes = b""
    id: str | None = None
    retry: int | None = None


class SSETooLarge(ValueError):
    """One event (or one line) of the stream is over the decoder's ``max_event_bytes``."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"an event-stream event of {size}+ bytes is over {limit}")
        self.size, self.limit = size, limit


class SSEDecoder:
    """Feed bytes, get events. Incomplete trailing data waits for the next feed.

    Linear in the bytes fed, however they are split: an unfinished line or event
    is kept as the pieces that arrived and joined once, when it completes.
    ``max_event_bytes`` (None: no limit) bounds one event's bytes, and so one
    line's: past it ``feed`` raises ``SSETooLarge``."""

    __slots__ = ("_block", "_block_len", "_line", "_data", "_event", "_retry", "_last_id",
                 "_started", "_skip_lf", "_max")

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self._block: list[bytes] = []  # the current block's bytes from earlier feeds
        self._block_len = 0
        self._line: list[bytes] = []  # the unfinished line's pieces (a tail of _block)
        self._data: list[str] = []
        self._event: str | None = None
        self._retry: int | None = None
        self._last_id: str | None = None
        self._started = False  # past the (optional) leading BOM
        self._skip_lf = False  # the last line ended in CR: a LF next belongs to it
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk``."""
        if (not self._block and not self._skip_lf and not self._data
                and self._event is None and self._retry is None
                and chunk[:5] == b"data:" and chunk[-2:] == b"\n\n" and b"\r" not in chunk
                and (self._max is None or len(chunk) <= self._max)):
            self._started = True  # nothing before it, and "data:" is not a BOM
            simple = self._simple(chunk)
            if simple is not None:
                return simple
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == 0x0A:  # the rest of a CRLF: part of the block's bytes, if
                chunk = chunk[1:]  # the block was not dispatched at the CR already
                if self._block:
                    self._block.append(b"\n")
                    self._block_len += 1
        if not self._started:
            buf = b"".join(self._block) + chunk if self._block else chunk
            if len(buf) < 3 and _BOM.startswith(buf):
                self._block, self._block_len = [buf], len(buf)
                return []
            self._started = True
            self._block, self._block_len = [], 0
            chunk = buf[3:] if buf.startswith(_BOM) else buf
        events: list[SSEEvent] = []
        start = 0  # the current block's start in chunk (its earlier bytes: _block)
        pos = 0  # the current line's start in chunk
        size = len(chunk)
        for m in _EOL.finditer(chunk):
            s, end = m.span()
            if self._line:
                self._line.append(chunk[pos:s])
                line = b"".join(self._line)
                self._line.clear()
            else:
                line = chunk[pos:s]
            if end == size and end - s == 1 and chunk[s] == 0x0D:
                self._skip_lf = True  # a CR at the very end: a LF may follow in the next feed
            pos = end
            if line:
                if self._max is not None and len(line) > self._max:
                    raise SSETooLarge(len(line), self._max)
                self._field(line)
                continue
            if self._block:
                self._block.append(chunk[start:end])
                wire = b"".join(self._block)
                self._block.clear()
                self._block_len = 0
            else:
                wire = chunk[start:end]
            if self._max is not None and len(wire) > self._max:
                raise SSETooLarge(len(wire), self._max)
            ev = self._dispatch(wire)
            if ev is not None:
                events.append(ev)
            start = end
        if start < size:
            self._block.append(chunk[start:] if start else chunk)
            self._block_len += size - start
            if pos < size:
                self._line.append(chunk[pos:] if pos else chunk)
            if self._max is not None and self._block_len > self._max:
                raise SSETooLarge(self._block_len, self._max)
        return events

    def _simple(self, chunk: bytes) -> list[SSEEvent] | None:
        """The common case at C speed: ``chunk`` is whole events of one ``data:`` line
        each (LF endings, what every provider sends), nothing pending before it. The
        same events as the general path, or None when ``chunk`` is anything else."""
        parts = chunk.split(b"\n\n")
        parts.pop()  # the empty tail after the last event
        if chunk.count(b"\n") != 2 * len(parts):
            return None  # a block of several lines, or a blank line too many
        last_id = self._last_id
        events: list[SSEEvent] = []
        for part in parts:
            if part[:5] != b"data:":
                return None
            value = part[6:] if part[5:6] == b" " else part[5:]
            events.append(SSEEvent(value.decode("utf-8", "replace"), None, part + b"\n\n",
                                   last_id, None))
        return events

    def _field(self, line: bytes) -> None:
        if line[0] == 0x3A:  # ":" a comment
            return
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\x00" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry":
            if value.isdigit():
                self._retry = int(value)

    def _dispatch(self, wire: bytes) -> SSEEvent | None:
        data, event, retry = self._data, self._event, self._retry
        self._data, self._event, self._retry = [], None, None
        if not data:
            return None
        return SSEEvent(data="\n".join(data), event=event or None, wire=wire,
                        id=self._last_id, retry=retry)

    def passes(self, chunk: bytes) -> bool:
        """Whether ``chunk`` is whole events of one ``data:`` line each (LF endings),
        nothing pending before it and none over the limit: ``feed`` would return
        them with ``wire`` adding up to ``chunk`` and change nothing here but the
        last event id (which only ``id:`` lines set), so a relay that needs only the
        bytes may take ``chunk`` as it is. C-speed checks, no event built."""
        ends = chunk.count(b"\n\n")
        return (not self._block and self._started and not self._skip_lf
                and not self._data and self._event is None and self._retry is None
                and chunk[:5] == b"data:" and chunk[-2:] == b"\n\n" and b"\r" not in chunk
                and chunk.count(b"\n") == 2 * ends and chunk.count(b"\n\ndata:") == ends - 1
                and (self._max is None or len(chunk) <= self._max))

    @property
    def idle(self) -> bool:
        """Nothing of an unfinished event is held: the next event starts in the next feed."""
        return not self._block

    @property
    def pending(self) -> bytes:
        """Bytes received but not yet part of a complete event."""
        return b"".join(self._block)


def encode(data: str, event: str | None = None) -> bytes:
    """One event as bytes; ``data`` must not contain a blank line."""
    head = f"event: {event}\n" if event else ""
    body = "".join(f"data: {line}\n" for line in data.split("\n"))
    return (head + body + "\n").encode("utf-8")


DONE = b"data: [DONE]\n\n"


def json_objects(events: Iterable[SSEEvent]) -> Iterator[dict]:
    """The JSON objects among ``events``' data, in order: a chat-completion
    stream's chunks, without its ``[DONE]`` and anything that does not parse
    as an object (what the stream translators read)."""
    for ev in events:
        if ev.data == "[DONE]":
            continue
        try:
            chunk = json.loads(ev.data)
        except ValueError:
            continue
        if isinstance(chunk, dict):
            yield chunk

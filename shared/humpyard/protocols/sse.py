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


class SSEDecoder:
    """Feed bytes, get events. Incomplete trailing data waits for the next feed."""

    __slots__ = ("_buf", "_scan", "_data", "_event", "_retry", "_last_id", "_started",
                 "_skip_lf")

    def __init__(self) -> None:
        self._buf = b""  # the current block's bytes (complete lines, then a partial one)
        self._scan = 0  # where the partial line starts in _buf
        self._data: list[str] = []
        self._event: str | None = None
        self._retry: int | None = None
        self._last_id: str | None = None
        self._started = False  # past the (optional) leading BOM
        self._skip_lf = False  # the last line ended in CR: a LF next belongs to it

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk``."""
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        buf = self._buf + chunk if self._buf else chunk
        if not self._started:
            if len(buf) < 3 and _BOM.startswith(buf):
                self._buf = buf
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[3:]
        events: list[SSEEvent] = []
        start = 0  # the current block's start in buf
        pos = self._scan
        for m in _EOL.finditer(buf, pos):
            line = buf[pos:m.start()]
            end = m.end()
            if m.end() == len(buf) and buf[m.start()] == 0x0D and m.end() - m.start() == 1:
                self._skip_lf = True  # a CR at the very end: a LF may follow in the next feed
            pos = end
            if line:
                self._field(line)
                continue
            ev = self._dispatch(buf[start:end])
            if ev is not None:
                events.append(ev)
            start = end
        self._buf = buf[start:]
        self._scan = pos - start
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

    @property
    def pending(self) -> bytes:
        """Bytes received but not yet part of a complete event."""
        return self._buf


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

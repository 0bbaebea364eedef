"""Server-sent events: an incremental decoder and an encoder.

The decoder takes bytes as they arrive (any split, including inside a line or
a multi-byte character) and returns complete events. It follows the SSE
rules that matter for LLM streams: ``event:`` and ``data:`` fields, multiple
``data:`` lines joined by newlines, comments (``:``) ignored, CRLF or LF.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event. ``wire`` is its exact bytes as received, for pass-through."""

    data: str
    event: str | None = None
    wire: bytes = b""


class SSEDecoder:
    """Feed bytes, get events. Incomplete trailing data waits for the next feed."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buf += chunk
        events: list[SSEEvent] = []
        while True:
            end, sep_len = _find_blank_line(self._buf)
            if end < 0:
                return events
            block = self._buf[: end + sep_len]
            self._buf = self._buf[end + sep_len :]
            ev = _parse_block(block)
            if ev is not None:
                events.append(ev)

    @property
    def pending(self) -> bytes:
        """Bytes received but not yet part of a complete event."""
        return self._buf


def _find_blank_line(buf: bytes) -> tuple[int, int]:
    best = -1
    best_len = 0
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        i = buf.find(sep)
        if i >= 0 and (best < 0 or i < best):
            best, best_len = i, len(sep)
    return best, best_len


def _parse_block(block: bytes) -> SSEEvent | None:
    text = block.decode("utf-8", errors="replace")
    event: str | None = None
    data_lines: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data_lines.append(value)
        elif name == "event":
            event = value
    if not data_lines and event is None:
        return None
    return SSEEvent(data="\n".join(data_lines), event=event, wire=block)


def encode(data: str, event: str | None = None) -> bytes:
    """One event as bytes; ``data`` must not contain a blank line."""
    head = f"event: {event}\n" if event else ""
    body = "".join(f"data: {line}\n" for line in data.split("\n"))
    return (head + body + "\n").encode("utf-8")


DONE = b"data: [DONE]\n\n"

"""Bedrock's answers on the wire: event-stream frames and error types.

``FrameDecoder`` turns the bytes of an ``application/vnd.amazon.eventstream``
body into messages with botocore's own parser (``botocore.eventstream``:
prelude, headers, payload and both CRCs checked), fed as the bytes arrive
from the gateway's transport. A frame over the answer limit is an
``EventTooLarge`` as soon as its prelude says so; a frame that does not parse
is a ``ProtocolViolation``.

``classify_bedrock`` classifies a Bedrock error by its TYPE, which Bedrock
gives in the ``x-amzn-ErrorType`` header (``ThrottlingException:http://…``)
or the body's ``__type``; message text is read only for a
``ValidationException``, where Bedrock has no type of its own for an
over-long prompt: the well-known phrases ``classify_status`` looks for in any
400 (``prompt is too long``, ``input is too long``, ``too many tokens``…) make
it ``overflow``. docs/upstream.md, "Amazon Bedrock".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from humpyard.upstream.classify import (
    BODY_HEAD_BYTES,
    Classification,
    FailureClass,
    classify_status,
)
from humpyard.upstream.errors import EventTooLarge, ProtocolViolation

ERROR_CLASSES: dict[str, FailureClass] = {
    "ThrottlingException": FailureClass.RATE_LIMIT,
    "ServiceQuotaExceededException": FailureClass.RATE_LIMIT,
    "ServiceUnavailableException": FailureClass.SERVER_ERROR,
    "ModelNotReadyException": FailureClass.SERVER_ERROR,
    "InternalServerException": FailureClass.SERVER_ERROR,
    "ModelErrorException": FailureClass.SERVER_ERROR,
    "ModelStreamErrorException": FailureClass.SERVER_ERROR,
    "ModelTimeoutException": FailureClass.TIMEOUT,
    "AccessDeniedException": FailureClass.UNAVAILABLE,
    "ResourceNotFoundException": FailureClass.UNAVAILABLE,
    "UnrecognizedClientException": FailureClass.UNAVAILABLE,
    "InvalidSignatureException": FailureClass.UNAVAILABLE,
    "ExpiredTokenException": FailureClass.UNAVAILABLE,
}
"""Bedrock's error types → failure classes (``ValidationException``: see the docstring)."""

EXCEPTION_STATUS: dict[str, int] = {
    "ThrottlingException": 429, "ServiceQuotaExceededException": 429,
    "ModelNotReadyException": 429, "ValidationException": 400,
    "AccessDeniedException": 403, "ResourceNotFoundException": 404,
    "ModelTimeoutException": 408, "ModelErrorException": 424,
    "ModelStreamErrorException": 424, "InternalServerException": 500,
    "ServiceUnavailableException": 503,
}
"""The HTTP status Bedrock answers each error type with, for one that comes as a stream's
exception frame (the stream's own status was 200): a throttled stream is a 429 to the
client as a throttled call is. Any other type is a 502."""


def exception_status(kind: str) -> int:
    """The status an exception frame of type ``kind`` stands for (``EXCEPTION_STATUS``)."""
    return EXCEPTION_STATUS.get(kind, 502)


def error_type(headers: Mapping[str, str] | None, head: bytes) -> str | None:
    """The error's type: ``x-amzn-ErrorType`` (before its ``:``), else ``__type``
    (after its ``#``), else None."""
    value = (headers or {}).get("x-amzn-errortype")
    if value:
        return value.split(":", 1)[0].strip() or None
    try:
        doc = json.loads(head[:BODY_HEAD_BYTES])
    except (ValueError, RecursionError):
        return None
    kind = doc.get("__type") if isinstance(doc, dict) else None
    return kind.rsplit("#", 1)[-1] or None if isinstance(kind, str) else None


def classify_bedrock(status: int, head: bytes,
                     headers: Mapping[str, str] | None = None) -> Classification:
    """A Bedrock error answer's classification (its type first, its status else)."""
    kind = error_type(headers, head)
    return classify_type(kind, status, head)


def classify_type(kind: str | None, status: int = 400, head: bytes = b"") -> Classification:
    if kind == "ValidationException":
        return classify_status(400, head)  # overflow by the known phrases, else request
    cls = ERROR_CLASSES.get(kind or "")
    if cls is None:
        return classify_status(max(status, 300), head)
    return Classification(cls, next_endpoint=True, counts_for_health=True)


def stream_exception_type(name: str) -> str:
    """A stream's ``:exception-type`` (``throttlingException``) as the error type."""
    return name[:1].upper() + name[1:]


class Frame(NamedTuple):
    """One decoded message: ``kind`` is ``:message-type`` (``event``, ``exception``,
    ``error``), ``name`` its ``:event-type``, ``:exception-type`` or ``:error-code``."""

    kind: str
    name: str
    payload: bytes


class FrameDecoder:
    """``feed(bytes)`` → the complete frames so far (botocore's ``EventStreamBuffer``)."""

    __slots__ = ("_buffer", "_pending", "max_frame", "address")

    def __init__(self, max_frame: int | None, address: str = "") -> None:
        from botocore.eventstream import EventStreamBuffer

        self._buffer: Any = EventStreamBuffer()
        self._pending = b""  # the start of a frame not yet whole, for its prelude
        self.max_frame = max_frame
        self.address = address

    def feed(self, chunk: bytes) -> list[Frame]:
        from botocore.eventstream import ParserError

        self._check(chunk)
        self._buffer.add_data(chunk)
        out: list[Frame] = []
        try:
            for message in self._buffer:
                h = message.headers
                kind = str(h.get(":message-type") or "event")
                name = h.get(":event-type") if kind == "event" else \
                    h.get(":exception-type") if kind == "exception" else h.get(":error-code")
                out.append(Frame(kind, str(name or ""), bytes(message.payload)))
        except ParserError as e:
            raise ProtocolViolation(f"the upstream's event stream does not decode "
                                    f"({type(e).__name__}) {self.address}",
                                    self.address) from None
        return out

    def _check(self, chunk: bytes) -> None:
        """The frames' declared lengths against ``max_frame``, before buffering them."""
        if self.max_frame is None:
            return
        data = self._pending + chunk
        while len(data) >= 4:
            total = int.from_bytes(data[:4], "big")
            if total > self.max_frame:
                raise EventTooLarge(f"the upstream's stream has an event of {total}+ bytes, "
                                    f"over max_sse_event_bytes={self.max_frame} "
                                    f"{self.address}", self.address)
            if len(data) < total or total < 16:
                break
            data = data[total:]
        self._pending = data  # at most one frame's start: under max_frame

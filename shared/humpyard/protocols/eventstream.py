"""The AWS event-stream message format (``application/vnd.amazon.eventstream``): encoding.

Amazon Bedrock's ``InvokeModelWithResponseStream`` answers with a sequence of
binary messages, each self-delimiting and checksummed::

    prelude      total length (uint32, big-endian: the whole message, these 4 bytes
                 and the trailing CRC included), headers length (uint32)
    prelude CRC  CRC-32 of the 8 prelude bytes (uint32)
    headers      each: name length (uint8), name (UTF-8), value type (uint8), value
    payload      opaque bytes
    message CRC  CRC-32 of everything before it, the prelude CRC included (uint32)

A header value is typed; ``encode_message`` takes Python values and picks the
type: ``True``/``False`` (types 0/1, no value bytes), ``int`` (type 4, int32,
or type 5, int64, when it does not fit), ``bytes`` (type 6: uint16 length,
bytes), ``str`` (type 7: uint16 length, UTF-8). Byte (2), short (3),
timestamp (8) and UUID (9) values are what a decoder must read but never
what this gateway has to write, so they are left out.

The limits are the decoders' (botocore's ``EventStreamBuffer``): 128 KiB of
headers, 24 MiB of payload, 255 bytes per header name, 32,767 per string or
bytes value; going past one is a ``ValueError`` naming it. Pure: no I/O.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

MAX_HEADERS_BYTES = 128 * 1024
MAX_PAYLOAD_BYTES = 24 * 1024 * 1024
MAX_NAME_BYTES = 255
MAX_VALUE_BYTES = 32767

HeaderValue = bool | int | bytes | str

_TRUE, _FALSE, _INT32, _INT64, _BYTES, _STRING = 0, 1, 4, 5, 6, 7
_INT32_RANGE = range(-(2 ** 31), 2 ** 31)
_INT64_RANGE = range(-(2 ** 63), 2 ** 63)
_PRELUDE = struct.Struct(">II")
_CRC = struct.Struct(">I")


def encode_header(name: str, value: HeaderValue) -> bytes:
    """One header's bytes (see the module docstring for the types)."""
    raw_name = name.encode("utf-8")
    if not 0 < len(raw_name) <= MAX_NAME_BYTES:
        raise ValueError(f"event-stream header name {name[:40]!r}: 1 to {MAX_NAME_BYTES} "
                         f"bytes, got {len(raw_name)}")
    head = bytes((len(raw_name),)) + raw_name
    if value is True:
        return head + bytes((_TRUE,))
    if value is False:
        return head + bytes((_FALSE,))
    if isinstance(value, int):
        if value in _INT32_RANGE:
            return head + bytes((_INT32,)) + value.to_bytes(4, "big", signed=True)
        if value in _INT64_RANGE:
            return head + bytes((_INT64,)) + value.to_bytes(8, "big", signed=True)
        raise ValueError(f"event-stream header {name!r}: integer {value} does not fit "
                         "in 64 bits")
    if isinstance(value, str):
        kind, raw = _STRING, value.encode("utf-8")
    elif isinstance(value, bytes | bytearray | memoryview):
        kind, raw = _BYTES, bytes(value)
    else:
        raise TypeError(f"event-stream header {name!r}: a bool, int, bytes or str value, "
                        f"got {type(value).__name__}")
    if len(raw) > MAX_VALUE_BYTES:
        raise ValueError(f"event-stream header {name!r}: at most {MAX_VALUE_BYTES} bytes "
                         f"of value, got {len(raw)}")
    return head + bytes((kind,)) + len(raw).to_bytes(2, "big") + raw


def encode_message(headers: Iterable[tuple[str, HeaderValue]], payload: bytes = b"") -> bytes:
    """One whole message: ``headers`` in the order given (names must not repeat:
    a decoder refuses a duplicate), then ``payload``."""
    seen: set[str] = set()
    parts = []
    for name, value in headers:
        if name in seen:
            raise ValueError(f"event-stream header {name!r} appears twice")
        seen.add(name)
        parts.append(encode_header(name, value))
    raw_headers = b"".join(parts)
    if len(raw_headers) > MAX_HEADERS_BYTES:
        raise ValueError(f"event-stream headers: at most {MAX_HEADERS_BYTES} bytes, "
                         f"got {len(raw_headers)}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"event-stream payload: at most {MAX_PAYLOAD_BYTES} bytes, "
                         f"got {len(payload)}")
    total = _PRELUDE.size + _CRC.size + len(raw_headers) + len(payload) + _CRC.size
    prelude = _PRELUDE.pack(total, len(raw_headers))
    head = prelude + _CRC.pack(zlib.crc32(prelude))
    crc = zlib.crc32(payload, zlib.crc32(raw_headers, zlib.crc32(head)))
    return b"".join((head, raw_headers, payload, _CRC.pack(crc)))


def event_message(event_type: str, payload: bytes,
                  content_type: str = "application/json") -> bytes:
    """An ``event`` message as AWS services send them (``:event-type``,
    ``:content-type``, ``:message-type``)."""
    return encode_message(((":event-type", event_type), (":content-type", content_type),
                           (":message-type", "event")), payload)


def exception_message(exception_type: str, payload: bytes,
                      content_type: str = "application/json") -> bytes:
    """An ``exception`` message: a modelled error ending a stream
    (``:exception-type`` names it, e.g. ``modelStreamErrorException``)."""
    return encode_message(((":exception-type", exception_type),
                           (":content-type", content_type),
                           (":message-type", "exception")), payload)

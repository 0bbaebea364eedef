"""The event-stream encoder against botocore's decoder (the one boto3 and the
``anthropic`` SDK's Bedrock client read Bedrock's streams with).

Every message ``encode_message`` writes must decode, with botocore's
``EventStreamBuffer``, to the headers and payload it was given — for any
headers and payload sizes (hypothesis), fed whole or split anywhere; and a
flipped byte anywhere must be caught by a checksum.
"""

from __future__ import annotations

import base64
import json

import pytest
from botocore.eventstream import (
    ChecksumMismatch,
    EventStreamBuffer,
    InvalidHeadersLength,
    InvalidPayloadLength,
    ParserError,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from humpyard.protocols.bedrock_client import PING, STREAM_ERROR, chunk, stream_exception
from humpyard.protocols.eventstream import (
    MAX_HEADERS_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_VALUE_BYTES,
    encode_header,
    encode_message,
    event_message,
)


def decode(data: bytes, *, pieces: list[int] | None = None) -> list:
    """Every message botocore reads from ``data``, fed in pieces cut at ``pieces``."""
    buf = EventStreamBuffer()
    out = []
    cuts = sorted({0, *(p % (len(data) + 1) for p in pieces or []), len(data)})
    for a, b in zip(cuts, cuts[1:], strict=False):
        buf.add_data(data[a:b])
        out.extend(buf)
    buf.add_data(b"")
    out.extend(buf)
    return out


names = st.text(min_size=1, max_size=40).filter(lambda s: len(s.encode()) <= 255)
values = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1),
    st.binary(max_size=300),
    st.text(max_size=300),
)
header_lists = st.dictionaries(names, values, max_size=8).map(lambda d: list(d.items()))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(headers=header_lists, payload=st.binary(max_size=5000),
       pieces=st.lists(st.integers(min_value=0), max_size=4))
def test_botocore_decodes_what_is_encoded(headers, payload, pieces):
    raw = encode_message(headers, payload)
    [msg] = decode(raw, pieces=pieces)
    assert msg.payload == payload
    assert msg.headers == dict(headers)
    assert msg.prelude.total_length == len(raw)


@settings(max_examples=50, deadline=None)
@given(messages=st.lists(st.tuples(header_lists, st.binary(max_size=2000)), min_size=1,
                         max_size=5),
       pieces=st.lists(st.integers(min_value=0), max_size=6))
def test_a_sequence_of_messages_split_anywhere(messages, pieces):
    raw = b"".join(encode_message(h, p) for h, p in messages)
    got = decode(raw, pieces=pieces)
    assert [(m.headers, m.payload) for m in got] == [(dict(h), p) for h, p in messages]


@settings(max_examples=200, deadline=None)
@given(headers=header_lists, payload=st.binary(max_size=500), where=st.integers(min_value=0),
       bit=st.integers(min_value=0, max_value=7))
def test_any_flipped_bit_is_caught(headers, payload, where, bit):
    raw = bytearray(encode_message(headers, payload))
    i = where % len(raw)
    raw[i] ^= 1 << bit
    # The lengths in the prelude are covered by the prelude's CRC: a flip there is a
    # checksum error (or, before the CRC is read, a length the decoder refuses).
    with pytest.raises(ParserError):
        got = decode(bytes(raw))
        assert got, "nothing decoded and nothing refused"
        raise AssertionError(f"a flipped bit at byte {i} went unnoticed: {got}")


def test_largest_sizes_decoders_accept():
    big_value = "x" * MAX_VALUE_BYTES
    headers = [(f"h{i}", big_value) for i in range(MAX_HEADERS_BYTES // (MAX_VALUE_BYTES + 8))]
    payload = b"\x00" * 100_000
    [msg] = decode(encode_message(headers, payload))
    assert msg.headers == dict(headers) and msg.payload == payload


def test_limits_are_refused_by_name():
    with pytest.raises(ValueError, match="header name"):
        encode_header("", "x")
    with pytest.raises(ValueError, match="header name"):
        encode_header("n" * 256, "x")
    with pytest.raises(ValueError, match="bytes of value"):
        encode_header("n", "x" * (MAX_VALUE_BYTES + 1))
    with pytest.raises(ValueError, match="64 bits"):
        encode_header("n", 2 ** 63)
    with pytest.raises(TypeError, match="float"):
        encode_header("n", 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="appears twice"):
        encode_message([("a", "1"), ("a", "2")])
    too_many = [(f"h{i}", "x" * MAX_VALUE_BYTES) for i in range(5)]
    with pytest.raises(ValueError, match="headers: at most"):
        encode_message(too_many)
    with pytest.raises(ValueError, match="payload: at most"):
        encode_message([], b"\x00" * (MAX_PAYLOAD_BYTES + 1))


def test_decoders_refuse_what_the_limits_guard():
    """The limits are the decoder's own: one byte past them, botocore refuses."""
    import struct
    import zlib
    over = struct.pack(">II", 16 + MAX_HEADERS_BYTES + 1, MAX_HEADERS_BYTES + 1)
    buf = EventStreamBuffer()
    buf.add_data(over + struct.pack(">I", zlib.crc32(over)))
    with pytest.raises(InvalidHeadersLength):
        list(buf)
    over = struct.pack(">II", 16 + MAX_PAYLOAD_BYTES + 1, 0)
    buf = EventStreamBuffer()
    buf.add_data(over + struct.pack(">I", zlib.crc32(over)))
    with pytest.raises(InvalidPayloadLength):
        list(buf)


def test_integer_widths():
    [msg] = decode(encode_message([("small", -(2 ** 31)), ("large", 2 ** 31),
                                   ("t", True), ("f", False)]))
    assert msg.headers == {"small": -(2 ** 31), "large": 2 ** 31, "t": True, "f": False}
    assert encode_header("small", 1)[len("small") + 1] == 4  # int32
    assert encode_header("large", 2 ** 31)[len("large") + 1] == 5  # int64


def test_a_known_message_byte_for_byte():
    """The AWS documentation's layout, checked independently of any decoder."""
    raw = encode_message([(":message-type", "event")], b"{}")
    header = b"\x0d:message-type\x07\x00\x05event"
    assert raw[:8] == (12 + len(header) + 2 + 4).to_bytes(4, "big") + len(header).to_bytes(
        4, "big")
    assert raw[12:12 + len(header)] == header
    assert raw[12 + len(header):-4] == b"{}"


def test_bedrock_chunks_as_boto3_parses_them():
    """A chunk is what Bedrock sends: the event-type, content-type and message-type
    headers and ``{"bytes": base64(event)}``; an exception message carries its name."""
    event = json.dumps({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": "héllo"}}).encode()
    [msg, ping, err] = decode(chunk(event) + PING + stream_exception("broke", 502))
    assert msg.headers == {":event-type": "chunk", ":content-type": "application/json",
                           ":message-type": "event"}
    assert base64.b64decode(json.loads(msg.payload)["bytes"]) == event
    assert json.loads(base64.b64decode(json.loads(ping.payload)["bytes"])) == {"type": "ping"}
    assert err.headers == {":exception-type": STREAM_ERROR,
                           ":content-type": "application/json",
                           ":message-type": "exception"}
    assert json.loads(err.payload) == {"message": "broke", "originalStatusCode": 502}
    assert err.to_response_dict()["status_code"] == 400


def test_checksum_mismatch_is_the_class_botocore_raises():
    raw = bytearray(event_message("chunk", b"{}"))
    raw[-1] ^= 0xFF
    with pytest.raises(ChecksumMismatch):
        decode(bytes(raw))

"""The SSE decoder against the WHATWG event-stream rules, fed whole and byte by byte."""

from __future__ import annotations

import pytest

from humpyard.protocols.sse import SSEDecoder, SSEEvent, json_objects


def decode(data: bytes, *, split: int | None = None) -> list[SSEEvent]:
    d = SSEDecoder()
    if split is None:
        return d.feed(data)
    out: list[SSEEvent] = []
    for i in range(0, len(data), split):
        out += d.feed(data[i:i + split])
    return out


CORPUS: list[tuple[str, bytes, list[tuple[str, str | None]]]] = [
    ("lf", b"data: a\n\ndata: b\n\n", [("a", None), ("b", None)]),
    ("crlf", b"data: a\r\n\r\ndata: b\r\n\r\n", [("a", None), ("b", None)]),
    ("cr", b"data: a\r\rdata: b\r\r", [("a", None), ("b", None)]),
    ("lf-lines-crlf-blank", b"data: a\n\r\ndata: b\n\r\n", [("a", None), ("b", None)]),
    ("crlf-lines-lf-blank", b"data: a\r\n\ndata: b\r\n\n", [("a", None), ("b", None)]),
    ("cr-line-then-crlf", b"data: a\rdata: b\r\n\r\n", [("a\nb", None)]),
    ("mixed", b"event: x\rdata: 1\r\ndata: 2\n\r\ndata: 3\r\r", [("1\n2", "x"), ("3", None)]),
    ("bom", b"\xef\xbb\xbfdata: first\n\ndata: second\n\n", [("first", None),
                                                            ("second", None)]),
    ("bom-only-once", b"\xef\xbb\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n", [("a", None)]),
    ("comments", b": ping\n\n:another\ndata: x\n: inside\n\n", [("x", None)]),
    ("no-space", b"data:x\n\n", [("x", None)]),
    ("two-spaces", b"data:  x\n\n", [(" x", None)]),
    ("field-without-colon", b"data\n\n", [("", None)]),
    ("empty-data-lines", b"data:\ndata:\n\n", [("\n", None)]),
    ("event-without-data-is-dropped", b"event: ping\n\ndata: y\n\n", [("y", None)]),
    ("unknown-field", b"foo: bar\ndata: z\n\n", [("z", None)]),
    ("unterminated-last-block", b"data: done\n\ndata: cut", [("done", None)]),
    ("done-marker", b"data: {\"a\":1}\n\ndata: [DONE]\n\n", [('{"a":1}', None),
                                                           ("[DONE]", None)]),
    ("utf8", "data: héllo ✓\n\n".encode(), [("héllo ✓", None)]),
]


@pytest.mark.parametrize(("name", "data", "want"), CORPUS, ids=[c[0] for c in CORPUS])
@pytest.mark.parametrize("split", [None, 1, 2, 3, 7])
def test_corpus(name: str, data: bytes, want: list[tuple[str, str | None]],
                split: int | None) -> None:
    got = [(e.data, e.event) for e in decode(data, split=split)]
    assert got == want


def test_id_persists_and_retry_is_digits_only() -> None:
    events = decode(b"id: 7\ndata: a\n\ndata: b\n\nid: 8\nretry: 1500\ndata: c\n\n"
                    b"retry: soon\nid: x\x00y\ndata: d\n\n")
    assert [(e.data, e.id, e.retry) for e in events] == [
        ("a", "7", None), ("b", "7", None), ("c", "8", 1500), ("d", "8", None)]


def test_wire_is_each_events_own_bytes() -> None:
    data = b"\xef\xbb\xbf: hi\ndata: a\r\n\r\ndata: b\n\n"
    events = decode(data)
    assert [e.wire for e in events] == [b": hi\ndata: a\r\n\r\n", b"data: b\n\n"]
    assert b"".join(e.wire for e in events) == data[3:]


def test_pending_holds_the_incomplete_block() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: a\n\ndata: par") == [SSEEvent("a", wire=b"data: a\n\n")]
    assert d.pending == b"data: par"


def test_json_objects_are_the_chunks_without_done_or_junk():
    events = [SSEEvent(data='{"a": 1}'), SSEEvent(data="[DONE]"), SSEEvent(data="not json"),
              SSEEvent(data="[1, 2]"), SSEEvent(data='{"b": {"c": null}}')]
    assert list(json_objects(events)) == [{"a": 1}, {"b": {"c": None}}]

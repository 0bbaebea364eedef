"""The SSE decoder's fast path (whole one-line ``data:`` events in one read, the
common case) against its general path: for every stream of a corpus and every
way of cutting it into reads, the same events (data, name, wire bytes, id, retry)
as the general path given the same reads (``General``: the decoder with its fast
path switched off). ADR 0003, "Round 4". And ``passes``, which lets the direct
relay write a read undecoded, against what ``feed`` returns for that read."""

from __future__ import annotations

import json
import random

import pytest

from humpyard.planning.estimate import relayed_text_bytes, relayed_text_bytes_raw
from humpyard.protocols.sse import SSEDecoder, SSETooLarge


def _chunk(delta: dict, **extra: object) -> bytes:
    obj = {"id": "c", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": delta, "finish_reason": None}], **extra}
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() \
        + b"\n\n"


CHAT = (_chunk({"role": "assistant"}) + _chunk({"content": "h\u00e9llo \"q\" \\ "})
        + _chunk({"content": "\u4e16\u754c"})
        + _chunk({"tool_calls": [{"index": 0, "id": "t", "function": {
            "name": "f", "arguments": "{\"a\":"}}]})
        + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]})
        + b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}'
          b"\n\n" + b"data: [DONE]\n\n")
CORPUS = {
    "chat": CHAT,
    "crlf": CHAT.replace(b"\n", b"\r\n"),
    "cr": CHAT.replace(b"\n", b"\r"),
    "bom": b"\xef\xbb\xbf" + CHAT,
    "comments": b": ping\n\n" + CHAT + b": bye\n\n",
    "comment_lines": b"data: a\n: note\n\ndata: b\n\n",
    "multiline": b"data: one\ndata: two\n\ndata: three\n\n",
    "named": b"event: message_start\ndata: {}\n\ndata: x\n\nevent: ping\ndata: {}\n\n",
    "ids": b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\nretry: 10\ndata: d\n\n",
    "blank_lines": b"data: a\n\n\n\ndata: b\n\n\ndata: c\n\n",
    "empty_data": b"data:\n\ndata:x\n\ndata:  two spaces\n\n",
    "no_data": b"event: lonely\n\ndata: a\n\n",
    "unfinished": CHAT + b"data: cut off",
    "bad_utf8": b"data: \xff\xfe\n\ndata: ok\n\n",
}


class General(SSEDecoder):
    """The oracle: every read through the general path."""

    def _simple(self, chunk: bytes) -> None:
        return None


def _events(chunks: list[bytes], limit: int | None = None,
            kind: type[SSEDecoder] = SSEDecoder) -> list[tuple]:
    d = kind(limit)
    return [(e.data, e.event, e.wire, e.id, e.retry) for c in chunks for e in d.feed(c)]


def _cuts(stream: bytes, rng: random.Random) -> list[list[bytes]]:
    events = [e + b"\n\n" for e in stream.split(b"\n\n")[:-1]]
    tail = stream.split(b"\n\n")[-1]
    whole = [stream]
    per_event = events + ([tail] if tail else [])
    pairs = [b"".join(per_event[i:i + 2]) for i in range(0, len(per_event), 2)]
    out = [whole, per_event, pairs]
    for _ in range(20):
        points = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, 4)))
        out.append([stream[a:b] for a, b in zip([0, *points], [*points, len(stream)],
                                                strict=True)])
    return out


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_cut_gives_the_events_of_the_general_path(name):
    stream = CORPUS[name]
    for chunks in _cuts(stream, random.Random(name)):
        expected = _events(chunks, kind=General)
        assert expected
        assert _events(chunks) == expected, chunks


def test_the_fast_path_takes_whole_simple_events_and_nothing_else():
    d = SSEDecoder()
    d.feed(b": warm\n\n")  # past the BOM check
    simple = d._simple(CHAT)
    assert simple is not None and [e.wire for e in simple] == \
        [e + b"\n\n" for e in CHAT.split(b"\n\n")[:-1]]
    for other in (CORPUS["multiline"], CORPUS["named"], CORPUS["blank_lines"],
                  b"data: a\n\n: c\n\n"):
        assert d._simple(other) is None


def test_a_streams_first_read_takes_the_fast_path():
    """Nothing is pending before a stream's first read, and ``data:`` is no BOM: the
    first event is read the fast way too (it was the one read per stream that took
    the general path, at twice the cost)."""
    taken: list[bytes] = []

    class Counting(SSEDecoder):
        def _simple(self, chunk: bytes) -> list | None:
            taken.append(chunk)
            return super()._simple(chunk)

    first = CHAT.split(b"\n\n")[0] + b"\n\n"
    assert [e.wire for e in Counting().feed(first)] == [first]
    assert taken == [first]
    assert [e.data for e in Counting().feed(b"\xef\xbb\xbf" + first)] == \
        [e.data for e in General().feed(first)]  # a BOM first: the general path skips it
    assert taken == [first]


def test_the_event_limit_holds_on_the_fast_path():
    big = b"data: " + b"x" * 2000 + b"\n\n"
    with pytest.raises(SSETooLarge):
        _events([b"data: a\n\n", big], limit=1024)
    assert len(_events([b"data: a\n\n", big], limit=4096)) == 2


def _passes_as_feed_would(chunks: list[bytes], limit: int | None = None) -> int:
    """Feed ``chunks`` to one decoder; for each read ``passes`` accepts, the events
    ``feed`` returns must be exactly its bytes, one ``data:`` line each, and their
    answer text (``relayed_text_bytes``, decoded) what ``relayed_text_bytes_raw``
    counts on the bytes. How many reads it accepted."""
    d = SSEDecoder(limit)
    accepted = 0
    for c in chunks:
        passes = d.passes(c)
        try:
            evs = d.feed(c)
        except SSETooLarge:
            assert not passes
            return accepted
        if passes:
            accepted += 1
            assert b"".join(e.wire for e in evs) == c
            assert all(e.event is None and e.retry is None and b"\n" not in e.wire[:-2]
                       for e in evs)
            if b"\xff" not in c:  # valid UTF-8: the decoded count is the same
                assert relayed_text_bytes_raw(c) == sum(relayed_text_bytes(e.data)
                                                        for e in evs)
    return accepted


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_a_read_passed_as_it_came_is_what_feed_would_return(name):
    # the direct relay writes such a read undecoded (executor/direct.py ``_Splice``)
    for chunks in _cuts(CORPUS[name], random.Random(name)):
        _passes_as_feed_would(chunks)
        _passes_as_feed_would(chunks, limit=64)


def test_passes_takes_provider_reads_and_nothing_else():
    events = [e + b"\n\n" for e in CHAT.split(b"\n\n")[:-1]]
    assert _passes_as_feed_would([b": warm\n\n", *events]) == len(events)
    assert _passes_as_feed_would([b": warm\n\n", CHAT]) == 1
    d = SSEDecoder()
    d.feed(b": warm\n\n")
    for other in (CORPUS["multiline"], CORPUS["named"], CORPUS["blank_lines"],
                  CORPUS["crlf"], b"data: a\n\n: c\n\n", b"data: a\n\ndata: b",
                  b"data: a\n"):
        assert not d.passes(other), other
    d.feed(b"data: cut")  # something pending: the next read is not whole
    assert not d.passes(b"data: a\n\n")
    assert not SSEDecoder().passes(b"data: a\n\n")  # a BOM may still come first

"""``ResponseParser`` sans I/O: bytes in, head and body out, at every split."""

from __future__ import annotations

import pytest

from humpyard.upstream.framing import MAX_HEAD, FramingError, ResponseParser, Truncated


def parse(data: bytes, split: int | None = None, *, eof: bool = False,
          head_only: bool = False) -> ResponseParser:
    p = ResponseParser(head_only)
    step = split or len(data) or 1
    for i in range(0, len(data), step):
        p.feed(data[i:i + step])
    if eof:
        p.feed_eof()
    return p


def body(p: ResponseParser) -> bytes:
    out = b""
    while piece := p.take():
        out += piece
    return out


@pytest.mark.parametrize("split", [None, 1, 5])
def test_content_length_and_keep_alive(split: int | None) -> None:
    p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  v \r\n\r\nhello", split)
    assert p.head == (200, b"OK", [(b"Content-Length", b"5"), (b"X-A", b"v")], b"HTTP/1.1")
    assert p.done and p.reusable and body(p) == b"hello"


@pytest.mark.parametrize("split", [None, 1, 3])
def test_chunked_one_chunk_at_a_time(split: int | None) -> None:
    p = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n", split)
    pieces = []
    while piece := p.take():
        pieces.append(piece)
    assert b"".join(pieces) == b"abcde" and p.done and p.reusable
    if split is None:
        assert pieces == [b"abc", b"de"]


@pytest.mark.parametrize("split", [None, 1, 3])
def test_take_all_joins_what_is_parsed(split: int | None) -> None:
    p = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"3\r\nabc\r\n2\r\nde\r\n1\r\nf\r\n0\r\n\r\n", split)
    first = p.take()
    rest = p.take_all()  # what ``take`` would hand out piece by piece, at once
    assert first and first + rest == b"abcdef" and p.done
    if split is None:
        assert (first, rest) == (b"abc", b"def")
    assert p.buffered == 0 and p.take_all() == b"" and p.take() == b""


def test_what_rfc_9112_says_a_client_accepts() -> None:
    folded = parse(b"HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\nContent-Length: 2\r\n\r\nhi")
    assert folded.head is not None and (b"X-A", b"one two") in folded.head[2]
    bare = parse(b"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi", 1)
    assert bare.done and body(bare) == b"hi"
    for head in (b"Content-Length: 255, 255\r\n",
                 b"Content-Length: 255\r\ncontent-length: 255\r\n"):
        p = parse(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n" + b"x" * 255)
        assert p.done and body(p) == b"x" * 255


def test_informational_answers_are_skipped() -> None:
    p = parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early\r\nLink: a\r\n\r\n"
              b"HTTP/1.1 204 No Content\r\n\r\n", 4)
    assert p.head is not None and p.head[0] == 204 and p.head[2] == [] and p.done


def test_close_delimited_and_truncated() -> None:
    p = parse(b"HTTP/1.1 200 OK\r\n\r\nuntil close", eof=True)
    assert p.done and not p.reusable and body(p) == b"until close"
    with pytest.raises(Truncated):
        parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", eof=True)
    with pytest.raises(Truncated):
        parse(b"HTTP/1.1 200 O", eof=True)


def test_head_only_and_extra_bytes() -> None:
    p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", head_only=True)
    assert p.done and not p.reusable
    q = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiEXTRA")
    assert q.done and q.extra and body(q) == b"hi"


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 2x0 OK\r\n\r\n", b"SPDY/3 200 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: " + b"a" * (MAX_HEAD + 10),
])
def test_malformed_answers(data: bytes) -> None:
    with pytest.raises(FramingError):
        parse(data)

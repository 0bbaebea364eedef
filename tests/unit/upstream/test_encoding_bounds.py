"""Bounded inflating: the same bytes as zlib on normal bodies, never more than asked.

Before, a decoding step looped over zlib's ``unconsumed_tail`` until the input was
used up, so its per-step output cap bounded nothing: 1 MB of gzip became 1 GiB in
one call (issue 24). Here each ``pull`` returns at most ``STEP`` bytes and
inflates no further; what comes out, however the body is split and pulled, is
exactly what ``zlib.decompress`` makes of the whole body (the oracle), for gzip,
zlib-wrapped and raw deflate, and a chain of both.
"""

from __future__ import annotations

import gzip
import json
import random
import zlib

import pytest

from humpyard.upstream.encoding import MAX_MEMBERS, STEP, Decoder, TooManyMembers, decoder_for


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def bodies() -> list[bytes]:
    rng = random.Random(7)
    chunks = [json.dumps({"choices": [{"delta": {"content": f"tok{i} "}}]}).encode()
              for i in range(3000)]
    return [b"", b"x", b"".join(chunks), rng.randbytes(300_000), bytes(2_000_000),
            json.dumps({"content": "é" * 50_000}).encode()]


CODINGS = {
    "gzip": (gzip.compress, zlib.decompress, 31),
    "deflate": (zlib.compress, zlib.decompress, 15),
    "deflate-raw": (raw_deflate, zlib.decompress, -15),
}


def drain(d: Decoder, body: bytes, rng: random.Random) -> bytes:
    out: list[bytes] = []
    i = 0
    while i < len(body):
        n = rng.choice([1, 7, 100, 4096, 65536, 1 << 20])
        d.push(body[i:i + n])
        i += n
        while piece := d.pull(rng.choice([1, 1000, STEP])):
            assert len(piece) <= STEP
            out.append(piece)
    d.finish()
    while piece := d.pull():
        out.append(piece)
    return b"".join(out)


@pytest.mark.parametrize("coding", CODINGS)
def test_every_split_decodes_as_zlib_does(coding: str) -> None:
    compress, _, wbits = CODINGS[coding]
    rng = random.Random(coding)
    for plain in bodies():
        body = compress(plain)
        assert zlib.decompress(body, wbits) == plain  # the oracle agrees with itself
        for _ in range(3):
            d = decoder_for(coding.split("-")[0])
            assert d is not None
            assert drain(d, body, rng) == zlib.decompress(body, wbits)


def test_a_chain_of_codings_is_undone_in_reverse() -> None:
    plain = b"".join(b"line %d\n" % i for i in range(50_000))
    body = zlib.compress(gzip.compress(plain))  # Content-Encoding: gzip, deflate
    d = decoder_for("gzip, deflate")
    assert d is not None
    assert drain(d, body, random.Random(1)) == plain


def test_a_bomb_is_inflated_only_as_far_as_it_is_pulled() -> None:
    body = gzip.compress(bytes(256 << 20), 9)  # 256 MiB of zeros in ~250 KB
    d = decoder_for("gzip")
    assert d is not None
    d.push(body)  # all of it in hand at once
    for _ in range(10):
        assert len(d.pull()) == STEP
    assert d.produced == 10 * STEP
    assert d.consumed < len(body) // 100  # the rest is still compressed, untouched
    assert d.produced / d.consumed > 500  # what the ratio guard (client.py) looks at


def test_a_body_that_is_not_deflate_raises() -> None:
    d = decoder_for("deflate")
    assert d is not None
    d.push(b"this is not compressed at all, in any wrapper")
    with pytest.raises(zlib.error):
        d.pull()


def test_an_unknown_coding_is_left_alone() -> None:
    assert decoder_for("br") is None and decoder_for("identity") is None


def test_a_gzip_body_of_several_members_decodes_as_the_gzip_module_does() -> None:
    """RFC 1952: a gzip body is a series of members. Only the first was decoded and
    the rest dropped, so a request body compressed in parts lost all but its first
    part. Each member is undone in turn, however the body is split and pulled;
    zero padding after the last (which the gzip module skips) is dropped."""
    rng = random.Random(11)
    for _ in range(300):
        parts = [rng.choice(bodies()[:3])[:rng.choice([0, 1, 5000, 100_000])]
                 for _ in range(rng.randint(2, 5))]
        body = b"".join(gzip.compress(p, compresslevel=rng.choice([1, 9])) for p in parts)
        body += bytes(rng.choice([0, 0, 3]))
        assert drain(decoder_for("gzip"), body, rng) == gzip.decompress(body)


def test_bytes_after_a_gzip_member_that_are_not_one_are_dropped() -> None:
    body = gzip.compress(b"first") + gzip.compress(b"second") + b"not a member"
    assert drain(decoder_for("gzip"), body, random.Random(3)) == b"firstsecond"


def test_more_members_than_the_bound_raise_by_name() -> None:
    body = gzip.compress(b"x") * (MAX_MEMBERS + 1)
    assert drain(decoder_for("gzip"), gzip.compress(b"x") * MAX_MEMBERS,
                 random.Random(1)) == b"x" * MAX_MEMBERS
    with pytest.raises(TooManyMembers, match=f"more than {MAX_MEMBERS} gzip members"):
        drain(decoder_for("gzip"), body, random.Random(1))

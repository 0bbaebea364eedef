"""The SSE decoder is linear in what it is fed, and bounds one event.

Before, ``feed`` joined the whole unfinished block with each new read, so a line
that never ends cost the square of its length (issue 24: 12 CPU-seconds in 20
s, the event loop starved). The work is counted here as bytes allocated per
feed (``tracemalloc``), never as wall time: a long line fed in 64 KiB reads may
allocate a small multiple of its length, not its length per read. Any split of a
stream gives the same events as the whole stream at once, and their wire bytes
decode to the same events again (a LF that follows a CR in the next read is not
part of the event already dispatched at the CR, as before).
"""

from __future__ import annotations

import random
import tracemalloc

import pytest

from humpyard.protocols.sse import SSEDecoder, SSEEvent, SSETooLarge
from tests.unit.protocols.test_sse import CORPUS

STREAMS = [data for _, data, _ in CORPUS] + [
    b"data: " + b"x" * 300_000 + b"\r\n\r\ndata: y\r\n\r\n",
    b"".join(b"event: e%d\rdata: %d\ndata: more\r\n\r\n" % (i, i) for i in range(200)),
    b"\xef\xbb\xbf" + b"id: 7\nretry: 10\ndata: a\n\n: c\n\n",
]


def fields(events: list[SSEEvent]) -> list[tuple[object, ...]]:
    return [(e.data, e.event, e.id, e.retry) for e in events]


def feed_split(data: bytes, cuts: list[int], limit: int | None = None) -> list[SSEEvent]:
    d = SSEDecoder(limit)
    out: list[SSEEvent] = []
    last = 0
    for cut in [*cuts, len(data)]:
        out += d.feed(data[last:cut])
        last = cut
    return out


@pytest.mark.parametrize("data", STREAMS, ids=range(len(STREAMS)))
def test_any_split_gives_the_events_of_one_feed(data: bytes) -> None:
    rng = random.Random(len(data))
    whole = fields(SSEDecoder().feed(data))
    for _ in range(30):
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data), rng.randint(1, 40))))
        got = feed_split(data, cuts)
        assert fields(got) == whole
        assert fields(SSEDecoder().feed(b"".join(e.wire for e in got))) == whole
    assert fields(feed_split(data, list(range(1, len(data), 7)))) == whole


def test_a_long_line_costs_linear_work() -> None:
    read, reads = b"a" * (1 << 16), 256  # 16 MiB of one line, in 64 KiB reads
    d = SSEDecoder()
    d.feed(b"data: ")
    tracemalloc.start()
    allocated = 0
    try:
        for _ in range(reads):
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            d.feed(read)
            allocated += tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    fed = len(read) * reads
    # copying the unfinished buffer per read would allocate ~fed * reads / 2 (2 GiB)
    assert allocated < 3 * fed, f"{allocated} bytes allocated for {fed} fed"
    assert d.feed(b"\n\n")[0].data == "a" * fed


def test_a_line_over_the_limit_raises_as_soon_as_it_is_over() -> None:
    d = SSEDecoder(max_event_bytes=1000)
    d.feed(b"data: " + b"a" * 900)
    with pytest.raises(SSETooLarge) as info:
        d.feed(b"a" * 200)
    assert info.value.limit == 1000 and info.value.size > 1000


def test_an_event_of_many_short_lines_over_the_limit_raises() -> None:
    d = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(SSETooLarge):
        for _ in range(200):
            d.feed(b"data: 1234\n")


def test_a_whole_event_in_one_read_is_bounded_too() -> None:
    with pytest.raises(SSETooLarge):
        SSEDecoder(max_event_bytes=1000).feed(b"data: " + b"a" * 2000 + b"\n\n")
    with pytest.raises(SSETooLarge):
        SSEDecoder(max_event_bytes=1000).feed(b"data: 1\n" * 200 + b"\n")


def test_events_within_the_limit_pass_however_many_there_are() -> None:
    d = SSEDecoder(max_event_bytes=100)
    event = b"data: " + b"a" * 90 + b"\n\n"
    assert len(d.feed(event * 10_000)) == 10_000

"""How many writes a relayed stream costs the gateway, counted where the client
sees them: the data segments its TCP socket received (Linux ``TCP_INFO``'s
``tcpi_data_segs_in``). On loopback each small write of the gateway's socket
(``TCP_NODELAY``) is one segment, so the count is the gateway's writes; two
writes could only ever arrive as fewer segments, never as more.

A stream's last events and its end (the chunked coding's terminator) leave in
one write when the upstream's last read holds both: one write fewer per stream
(docs/decisions/0003-performance.md, "The last events and the end in one
write"). Both the server ``humpyard serve`` runs and uvicorn's own are checked.
"""

from __future__ import annotations

import json
import socket
import struct
import sys

import httpx
import pytest

from tests.support.gateway import running_gateway
from tests.support.rawserver import CLOSE, Pause, RawServer
from tests.wire.test_direct_relay import CHUNKED_HEAD
from tests.wire.test_direct_relay import _config as relay_config
from tests.wire.test_relay_cuts import _chunk

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="tcpi_data_segs_in is Linux's")

GAP = Pause(0.05)
USAGE = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}'
         b"\n\n")
DONE = b"data: [DONE]\n\n"
END = b"0\r\n\r\n"
TCPI_DATA_SEGS_IN = 152  # struct tcp_info's offset (linux/tcp.h, since 4.6)


def _framed(*events: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events)


def _segments_of_one_stream(script: list, own_server: bool,
                            include_usage: bool = False) -> tuple[int, bytes]:
    """The data segments the client received for one streamed answer, and its bytes."""
    with RawServer([CHUNKED_HEAD, *script, CLOSE]) as up, \
            running_gateway(relay_config(up.url, True, False), own_server=own_server) as gw:
        body = {"model": "t", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        raw = json.dumps(body).encode()
        port = int(gw.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                      % (len(raw), raw))
            got = b""
            while not got.endswith(b"\r\n" + END):
                piece = s.recv(65536)
                assert piece, got
                got += piece
            info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        gw.recorded(1)
        [d] = gw.decisions()
        assert d["status"] == 200 and d["usage"]["output_tokens"] == 3, d
    (segments,) = struct.unpack_from("I", info, TCPI_DATA_SEGS_IN)
    return segments, got


@pytest.mark.parametrize("own_server", [True, False], ids=["serve", "uvicorn"])
@pytest.mark.parametrize("include_usage", [False, True], ids=["no_usage", "usage"])
def test_the_last_events_and_the_end_leave_in_one_write(own_server, include_usage):
    # head + first content, one more event, then usage, [DONE] and the end in one read
    # (as the bench's upstream and most providers end): 3 writes, not 4.
    script = [_framed(_chunk({"role": "assistant", "content": "a"})), GAP,
              _framed(_chunk({"content": "b"})), GAP,
              _framed(USAGE, DONE) + END]
    segments, got = _segments_of_one_stream(script, own_server, include_usage)
    assert got.count(b"data: ") == (4 if include_usage else 3)
    assert (b'"usage"' in got) == include_usage
    assert got.endswith(DONE + b"\r\n" + END)
    # uvicorn's own server sends the head alone: one write more
    assert segments <= (3 if own_server else 4), f"{segments} writes for 3 upstream reads"


@pytest.mark.parametrize("own_server", [True, False], ids=["serve", "uvicorn"])
def test_a_stream_that_arrives_whole_is_one_write(own_server):
    # head, content, usage, [DONE] and the end in one read: the head, the events and
    # the end go out together (uvicorn's own server sends its head alone first).
    script = [_framed(_chunk({"role": "assistant", "content": "a"}), USAGE, DONE) + END]
    segments, got = _segments_of_one_stream(script, own_server)
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.count(b"data: ") == 2
    assert segments <= (1 if own_server else 2), f"{segments} writes for one upstream read"


@pytest.mark.parametrize("own_server", [True, False], ids=["serve", "uvicorn"])
def test_an_end_that_comes_alone_is_a_write_of_its_own(own_server):
    # [DONE] in one read, the end half a second later: [DONE] goes out as it comes
    # (were it held for the end, the two would be one write, and this one fewer)
    script = [_framed(_chunk({"role": "assistant", "content": "a"})), GAP,
              _framed(USAGE, DONE), Pause(0.5), END]
    segments, got = _segments_of_one_stream(script, own_server)
    assert got.endswith(b"%x\r\n%b\r\n" % (len(DONE), DONE) + END)
    assert segments == (3 if own_server else 4)


def test_a_limit_passed_in_the_rest_of_the_first_contents_read_sends_the_content_first():
    # The first content, then (in the same read, a chunk of its own) an event past
    # max_sse_event_bytes: the held content still goes out before the stream's error,
    # as it did when the rest of that read was taken alone.
    huge = b"data: " + b"x" * 2048
    script = [_framed(_chunk({"role": "assistant", "content": "first"}), huge), GAP, END]
    with RawServer([CHUNKED_HEAD, *script, CLOSE]) as up, running_gateway(relay_config(
            up.url, True, False, "[router]\nmax_sse_event_bytes = 1024"), own_server=True) as gw:
        body = {"model": "t", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(timeout=10) as c:
            r = c.post(gw.url + "/v1/chat/completions", json=body)
        gw.recorded(1)
        [d] = gw.decisions()
    events = [e for e in r.text.split("\n\n") if e]
    assert r.status_code == 200 and '"first"' in events[0], r.text
    assert json.loads(events[-1].removeprefix("data: "))["error"]["code"] == "stream_broken"
    assert d["outcome"] == "stream_broken" and "max_sse_event_bytes" in d["error"], d

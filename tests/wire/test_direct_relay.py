"""The direct relay (docs/decisions/0021-direct-relay.md) against the relay through
the request's task, over real sockets: for each upstream script, one gateway with
``direct_relay = true`` and one with ``false`` must give the client the same bytes
and record the same outcome and usage, and the direct one must have passed some
reads directly (``humpyard_stream_direct_writes_total``), so the comparison is
never between two runs of the old path.

The scripts: an Anthropic-native stream (text, a tool call's JSON deltas, pings,
usage in ``message_delta``) cut per event, in halves and with CRLF; the same
framed with chunked transfer coding; an upstream error event after direct reads
(chat and Anthropic); an upstream that closes early (usage estimated from the
text relayed, part of it directly); an invalid event mid-stream; and a client
that reads slowly while the upstream sends megabytes (flow control: nothing lost
or reordered). Then, with the direct relay alone: a client leaving mid-stream
(499 at once, the estimate) and the idle limit between direct reads.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.support.gateway import running_gateway
from tests.support.rawserver import CLOSE, Pause, RawServer
from tests.wire.test_relay_cuts import EVENTS as CHAT_EVENTS
from tests.wire.test_relay_cuts import _chunk

MSG = [{"role": "user", "content": "hi"}]
GAP = Pause(0.01)
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
HEAD = SSE_HEAD + b"connection: close\r\n\r\n"
CHUNKED_HEAD = SSE_HEAD + b"transfer-encoding: chunked\r\n\r\n"


def _ev(name: str, data: dict) -> bytes:
    return (f"event: {name}\ndata: ".encode()
            + json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n")


def _delta(i: int, delta: dict) -> bytes:
    return _ev("content_block_delta", {"type": "content_block_delta", "index": i,
                                       "delta": delta})


ANTHROPIC = [
    _ev("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [], "stop_reason": None, "usage": {"input_tokens": 11, "output_tokens": 1}}}),
    _ev("content_block_start", {"type": "content_block_start", "index": 0,
                                "content_block": {"type": "text", "text": ""}}),
    _delta(0, {"type": "text_delta", "text": "h\u00e9llo "}),
    _ev("ping", {"type": "ping"}),
    _delta(0, {"type": "text_delta", "text": "\"w\u00f6rld\" "}),
    _delta(0, {"type": "text_delta", "text": "again"}),
    _ev("content_block_stop", {"type": "content_block_stop", "index": 0}),
    _ev("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "t1", "name": "f", "input": {}}}),
    _delta(1, {"type": "input_json_delta", "partial_json": "{\"a\":"}),
    _delta(1, {"type": "input_json_delta", "partial_json": "1}"}),
    _ev("content_block_stop", {"type": "content_block_stop", "index": 1}),
    _ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                          "usage": {"output_tokens": 23}}),
    _ev("message_stop", {"type": "message_stop"}),
]


def _paced(events: list[bytes]) -> list[bytes | Pause]:
    return [x for e in events for x in (e, GAP)]


def _halves(events: list[bytes]) -> list[bytes | Pause]:
    return [p for e in events for p in (e[:len(e) // 2], GAP, e[len(e) // 2:], GAP)]


def _chunked(script: list[bytes | Pause]) -> list[bytes | Pause]:
    out: list[bytes | Pause] = [b"%x\r\n%b\r\n" % (len(x), x) if isinstance(x, bytes) else x
                                for x in script]
    return [*out, b"0\r\n\r\n"]


def _config(up: str, direct: bool, anthropic: bool, extra: str = "") -> str:
    return f"""
direct_relay = {"true" if direct else "false"}
[providers.p]
base_url = "{up}"
{'protocol = "anthropic"' if anthropic else ""}
[targets.t]
endpoints = [{{ provider = "p", model = "m", price = {{ input = 3, output = 15 }} }}]
{extra}
"""


def _play(head: bytes, script: list, *, direct: bool, anthropic: bool,
          slow_client: float = 0, extra: str = "") -> tuple[bytes, dict, float]:
    """The client's bytes, the decision and the direct writes for one run."""
    with RawServer([head, *script, CLOSE]) as up, \
            running_gateway(_config(up.url, direct, anthropic, extra)) as gw:
        if anthropic:
            path, body = "/v1/messages", {"model": "t", "max_tokens": 64, "stream": True,
                                          "messages": MSG}
        else:
            path, body = "/v1/chat/completions", {
                "model": "t", "messages": MSG, "stream": True,
                "stream_options": {"include_usage": True}}
        with httpx.Client(timeout=30) as c, c.stream("POST", gw.url + path, json=body) as r:
            assert r.status_code == 200
            if slow_client:
                time.sleep(slow_client)  # the gateway's writes pile up in the socket
            content = b"".join(r.iter_raw())
        gw.recorded(1)
        [d] = gw.decisions()
        protocol = "anthropic" if anthropic else "openai"
        writes = gw.gw.metrics.direct_writes.value(protocol=protocol)
    return content, d, writes


def _same(head: bytes, script: list, *, anthropic: bool, **kw: object) -> tuple[bytes, dict]:
    fast, d_fast, writes = _play(head, script, direct=True, anthropic=anthropic, **kw)
    old, d_old, none = _play(head, script, direct=False, anthropic=anthropic, **kw)
    assert none == 0
    assert writes > 0, "the direct relay was not used"
    assert fast == old
    for field in ("status", "outcome", "error", "usage", "usage_estimated", "cost_usd"):
        assert d_fast.get(field) == d_old.get(field), field
    return fast, d_fast


def _chunks_per_write(events: list[bytes], per: int) -> list[bytes | Pause]:
    """Chunked transfer coding, ``per`` chunks in each write (one read, as a
    rule): the parser hands the reader one chunk at a time."""
    framed = [b"%x\r\n%b\r\n" % (len(e), e) for e in events]
    out: list[bytes | Pause] = []
    for i in range(0, len(framed), per):
        out += [b"".join(framed[i:i + per]), GAP]
    return [*out, b"0\r\n\r\n"]


@pytest.mark.parametrize("cut", ["per_event", "halves", "crlf", "chunked", "chunks_per_read"])
def test_an_anthropic_stream_is_relayed_alike(cut):
    events = [e.replace(b"\n", b"\r\n") for e in ANTHROPIC] if cut == "crlf" else ANTHROPIC
    script = _halves(events) if cut == "halves" else _paced(events)
    head = HEAD
    if cut == "chunked":
        head, script = CHUNKED_HEAD, _chunked(script)
    elif cut == "chunks_per_read":
        head, script = CHUNKED_HEAD, _chunks_per_write(events, 3)
    content, d = _same(head, script, anthropic=True)
    if cut != "crlf":
        assert content == b"".join(ANTHROPIC)  # passed through, byte for byte
    assert d["usage"]["input_tokens"] == 11 and d["usage"]["output_tokens"] == 23
    assert not d["usage_estimated"]


def test_a_chat_stream_framed_in_chunks_is_relayed_alike():
    content, d = _same(CHUNKED_HEAD, _chunked(_paced(CHAT_EVENTS)), anthropic=False)
    assert content == b"".join(CHAT_EVENTS)
    assert d["usage"]["input_tokens"] == 7 and not d["usage_estimated"]


def test_every_chunk_of_a_read_is_relayed_before_the_upstream_pauses():
    # Several chunks of a chunked body in one read, then the upstream waits (as
    # before its usage chunk): the direct relay used to pass on the first chunk
    # of the read and keep the rest until the next read, which never came.
    words = [_chunk({"content": f"w{i} "}) for i in range(5)]
    script = [CHUNKED_HEAD, *_chunks_per_write(CHAT_EVENTS[:2], 1)[:-1],
              *_chunks_per_write(words, 5)[:-1], Pause(30), CLOSE]
    with RawServer(script) as up, running_gateway(_config(up.url, True, False)) as gw:
        got = b""
        with httpx.Client(timeout=httpx.Timeout(30, read=5)) as c, c.stream(
                "POST", gw.url + "/v1/chat/completions",
                json={"model": "t", "messages": MSG, "stream": True}) as r:
            for piece in r.iter_raw():
                got += piece
                if b"w4" in got:
                    break
        assert b"w0 " in got and b"w4 " in got
        gw.recorded(1)  # the client left: counted as the stream ends
        assert gw.gw.metrics.direct_writes.value(protocol="openai") > 0


ERROR_CHAT = b'data: {"error":{"message":"overloaded","type":"server_error"}}\n\n'
ERROR_ANTHROPIC = _ev("error", {"type": "error", "error": {"type": "overloaded_error",
                                                           "message": "overloaded"}})


@pytest.mark.parametrize("anthropic", [False, True], ids=["chat", "anthropic"])
def test_an_error_event_after_direct_reads_ends_the_stream_alike(anthropic):
    events = ANTHROPIC[:6] + [ERROR_ANTHROPIC] if anthropic else CHAT_EVENTS[:3] + [ERROR_CHAT]
    content, d = _same(HEAD, _paced(events), anthropic=anthropic)
    assert d["outcome"] == "stream_broken" and "overloaded" in d["error"]
    assert b"error" in content.rstrip().split(b"\n\n")[-1]


@pytest.mark.parametrize("anthropic", [False, True], ids=["chat", "anthropic"])
def test_an_early_close_is_charged_the_text_relayed_directly(anthropic):
    # no usage ever comes: the estimate counts the text of every event relayed,
    # those the direct relay wrote included
    events = ANTHROPIC[1:6] if anthropic else CHAT_EVENTS[:5]
    if anthropic:
        events = [ANTHROPIC[0].replace(b'"input_tokens":11,', b""), *events]
    _content, d = _same(HEAD, _paced(events), anthropic=anthropic)
    assert d["usage_estimated"] and d["usage"]["output_tokens"] > 0
    # an Anthropic stream must end with message_stop; a chat stream's clean close is its end
    assert d["outcome"] == ("stream_broken" if anthropic else "ok")


def test_an_invalid_anthropic_event_mid_stream_breaks_it_alike():
    events = [*ANTHROPIC[:4], b"event: content_block_delta\ndata: {not json\n\n", *ANTHROPIC[4:]]
    content, d = _same(HEAD, _paced(events), anthropic=True)
    assert d["outcome"] == "stream_broken"
    assert content.rstrip().split(b"\n\n")[-1].startswith(b"event: error")


def test_a_slow_client_gets_every_byte_in_order():
    # ~6 MB after the first content, faster than a client that sleeps first: the
    # direct relay must pause the upstream rather than buffer or drop
    big = [_chunk({"content": f"{i:05d}" + "x" * 8000}) for i in range(800)]
    events = [CHAT_EVENTS[0], CHAT_EVENTS[1], *big, CHAT_EVENTS[-2], CHAT_EVENTS[-1]]
    script: list[bytes | Pause] = [events[0], events[1], GAP]
    script += [b"".join(big[i:i + 40]) for i in range(0, len(big), 40)]
    script += [GAP, events[-2], events[-1]]
    content, d = _same(HEAD, script, anthropic=False, slow_client=1.0)
    assert content == b"".join(events)
    assert d["usage"]["output_tokens"] == 9 and not d["usage_estimated"]


def test_a_client_leaving_during_direct_reads_cancels_at_once():
    # the upstream would talk for a minute; the client reads a few events and leaves
    script = [HEAD, *[x for i in range(1200) for x in (_chunk({"content": f"t{i} "}), Pause(0.05))],
              CLOSE]
    with RawServer(script) as up, running_gateway(_config(up.url, True, False)) as gw:
        with httpx.Client(timeout=30) as c, c.stream(
                "POST", gw.url + "/v1/chat/completions",
                json={"model": "t", "messages": MSG, "stream": True}) as r:
            seen = 0
            for _ in r.iter_raw():
                seen += 1
                if seen >= 6:
                    break
        left = time.monotonic()
        gw.recorded(1)
        assert time.monotonic() - left < 5  # not the minute the upstream would take
        [d] = gw.decisions()
        assert d["status"] == 499
        m = gw.gw.metrics
        assert m.client_disconnects.value(phase="relaying") == 1
        assert m.direct_writes.value(protocol="openai") > 0
        assert d["usage_estimated"] and d["usage"]["output_tokens"] > 0


def test_the_idle_limit_holds_during_direct_reads():
    events = [_chunk({"content": f"t{i} "}) for i in range(6)]
    script = [*_paced(events), Pause(5)]
    with RawServer([HEAD, *script, CLOSE]) as up, running_gateway(
            _config(up.url, True, False, extra="[router]\nidle_timeout_secs = 0.5\n")) as gw:
        started = time.monotonic()
        with httpx.Client(timeout=30) as c:
            r = c.post(gw.url + "/v1/chat/completions",
                       json={"model": "t", "messages": MSG, "stream": True})
        assert time.monotonic() - started < 4  # cut at the idle limit, not the 5 s pause
        gw.recorded(1)
        [d] = gw.decisions()
        assert d["outcome"] == "stream_broken"
        assert b"stream_broken" in r.content.rstrip().split(b"\n\n")[-1]
        assert gw.gw.metrics.direct_writes.value(protocol="openai") > 0

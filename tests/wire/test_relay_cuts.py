"""The relayed stream does not depend on how the upstream's bytes were cut.

The relay takes whole one-line events read in one piece the fast way (the SSE
decoder's fast path; a read that names neither ``usage`` nor ``error`` is passed
on without looking into its events: ADR 0003, "Round 4") and anything else the
general way. Here one upstream stream — content, tool calls, unicode, a
usage-only chunk and ``[DONE]`` — is played by a ``RawServer`` cut in different
ways (one write, one write per event, events split across writes, a byte at a
time), with LF and CRLF endings, through the real gateway to a chat client that
asks for usage and one that does not: every cut gives the client the same
bytes, and the decision the same usage.
"""

from __future__ import annotations

import json

import httpx
import pytest

from humpyard.protocols.sse import SSEDecoder
from tests.support.gateway import running_gateway
from tests.support.rawserver import CLOSE, Pause, RawServer

MSG = [{"role": "user", "content": "hi"}]
HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"connection: close\r\n\r\n")


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    obj = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() \
        + b"\n\n"


EVENTS = [
    _chunk({"role": "assistant"}), _chunk({"content": "h\u00e9llo "}),
    _chunk({"content": "\"w\u00f6rld\" "}),
    _chunk({"tool_calls": [{"index": 0, "id": "t1", "type": "function",
                            "function": {"name": "f", "arguments": "{\"a\":"}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
    _chunk({}, finish="tool_calls"),
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":9,"total_tokens":16}}\n\n',
    b"data: [DONE]\n\n",
]


def _cuts(stream: bytes, events: list[bytes]) -> dict[str, list[bytes | Pause]]:
    gap = Pause(0.01)
    mid = [part for e in events for part in (e[:len(e) // 2], gap, e[len(e) // 2:], gap)]
    return {
        "whole": [stream],
        "per_event": [x for e in events for x in (e, gap)],
        "halves": mid,
        "odd": [stream[i:i + 37] for i in range(0, len(stream), 37)],
        "bytes": [x for i in range(len(stream)) for x in (stream[i:i + 1], Pause(0.0005))],
    }


def _relay(script: list[bytes | Pause], include_usage: bool,
           direct: bool = True) -> tuple[bytes, dict]:
    """The client's bytes and the decision; with ``direct``, the relay must have
    passed some reads directly (``humpyard_stream_direct_writes_total``) when
    the cut's reads come apart in time (then some follow the first content),
    and none without. Without ``include_usage`` the relay drops the usage
    chunk: that read is never direct, the others still are."""
    with RawServer([HEAD, *script, CLOSE]) as up, running_gateway(f"""
direct_relay = {"true" if direct else "false"}
[providers.p]
base_url = "{up.url}"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
""") as gw:
        body: dict = {"model": "t", "messages": MSG, "stream": True}
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        with httpx.Client(timeout=30) as c:
            r = c.post(gw.url + "/v1/chat/completions", json=body)
        assert r.status_code == 200
        gw.recorded(1)
        [d] = gw.decisions()
        writes = gw.gw.metrics.direct_writes.value(protocol="openai")
        if not direct or len(script) == 1:
            assert writes == 0
        elif any(isinstance(x, Pause) for x in script):
            assert writes > 0  # reads apart in time: those after the first content
    return r.content, d


@pytest.mark.parametrize("ending", ["lf", "crlf"])
@pytest.mark.parametrize("include_usage", [True, False])
def test_every_cut_relays_the_same_bytes_and_usage(ending, include_usage):
    events = EVENTS if ending == "lf" else [e.replace(b"\n", b"\r\n") for e in EVENTS]
    stream = b"".join(events)
    seen = {name: _relay(script, include_usage)
            for name, script in _cuts(stream, events).items()}
    old = {name: _relay(script, include_usage, direct=False)
           for name, script in _cuts(stream, events).items() if name != "bytes"}
    reference, decision = seen.pop("bytes")  # every read through the general path
    expected = b"".join(e for e in events if include_usage or b'"usage"' not in e)
    if ending == "crlf":
        # a CRLF cut between its CR and LF loses the LF from the relayed event (the
        # decoder dispatched at the CR): still the same events for every client
        reference, expected = _data(reference), _data(expected)
    assert reference == expected
    assert decision["usage"]["input_tokens"] == 7 and decision["usage"]["output_tokens"] == 9
    for name, (content, d) in seen.items():
        assert (content if ending == "lf" else _data(content)) == reference, name
        assert d["usage"] == decision["usage"], name
        # the direct relay against the relay through the request's task, cut alike
        assert content == old[name][0], name
        assert d["usage"] == old[name][1]["usage"], name
        assert d["usage_estimated"] == old[name][1]["usage_estimated"], name


def _data(stream: bytes) -> list[str]:
    return [e.data for e in SSEDecoder().feed(stream)]

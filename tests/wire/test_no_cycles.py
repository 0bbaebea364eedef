"""The served path leaves no reference cycles behind: once a request is answered,
what it made is freed by reference counting, not left for the garbage collector
(which, with hundreds of streams open, was ~8 % of the gateway's CPU: ADR 0003,
"Garbage collection"). Over real sockets: streamed (the direct relay and the
relay through the request's task) and buffered answers, then a collection that
keeps what it finds (``gc.DEBUG_SAVEALL``) must find none of the objects of a
request. The same holds for a request that opens a new upstream connection, one
whose dial is refused or whose proxy refuses it, one whose upstream breaks (a
reset, bytes that are not HTTP, a stream closed or stalled after its head, or
failing after the early head went out) and one the gateway refuses (no key,
not JSON, a key's 429): a failure must not leave the request's objects, its
exceptions or its frames for the collector (ADR 0030)."""

from __future__ import annotations

import collections
import gc
import socket
import types
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from humpyard.clock import FakeClock
from tests.support.gateway import running_gateway
from tests.support.proxy import ForwardProxy
from tests.support.rawserver import CLOSE, HOLD, RESET, Pause, RawServer
from tests.wire.test_relay_cuts import _chunk

# What one request makes, on the gateway's side (by type name; the test client's
# and the fake upstream's objects are not the gateway's concern).
PER_REQUEST = {"Call", "Recording", "Served", "Relay", "UvicornWire", "_Direct",
               "ResponseParser", "HttpResponseParser", "RequestFacts", "Plan", "Attempt",
               "RequestResponseCycle"}


def _config(url: str, direct: bool, provider: str = "") -> str:
    return f"""
direct_relay = {"true" if direct else "false"}
[providers.p]
base_url = "{url}"
{provider}
[targets.t]
endpoints = [{{ provider = "p", model = "m", price = {{ input = 1, output = 2 }} }}]
"""


WORDS = [_chunk({"role": "assistant"}), *(_chunk({"content": f"word{i} "}) for i in range(4)),
         _chunk({}, finish="stop"),
         b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}'
         b"\n\n", b"data: [DONE]\n\n"]
BUFFERED = (b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{'
            b'"index":0,"message":{"role":"assistant","content":"an answer"},'
            b'"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":2,'
            b'"total_tokens":9}}')


def _answer(n: int) -> list[bytes | Pause]:
    """Streamed (the even requests: a read per event, so the direct relay passes
    some) and buffered answers, on one keep-alive connection."""
    if n % 2:
        return [b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%b" % (len(BUFFERED), BUFFERED)]
    out: list[bytes | Pause] = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                b"transfer-encoding: chunked\r\n\r\n"]
    for e in WORDS:
        out += [b"%x\r\n%b\r\n" % (len(e), e), Pause(0.005)]
    return [*out, b"0\r\n\r\n"]


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "through_the_task"])
def test_requests_leave_no_cycles(direct: bool, saved_garbage: list[object]) -> None:
    with RawServer(_answer) as up, running_gateway(_config(up.url + "/v1", direct)) as gw, \
            httpx.Client(timeout=10) as c:
        def ask(stream: bool) -> None:
            body = {"model": "t", "stream": stream,
                    "messages": [{"role": "user", "content": "hi"}]}
            if stream:
                body["stream_options"] = {"include_usage": True}
            r = c.post(gw.url + "/v1/chat/completions", json=body)
            assert r.status_code == 200 and ("word3" if stream else "an answer") in r.text

        ask(True)  # the first request opens the connections
        ask(False)
        gw.recorded(2)
        gc.collect()
        saved_garbage.clear()
        for _ in range(5):
            ask(True)
            ask(False)
        gw.recorded(12)
        if direct:
            assert gw.gw.metrics.direct_writes.value(protocol="openai") > 0
        gc.collect()
        left = collections.Counter(type(o).__name__ for o in saved_garbage
                                   if type(o).__name__ in PER_REQUEST)
        assert not left, f"left for the collector: {dict(left)}"


# What opening one upstream connection made for the collector when it raced its
# addresses (``asyncio.staggered``): tasks, their coroutines, futures and the
# cancellations they carry, by type name.
PER_DIAL = {"Task", "Future", "CancelledError", "TimerHandle", "coroutine"}


def _the_gateways(garbage: list[object]) -> collections.Counter[str]:
    """What of a collection's garbage is the gateway's: a request's or a dial's
    objects, any exception, and any frame of the gateway's code."""
    return collections.Counter(
        type(o).__name__ for o in garbage
        if isinstance(o, BaseException) or type(o).__name__ in PER_DIAL | PER_REQUEST
        or (isinstance(o, types.FrameType) and "humpyard" in o.f_code.co_filename))


def _leaves_nothing(ask: Callable[[], object], saved_garbage: list[object],
                    recorded: Callable[[int], object] | None = None, times: int = 5) -> None:
    """``ask`` once (connections, caches), then ``times`` more: the collection after
    them holds nothing of the gateway's (``recorded(n)``: wait until n requests
    are in the record, so the last one's recording is done too)."""
    ask()
    if recorded is not None:
        recorded(1)
    gc.collect()
    saved_garbage.clear()
    for _ in range(times):
        ask()
    if recorded is not None:
        recorded(1 + times)
    gc.collect()
    left = _the_gateways(saved_garbage)
    assert not left, f"left for the collector: {dict(left)}"


def test_new_upstream_connections_leave_no_cycles(saved_garbage: list[object]) -> None:
    """Each answer says ``connection: close``, so the gateway dials again for every
    request (an IP literal: one address to try, nothing to race)."""
    def answer(n: int) -> list[bytes | Pause]:
        return [b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n%b" % (len(BUFFERED), BUFFERED)]
    with RawServer(answer) as up, running_gateway(_config(up.url + "/v1", True)) as gw, \
            httpx.Client(timeout=10) as c:
        def ask() -> None:
            r = c.post(gw.url + "/v1/chat/completions",
                       json={"model": "t", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200 and "an answer" in r.text
        _leaves_nothing(ask, saved_garbage, gw.recorded)
        assert len(up.requests) == 6  # one connection each


def test_refused_dials_leave_no_cycles(saved_garbage: list[object]) -> None:
    """An upstream nobody listens at: each request's dial is refused (one address),
    answered 502 and recorded; neither the refusal nor the frames it passed
    through are left for the collector."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # bound and closed: nothing listens there
    with running_gateway(_config(f"http://127.0.0.1:{port}/v1", True)) as gw, \
            httpx.Client(timeout=10) as c:
        def ask() -> None:
            r = c.post(gw.url + "/v1/chat/completions",
                       json={"model": "t", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 502
        _leaves_nothing(ask, saved_garbage, gw.recorded)


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_proxys_refusal_leaves_no_cycles(scheme: str, saved_garbage: list[object]) -> None:
    """A forward proxy that wants other credentials (407): to ``CONNECT`` for an https
    upstream, to the request itself for an http one. The ``ProxyFailure`` was raised
    as its own cause (``raise e from e``) when the dial passed it on, which tied it,
    its frames and the request's attempt into a cycle per request."""
    with ForwardProxy(credentials=("u", "right")) as px, \
            running_gateway(_config(f"{scheme}://127.0.0.1:9/v1", True,
                                    f'proxy = "{px.url_with("u", "wrong")}"'),
                            own_server=True) as gw, httpx.Client(timeout=10) as c:
        def ask() -> None:
            r = c.post(gw.url + "/v1/chat/completions",
                       json={"model": "t", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 502 and "answered 407" in r.text
        _leaves_nothing(ask, saved_garbage, gw.recorded, times=4)


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
               b"transfer-encoding: chunked\r\n\r\n")
TWO_EVENTS = [STREAM_HEAD, *(b"%x\r\n%b\r\n" % (len(e), e) for e in WORDS[:2])]
BROKEN = {
    "reset_before_the_head": ([RESET], 502),
    "not_http": ([b"NOT HTTP AT ALL\r\n\r\n", CLOSE], 502),
    "closed_mid_stream": ([*TWO_EVENTS, CLOSE], 200),
    "stalled_mid_stream": ([*TWO_EVENTS, HOLD], 200),
}


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "through_the_task"])
@pytest.mark.parametrize("script, status", BROKEN.values(), ids=list(BROKEN))
def test_broken_upstreams_leave_no_cycles(script: list[bytes | str], status: int,
                                          direct: bool, saved_garbage: list[object]) -> None:
    """An upstream that fails the request (before its head, or in the middle of a
    stream after the head went out): the failure an upstream connection keeps and
    raises, the wait that timed out and the parser it was feeding are freed with
    the request, not left for the collector."""
    with RawServer(lambda n: script) as up, \
            running_gateway(_config(up.url + "/v1", direct, "idle_timeout_secs = 0.3"),
                            own_server=True) as gw, \
            httpx.Client(timeout=10) as c:
        def ask() -> None:
            r = c.post(gw.url + "/v1/chat/completions",
                       json={"model": "t", "stream": True,
                             "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == status
        _leaves_nothing(ask, saved_garbage, gw.recorded, times=4)


REFUSED = {
    "no_key": ({}, {"model": "t", "messages": [{"role": "user", "content": "hi"}]}, 401),
    "not_json": ({"authorization": "Bearer k-123", "content-type": "application/json"},
                 b"{not json", 400),
    "over_the_keys_rpm": ({"authorization": "Bearer k-123"},
                          {"model": "t", "messages": [{"role": "user", "content": "hi"}]}, 429),
}


@pytest.mark.parametrize("headers, body, status", REFUSED.values(), ids=list(REFUSED))
def test_refused_requests_leave_no_cycles(headers: dict[str, str], body: dict[str, Any] | bytes,
                                          status: int, saved_garbage: list[object]) -> None:
    """What a flood of requests the gateway refuses (no key, a body that is not
    JSON, a key past its ``rpm_limit``) costs is freed with each answer: the
    refusal is not held by a frame its traceback holds, which kept the request's
    task, call and uvicorn cycle for the collector per 429."""
    config = _config("http://127.0.0.1:9/v1", True) + """
[keys.k]
key_env = "K"
rpm_limit = 1
"""
    with running_gateway(config, env={"K": "k-123"}, own_server=True,
                         clock=FakeClock()) as gw, httpx.Client(timeout=10) as c:
        def ask(expected: int | None = status) -> None:
            if isinstance(body, bytes):
                r = c.post(gw.url + "/v1/chat/completions", content=body, headers=headers)
            else:
                r = c.post(gw.url + "/v1/chat/completions", json=body, headers=headers)
            assert expected is None or r.status_code == expected
        ask(None)  # past the rpm limit from here: the clock stays in its minute
        _leaves_nothing(ask, saved_garbage)


def test_a_stream_failed_after_its_early_head_leaves_no_cycles(
        saved_garbage: list[object]) -> None:
    """The upstream is slow, so the 200 head and comments go out first
    (``stream_first_heartbeat_secs``), then it resets: the stream ends with the
    protocol's error event, and the failure told in it is let go with the request."""
    with RawServer(lambda n: [Pause(0.2), RESET]) as up, \
            running_gateway(_config(up.url + "/v1", True)
                            + "\n[router]\nstream_first_heartbeat_secs = 0.05\n",
                            own_server=True) as gw, httpx.Client(timeout=10) as c:
        def ask() -> None:
            r = c.post(gw.url + "/v1/chat/completions",
                       json={"model": "t", "stream": True,
                             "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200 and ": keep-alive" in r.text
            assert '"code": "upstream_error"' in r.text
        _leaves_nothing(ask, saved_garbage, gw.recorded, times=3)

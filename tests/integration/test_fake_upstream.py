"""The test servers on real sockets: FakeUpstream steps, ServerThread, Listener.

Each FakeUpstream step is checked with httpx (and the OpenAI SDK where the
chunk format matters); ServerThread is checked serving the simulator; the
``Listener`` the threaded servers accept with is checked closing mid-accept.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from humpyard.simulate import create_simulator_app
from tests.support import (
    FakeUpstream,
    ServerThread,
    closed_port_url,
    delay,
    fail_before_content,
    ok,
    reset,
    stall,
    status,
    stream_error,
    stream_then_fail,
    stream_then_stall,
    tool_call,
)
from tests.support.listener import Listener

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
STREAM = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}


@pytest.fixture
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture
def client(up: FakeUpstream) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=up.url, timeout=2.0) as c:
        yield c


def sse_data(lines: Iterator[str], into: list[str] | None = None) -> list[str]:
    """The ``data:`` payloads; with ``into``, each is kept even if the stream then fails."""
    out = [] if into is None else into
    for line in lines:
        if line.startswith("data: "):
            out.append(line[6:])
    return out


def test_default_ok_and_requests_are_recorded(up: FakeUpstream, client: httpx.Client) -> None:
    r = client.post("/chat/completions", json=CHAT, headers={"X-Trace": "t1"})
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "hello"
    assert r.json()["model"] == "m"
    method, path, headers, body = up.requests[0]
    assert (method, path, body) == ("POST", "/v1/chat/completions", CHAT)
    assert headers["x-trace"] == "t1"
    assert up.url == up.origin + "/v1"


def test_steps_are_consumed_in_order_then_default(up: FakeUpstream,
                                                  client: httpx.Client) -> None:
    up.script(status(500), ok("second", usage={"prompt_tokens": 7, "completion_tokens": 1}))
    assert up.pending == 2
    assert client.post("/chat/completions", json=CHAT).status_code == 500
    second = client.post("/chat/completions", json=CHAT).json()
    assert second["choices"][0]["message"]["content"] == "second"
    assert second["usage"] == {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}
    assert client.post("/chat/completions", json=CHAT).json()["choices"][0]["message"][
        "content"] == "hello"
    assert up.pending == 0 and len(up.requests_to("/v1/chat/completions", "POST")) == 3


def test_status_with_headers_and_dict_or_text_body(up: FakeUpstream,
                                                   client: httpx.Client) -> None:
    up.script(status(429, {"error": {"message": "slow down"}}, {"Retry-After": "3"}),
              status(502, "<html>bad gateway</html>"),
              status(401))
    r = client.post("/chat/completions", json=STREAM)  # a streamed request gets the status too
    assert (r.status_code, r.headers["retry-after"]) == (429, "3")
    assert r.json() == {"error": {"message": "slow down"}}
    r = client.post("/chat/completions", json=CHAT)
    assert r.status_code == 502 and r.text == "<html>bad gateway</html>"
    assert r.headers["content-type"].startswith("text/plain")
    r = client.post("/chat/completions", json=CHAT)
    assert r.json()["error"]["type"] == "authentication_error"


def test_ok_streams_given_chunks_with_usage(up: FakeUpstream, client: httpx.Client) -> None:
    up.script(ok(["Hel", "lo ", "world"]))
    with client.stream("POST", "/chat/completions", json=STREAM) as r:
        data = sse_data(r.iter_lines())
    assert r.headers["content-type"] == "text/event-stream"
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    contents = [c["choices"][0]["delta"].get("content") for c in chunks[1:4]]
    assert contents == ["Hel", "lo ", "world"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2


def test_tool_call_step_through_the_openai_sdk(up: FakeUpstream) -> None:
    up.script(tool_call("search", {"q": "weather in Paris"}),
              tool_call("search", '{"q": "x"}'))
    with openai.OpenAI(base_url=up.url, api_key="k", max_retries=0) as sdk:
        buffered = sdk.chat.completions.create(**CHAT)
        with sdk.chat.completions.create(**STREAM) as stream:
            chunks = list(stream)
    call = buffered.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "search", {"q": "weather in Paris"})
    fragments = [c.choices[0].delta.tool_calls[0].function.arguments
                 for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert fragments[0] == "" and len(fragments) >= 3
    assert json.loads("".join(fragments)) == {"q": "x"}
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert up.requests[0].headers["authorization"] == "Bearer k"


def test_reset_hard_and_soft(up: FakeUpstream, client: httpx.Client) -> None:
    up.script(reset(), reset(hard=False))
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        client.post("/chat/completions", json=CHAT)
    with pytest.raises(httpx.RemoteProtocolError):
        client.post("/chat/completions", json=CHAT)
    assert client.post("/chat/completions", json=CHAT).status_code == 200
    assert len(up.requests) == 3


def test_stall_times_out_and_does_not_block_shutdown() -> None:
    upstream = FakeUpstream().start()
    upstream.script(stall())
    with httpx.Client(timeout=0.2) as c, pytest.raises(httpx.ReadTimeout):
        c.post(upstream.url + "/chat/completions", json=CHAT)
    started = time.monotonic()
    upstream.stop()
    upstream.stop()  # idempotent
    assert time.monotonic() - started < 1.0


def test_stream_then_fail_sends_content_then_drops(up: FakeUpstream,
                                                   client: httpx.Client) -> None:
    up.script(stream_then_fail(["first ", "second"]), stream_then_fail(["x"]))
    seen: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        with client.stream("POST", "/chat/completions", json=STREAM) as r:
            assert r.status_code == 200
            sse_data(r.iter_lines(), into=seen)
    contents = [json.loads(d)["choices"][0]["delta"].get("content") for d in seen]
    assert contents == ["", "first ", "second"]
    with pytest.raises(httpx.RemoteProtocolError):  # a buffered request gets half a body
        client.post("/chat/completions", json=CHAT)


def test_stream_then_stall_times_out_after_content(up: FakeUpstream) -> None:
    up.script(stream_then_stall(["partial"]))
    seen: list[str] = []
    with httpx.Client(timeout=0.2) as c, pytest.raises(httpx.ReadTimeout):
        with c.stream("POST", up.url + "/chat/completions", json=STREAM) as r:
            sse_data(r.iter_lines(), into=seen)
    assert len(seen) == 2


def test_fail_before_content_sends_only_the_role_chunk(up: FakeUpstream,
                                                       client: httpx.Client) -> None:
    up.script(fail_before_content(), fail_before_content())
    seen: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        with client.stream("POST", "/chat/completions", json=STREAM) as r:
            sse_data(r.iter_lines(), into=seen)
    assert [json.loads(d)["choices"][0]["delta"] for d in seen] == [
        {"role": "assistant", "content": "", "refusal": None}]
    with pytest.raises(httpx.RemoteProtocolError):
        client.post("/chat/completions", json=CHAT)


def test_stream_error_event(up: FakeUpstream, client: httpx.Client) -> None:
    up.script(stream_error("overloaded", "server_error"))
    with client.stream("POST", "/chat/completions", json=STREAM) as r:
        data = sse_data(r.iter_lines())
    assert r.status_code == 200 and len(data) == 2
    assert json.loads(data[1]) == {"error": {"message": "overloaded", "type": "server_error",
                                             "code": None}}


def test_delay_then_step(up: FakeUpstream, client: httpx.Client) -> None:
    up.script(delay(0.15, then=status(503)))
    started = time.monotonic()
    assert client.post("/chat/completions", json=CHAT).status_code == 503
    assert time.monotonic() - started >= 0.15


def test_health_status_is_settable_and_consumes_no_step(up: FakeUpstream,
                                                        client: httpx.Client) -> None:
    up.script(status(500))
    assert client.get(up.origin + "/health").json() == {"status": "ok"}
    up.health_status = 503
    assert client.get(up.origin + "/health").status_code == 503
    up.health_step = stall()
    with pytest.raises(httpx.ReadTimeout):
        client.get(up.origin + "/health", timeout=0.1)
    assert up.pending == 1


def test_concurrent_requests_and_wait_for_requests(up: FakeUpstream) -> None:
    up.script(*[delay(0.05) for _ in range(8)])
    results: list[int] = []

    def call() -> None:
        with httpx.Client(timeout=2.0) as c:
            results.append(c.post(up.url + "/chat/completions", json=CHAT).status_code)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    assert up.wait_for_requests(8, timeout=2.0)
    for t in threads:
        t.join()
    assert results == [200] * 8
    assert not up.wait_for_requests(9, timeout=0.01)


def test_closed_port_url_refuses_connections() -> None:
    with httpx.Client(timeout=1.0) as c, pytest.raises(httpx.ConnectError):
        c.post(closed_port_url() + "/chat/completions", json=CHAT)


def test_server_thread_serves_the_simulator_to_the_sdk() -> None:
    before = set(threading.enumerate())  # another test's thread may end meanwhile
    with ServerThread(create_simulator_app("ok")) as srv:
        assert srv.url == f"http://127.0.0.1:{srv.port}"
        with openai.OpenAI(base_url=srv.url + "/v1", api_key="k", max_retries=0) as sdk:
            with sdk.chat.completions.create(**STREAM) as stream:
                chunks = list(stream)
            models = sdk.models.list()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "[sim:m] you said: hi"
    assert chunks[-1].usage is not None
    assert [m.id for m in models.data] == ["sim-model"]
    assert [t for t in threading.enumerate() if t not in before] == []  # none left behind


def test_a_listener_closed_mid_accept_closes_every_accepted_connection() -> None:
    """Connections accepted in the loop tick before ``close()`` are closed by it.

    ``asyncio.Server`` leaks exactly these (CPython gh-109564): their transports
    stay open until the GC finds them, as a ResourceWarning in a later test.
    """
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def main() -> list[socket.socket]:
        listener = Listener(handler).start()
        clients = [socket.create_connection(("127.0.0.1", listener.port), timeout=5)
                   for _ in range(3)]  # loopback: connected (in the backlog) on return
        await asyncio.sleep(0)  # next tick: the listening socket's callback accepts them
        await asyncio.sleep(0)  # and close() comes before their handlers' first step
        await listener.close()
        return clients

    clients = asyncio.run(main())
    gc.collect()  # a transport left open warns now, in this test
    for c in clients:
        with c:
            assert c.recv(1) == b""  # closed by the server (the timeout is the deadline)

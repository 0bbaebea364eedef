"""A stream whose first content is slow gets its 200 head and SSE comment heartbeats
from the first second (issue 26: 17 s of upstream delay gave the client 17 s of
silence; ``[router] stream_first_heartbeat_secs``, ADR 0020).

Over real sockets: the gateway on loopback in front of scripted fake upstreams, read
with httpx (to see the comments and when they come) and with the official openai and
anthropic SDKs, which must still parse the stream. Hold-back still holds after the
head went out early: a target that fails before its first content is failed over
(the client only saw comments), and when every target fails the stream ends with
the protocol's error event while the decision records the real status.
"""

from __future__ import annotations

import json
import socket
import time

import anthropic
import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.steps import delay, fail_before_content, ok, stall, status

MSG = [{"role": "user", "content": "hello"}]
BEAT = ": keep-alive"


def two_targets(a: str, b: str, first_heartbeat: float | None = None) -> str:
    router = ("" if first_heartbeat is None
              else f"[router]\nstream_first_heartbeat_secs = {first_heartbeat}\n")
    return f"""
[providers.a]
base_url = "{a}"
[providers.b]
base_url = "{b}"
[targets.first]
endpoints = [{{ provider = "a", model = "ma" }}]
[targets.second]
endpoints = [{{ provider = "b", model = "mb" }}]
[routes.r]
type = "passthrough"
targets = ["first", "second"]
[health]
failure_threshold = 0
{router}"""


@pytest.fixture
def ups():
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def read_lines(url: str, path: str, body: dict) -> tuple[httpx.Headers, list[tuple[float, str]]]:
    """The answer's headers and every line with the seconds since the request."""
    lines: list[tuple[float, str]] = []
    started = time.monotonic()
    with httpx.Client(timeout=30) as c, c.stream("POST", url + path, json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            lines.append((time.monotonic() - started, line))
        return r.headers, lines


def first_at(lines: list[tuple[float, str]], pred) -> float:
    return next(t for t, line in lines if pred(line))


@pytest.mark.parametrize("path, body, content", [
    ("/v1/chat/completions", {"model": "r", "messages": MSG, "stream": True}, '"content":"hel'),
    ("/v1/messages", {"model": "r", "messages": MSG, "stream": True, "max_tokens": 64},
     '"text":"hel'),
    ("/v1/responses", {"model": "r", "input": "hello", "stream": True}, '"delta":"hel'),
])
def test_a_slow_first_content_gets_the_head_and_comments_within_the_first_seconds(
        ups, path, body, content):
    a, b = ups
    a.script(delay(3, ok(["hel", "lo"])))
    with running_gateway(two_targets(a.url, b.url)) as gw:
        headers, lines = read_lines(gw.url, path, body)
    beat = first_at(lines, lambda line: line == BEAT)
    text = first_at(lines, lambda line: content in line)
    assert beat < 2.5 < text  # the default: the first comment after 1 s, not after 3
    assert sum(line == BEAT for _, line in lines) >= 2  # repeated until the content
    assert headers["x-humpyard-request-id"].startswith("req_")
    assert headers["x-humpyard-route"] == "r"
    assert "x-humpyard-target" not in headers  # not known when the head went out


def test_the_sdks_parse_a_stream_that_starts_with_comments(ups):
    a, b = ups
    a.script(delay(1.6, ok(["hel", "lo"])), delay(1.6, ok(["hel", "lo"])),
             delay(1.6, ok(["hel", "lo"])))
    with running_gateway(two_targets(a.url, b.url, first_heartbeat=0.3)) as gw:
        oa = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
        chunks = oa.chat.completions.create(model="r", messages=MSG, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hello"
        events = oa.responses.create(model="r", input="hello", stream=True)
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") \
            == "hello"
        an = anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0)
        with an.messages.stream(model="r", messages=MSG, max_tokens=64) as s:
            assert "".join(s.text_stream) == "hello"


def test_a_target_failing_after_a_heartbeat_is_failed_over(ups):
    a, b = ups
    a.script(delay(2, status(500)))
    b.script(ok(["from ", "second"]))
    with running_gateway(two_targets(a.url, b.url)) as gw:
        oa_lines = read_lines(gw.url, "/v1/chat/completions",
                              {"model": "r", "messages": MSG, "stream": True})[1]
        gw.recorded(1)
        [d] = gw.decisions()
    text = "".join(line for _, line in oa_lines)
    assert first_at(oa_lines, lambda line: line == BEAT) < 2  # before the failure
    assert '"content":"from "' in text and '"content":"second"' in text
    assert '"error"' not in text
    assert d["status"] == 200 and d["target"] == "second" and d["outcome"] == "ok"


def test_a_target_broken_before_content_after_a_heartbeat_is_failed_over(ups):
    a, b = ups
    a.script(delay(1.5, fail_before_content()))
    b.script(ok(["from ", "second"]))
    with running_gateway(two_targets(a.url, b.url)) as gw:
        oa = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
        chunks = oa.chat.completions.create(model="r", messages=MSG, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks
                       if c.choices) == "from second"


@pytest.mark.parametrize("path, body, error", [
    ("/v1/chat/completions", {"model": "r", "messages": MSG, "stream": True},
     'data: {"error"'),
    ("/v1/messages", {"model": "r", "messages": MSG, "stream": True, "max_tokens": 64},
     "event: error"),
    ("/v1/responses", {"model": "r", "input": "hello", "stream": True},
     "event: response.failed"),
])
def test_every_target_failing_after_a_heartbeat_ends_with_an_error_event(
        ups, path, body, error):
    a, b = ups
    a.script(delay(1.5, status(500)))
    b.script(status(503))
    with running_gateway(two_targets(a.url, b.url)) as gw:
        headers, lines = read_lines(gw.url, path, body)
        gw.recorded(1)
        [d] = gw.decisions()
    assert lines[0][1] == BEAT
    assert any(line.startswith(error) for _, line in lines), lines
    assert d["request_id"] == headers["x-humpyard-request-id"]
    assert d["status"] >= 500 and d["outcome"] == "failed"  # the real status, not 200
    assert [x["target"] for x in d["attempts"]] == ["first", "second"]


def test_every_target_failing_after_a_heartbeat_raises_in_the_sdks(ups):
    a, b = ups
    a.script(delay(0.6, status(500)), delay(0.6, status(500)))
    b.script(status(503), status(503))
    with running_gateway(two_targets(a.url, b.url, first_heartbeat=0.2)) as gw:
        oa = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
        with pytest.raises(openai.APIError):
            for _ in oa.chat.completions.create(model="r", messages=MSG, stream=True):
                pass
        an = anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0)
        with pytest.raises(anthropic.APIError):
            with an.messages.stream(model="r", messages=MSG, max_tokens=64) as s:
                for _ in s.text_stream:
                    pass


def test_a_bedrock_stream_failing_after_a_heartbeat_says_the_real_status(ups):
    """The Bedrock format's closing exception said ``originalStatusCode`` 502 whatever
    the failure, while its decision recorded the real one (here the last target's 429)."""
    from botocore.eventstream import EventStreamBuffer
    a, b = ups
    a.script(delay(0.6, status(429)))
    b.script(status(429))
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": MSG}
    with running_gateway(two_targets(a.url, b.url, first_heartbeat=0.2)) as gw, \
            httpx.Client(timeout=30) as c:
        raw = c.post(gw.url + "/model/r/invoke-with-response-stream", json=body).content
        gw.recorded(1)
        [d] = gw.decisions()
    frames = EventStreamBuffer()
    frames.add_data(raw)
    [failure] = [f for f in frames if f.headers.get(":message-type") == "exception"]
    assert failure.headers[":exception-type"] == "modelStreamErrorException"
    assert json.loads(failure.payload)["originalStatusCode"] == d["status"] == 429


def test_a_fast_stream_sends_its_target_headers_and_no_comment(ups):
    a, b = ups
    a.script(ok(["hel", "lo"]))
    with running_gateway(two_targets(a.url, b.url)) as gw:
        headers, lines = read_lines(gw.url, "/v1/chat/completions",
                                    {"model": "r", "messages": MSG, "stream": True})
    assert headers["x-humpyard-target"] == "first"
    assert BEAT not in [line for _, line in lines]


def test_zero_switches_the_early_head_off(ups):
    a, b = ups
    a.script(delay(1.5, status(500)))
    b.script(status(503))
    with running_gateway(two_targets(a.url, b.url, first_heartbeat=0)) as gw, \
            httpx.Client(timeout=30) as c:
        r = c.post(gw.url + "/v1/chat/completions",
                   json={"model": "r", "messages": MSG, "stream": True})
    assert r.status_code >= 500  # held back to the end: the real status


def test_a_client_leaving_during_the_comments_stops_the_upstream_and_is_recorded(ups):
    # After the early head the request is still in its hold-back: a client that leaves
    # then is recorded 499 at once and the upstream call is closed (ADR 0012).
    a, b = ups
    a.script(stall())
    body = b'{"model":"r","stream":true,"messages":[{"role":"user","content":"hi"}]}'
    with running_gateway(two_targets(a.url, b.url, first_heartbeat=0.2)) as gw:
        host, port = gw.url.split("//")[1].split(":")
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))
        got = b""
        deadline = time.monotonic() + 10
        while got.count(b": keep-alive") < 2 and time.monotonic() < deadline:
            got += sock.recv(65536)
        assert got.startswith(b"HTTP/1.1 200") and b"x-humpyard-request-id" in got
        sock.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            gw.gw.writer.flush(1)
            busy = [c for c in gw.gw.client.fast.connections if not c.is_idle()]
            if gw.decisions() and not busy:
                break
            time.sleep(0.05)
        [d] = gw.decisions()
        assert d["status"] == 499 and d["outcome"] == "client_closed"
        assert [c for c in gw.gw.client.fast.connections if not c.is_idle()] == []
        assert b.requests_to("/v1/chat/completions") == []  # nothing tried after it left

"""Anthropic Messages end to end: the official ``anthropic`` SDK against the gateway.

The gateway runs on loopback in front of scripted OpenAI-compatible fake
upstreams; the SDK talks to ``/v1/messages`` as Claude Code would. Each test
checks both sides: what the SDK parsed, and what the upstream received.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import pytest

from humpyard.planning.estimate import estimate_prompt_tokens
from humpyard.protocols import sse
from humpyard.protocols.anthropic import decode_request
from humpyard.protocols.chat_chunks import FRAGMENTS_DROPPED
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway, two_targets
from tests.support.steps import (
    Exchange,
    Step,
    fail_before_content,
    ok,
    status,
    stream_then_fail,
    tool_call,
)

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]},
}
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGA"
         "WjR9awAAAABJRU5ErkJggg==")  # a 1x1 PNG



@pytest.fixture
def ups() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


@pytest.fixture
def gw(ups: tuple[FakeUpstream, FakeUpstream]) -> Iterator[Running]:
    a, b = ups
    with running_gateway(two_targets(a.url, b.url)) as g:
        yield g


@contextmanager
def sdk(gw: Running, api_key: str = "unused", **kw: Any) -> Iterator[anthropic.Anthropic]:
    """An SDK client for ``gw``; no retries, so each call is one gateway request."""
    with anthropic.Anthropic(base_url=gw.url, api_key=api_key, max_retries=0, timeout=30,
                             **kw) as client:
        yield client


def upstream_bodies(up: FakeUpstream) -> list[dict[str, Any]]:
    return [r.json for r in up.requests_to(CHAT)]


def completion(*, text: str, finish_reason: str, usage: dict[str, int] | None = None) -> dict:
    """A buffered OpenAI chat completion, for answers ``ok()`` cannot shape."""
    return {
        "id": "chatcmpl-custom", "object": "chat.completion", "created": 1, "model": "ma",
        "choices": [{"index": 0, "finish_reason": finish_reason,
                     "message": {"role": "assistant", "content": text}}],
        "usage": usage or {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


# -- plain messages ---------------------------------------------------------------


def test_plain_message(gw, ups):
    a, _ = ups
    a.script(ok("hello there", usage={"prompt_tokens": 12, "completion_tokens": 2}))
    with sdk(gw) as client:
        raw = client.messages.with_raw_response.create(
            model="r", max_tokens=64, system="be brief", messages=HELLO)
        msg = raw.parse()
    assert msg.type == "message" and msg.role == "assistant"
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == "hello there"
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert msg.usage.input_tokens == 12 and msg.usage.output_tokens == 2
    assert msg.model == "r"
    assert msg.id.startswith("msg_")
    assert raw.headers["x-humpyard-route"] == "r"
    assert raw.headers["x-humpyard-target"] == "first"
    assert raw.headers["x-humpyard-provider"] == "a"
    assert raw.headers["x-humpyard-request-id"].startswith("req_")
    [sent] = upstream_bodies(a)
    assert sent["model"] == "ma"
    assert sent["max_tokens"] == 64
    assert sent["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "hello"}]


def test_sdk_headers_are_accepted_and_credentials_not_forwarded(gw, ups):
    a, _ = ups
    with sdk(gw, api_key="client-secret") as client:
        raw = client.messages.with_raw_response.create(
            model="r", max_tokens=16, messages=HELLO,
            extra_headers={"anthropic-version": "2023-06-01",
                           "anthropic-beta": "prompt-caching-2024-07-31",
                           "x-api-key": "client-secret-2"})
        assert raw.http_request.headers["anthropic-version"] == "2023-06-01"
        assert raw.parse().content[0].text == "hello"
    [req] = a.requests_to(CHAT)
    assert "client-secret" not in json.dumps(req.headers)
    assert "anthropic-version" not in req.headers


def test_claude_code_shaped_request(gw, ups):
    """What Claude Code sends: ``?beta=true``, beta headers, cache_control on
    blocks, a system block list, metadata, thinking and fields the upstream
    cannot take. All are accepted; the upstream gets a plain OpenAI body."""
    a, _ = ups
    cached = {"type": "ephemeral"}
    with sdk(gw) as client:
        msg = client.messages.create(
            model="r", max_tokens=256,
            system=[{"type": "text", "text": "You are Claude Code.", "cache_control": cached},
                    {"type": "text", "text": "Be careful."}],
            messages=[{"role": "user", "content": [
                {"type": "text", "text": "hi", "cache_control": cached}]}],
            tools=[{**WEATHER_TOOL, "cache_control": cached}],
            metadata={"user_id": "user_abc"},
            thinking={"type": "adaptive", "display": "summarized"},
            output_config={"effort": "high"},
            cache_control=cached,
            extra_query={"beta": "true"},
            extra_headers={"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
                           "x-app": "cli"},
            extra_body={"temperature": 1, "context_management": {"edits": []}},
        )
    assert msg.content[0].text == "hello"
    [req] = a.requests_to(CHAT)
    sent = req.json
    assert sent["messages"] == [
        {"role": "system", "content": "You are Claude Code.\nBe careful."},
        {"role": "user", "content": "hi"}]
    assert "user" not in sent and sent["temperature"] == 1  # user_id stays at the gateway
    assert sent["reasoning_effort"] == "high"  # output_config.effort
    assert "cache_control" not in json.dumps(sent)
    assert not {"thinking", "context_management", "metadata", "output_config"} & set(sent)
    assert "anthropic-beta" not in req.headers


def test_claude_code_session_header_is_recorded(gw, ups):
    with sdk(gw, default_headers={"x-claude-code-session-id": "sess-0123"}) as client:
        client.messages.create(model="r", max_tokens=16, messages=HELLO)
    [decision] = gw.decisions()
    assert decision["session_id"] == "sess-0123"
    assert decision["route"] == "r" and decision["target"] == "first"


# -- tools ---------------------------------------------------------------------------


def test_tool_use_conversation(gw, ups):
    a, _ = ups
    a.script(tool_call("get_weather", {"city": "Oslo"}, call_id="call_1"),
             ok("It is sunny in Oslo and raining in Bergen."))
    with sdk(gw) as client:
        first = client.messages.create(
            model="r", max_tokens=128, tools=[WEATHER_TOOL],
            messages=[{"role": "user", "content": "Weather in Oslo?"}])
        assert first.stop_reason == "tool_use"
        [use] = [b for b in first.content if b.type == "tool_use"]
        assert use.id == "call_1" and use.name == "get_weather"
        assert use.input == {"city": "Oslo"}

        history = [
            {"role": "user", "content": "Weather in Oslo and Bergen?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "call_1", "name": "get_weather",
                 "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "call_2", "name": "get_weather",
                 "input": {"city": "Bergen"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "call_2",
                 "content": [{"type": "text", "text": "rain"}], "is_error": False},
                {"type": "text", "text": "Summarise, please."},
            ]},
        ]
        second = client.messages.create(model="r", max_tokens=128, tools=[WEATHER_TOOL],
                                        tool_choice={"type": "auto"}, messages=history)
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == "It is sunny in Oslo and raining in Bergen."

    first_sent, second_sent = upstream_bodies(a)
    assert first_sent["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": WEATHER_TOOL["input_schema"]}}]
    msgs = second_sent["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "user"]
    assistant = msgs[1]
    assert assistant["content"] == "Let me check."
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in assistant["tool_calls"]] == [
        ("call_1", "get_weather", {"city": "Oslo"}),
        ("call_2", "get_weather", {"city": "Bergen"})]
    assert msgs[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    assert msgs[3] == {"role": "tool", "tool_call_id": "call_2", "content": "rain"}
    assert msgs[4] == {"role": "user", "content": "Summarise, please."}
    assert second_sent["tool_choice"] == "auto"


def test_streamed_tool_use_reassembles_input(gw, ups):
    a, _ = ups
    args = {"city": "Trondheim", "units": "celsius", "days": [1, 2, 3]}
    a.script(tool_call("get_weather", args, call_id="call_s"))
    with sdk(gw) as client, client.messages.stream(
            model="r", max_tokens=128, tools=[WEATHER_TOOL],
            messages=[{"role": "user", "content": "Weather?"}]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    deltas = [e.delta.partial_json for e in events
              if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert len(deltas) >= 2 and json.loads("".join(deltas)) == args
    assert final.stop_reason == "tool_use"
    [use] = final.content
    assert use.type == "tool_use" and use.id == "call_s" and use.name == "get_weather"
    assert use.input == args
    [sent] = upstream_bodies(a)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


@dataclass(frozen=True)
class TextThenTwoToolCalls(Step):
    """Streamed: text, then two parallel tool calls whose arguments come in fragments."""

    async def respond(self, ex: Exchange) -> bool:
        chunks = ex.chunks()
        await ex.start_stream()
        await ex.event(chunks.role())
        await ex.event(chunks.content("Checking both."))
        for i, (call_id, city) in enumerate([("call_a", "Oslo"), ("call_b", "Bergen")]):
            await ex.event(chunks.delta({"tool_calls": [{
                "index": i, "id": call_id, "type": "function",
                "function": {"name": "get_weather", "arguments": ""}}]}))
            args = json.dumps({"city": city})
            for fragment in (args[:5], args[5:]):
                await ex.event(chunks.delta({"tool_calls": [{
                    "index": i, "function": {"arguments": fragment}}]}))
        last = chunks.finish("tool_calls")
        last["usage"] = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
        await ex.event(last)
        await ex.send_chunk(sse.DONE)
        await ex.end_stream()
        return True


def test_streamed_parallel_tool_calls_after_text(gw, ups):
    a, _ = ups
    a.script(TextThenTwoToolCalls())
    with sdk(gw) as client, client.messages.stream(
            model="r", max_tokens=64, tools=[WEATHER_TOOL],
            messages=[{"role": "user", "content": "Oslo and Bergen?"}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.usage.input_tokens == 5 and final.usage.output_tokens == 7
    text, first, second = final.content
    assert text.type == "text" and text.text == "Checking both."
    assert (first.type, first.id, first.input) == ("tool_use", "call_a", {"city": "Oslo"})
    assert (second.type, second.id, second.input) == ("tool_use", "call_b", {"city": "Bergen"})


class LateFragment(Step):
    """Streamed: a tool call, a second one (which closes the first block), then one
    more argument fragment for the first: Anthropic's stream cannot reopen it."""

    async def respond(self, ex: Exchange) -> bool:
        chunks = ex.chunks()
        await ex.start_stream()
        await ex.event(chunks.role())
        for i, call_id in enumerate(("call_a", "call_b")):
            await ex.event(chunks.delta({"tool_calls": [{
                "index": i, "id": call_id, "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}))
        await ex.event(chunks.delta({"tool_calls": [{"index": 0,
                                                      "function": {"arguments": " "}}]}))
        await ex.event(chunks.finish("tool_calls"))
        await ex.send_chunk(sse.DONE)
        await ex.end_stream()
        return True


def test_a_fragment_the_stream_cannot_carry_is_noted_and_counted(gw, ups):
    a, _ = ups
    a.script(LateFragment())
    with sdk(gw) as client, client.messages.stream(
            model="r", max_tokens=64, tools=[WEATHER_TOOL],
            messages=[{"role": "user", "content": "Oslo twice?"}]) as stream:
        final = stream.get_final_message()
    assert [b.id for b in final.content] == ["call_a", "call_b"]
    [decision] = gw.decisions()
    assert FRAGMENTS_DROPPED in decision["notes"]
    metrics = httpx.get(f"{gw.url}/metrics").text
    assert ('humpyard_translation_drops_total{protocol="anthropic",what="stream_fragment"} 1'
            in metrics)


# -- streaming text -----------------------------------------------------------------


def test_streamed_text(gw, ups):
    a, _ = ups
    a.script(ok(["Hel", "lo, ", "wor", "ld"], usage={"prompt_tokens": 9,
                                                      "completion_tokens": 4}))
    with sdk(gw) as client, client.messages.stream(
            model="r", max_tokens=64, messages=HELLO) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
        text = stream.get_final_text()
        headers = stream.response.headers
    assert pieces == ["Hel", "lo, ", "wor", "ld"]
    assert text == "Hello, world"
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == 9 and final.usage.output_tokens == 4
    assert headers["x-humpyard-target"] == "first"
    assert headers["content-type"].startswith("text/event-stream")


def test_raw_stream_event_order(gw, ups):
    a, _ = ups
    a.script(ok(["a", "b"]))
    with sdk(gw) as client:
        stream = client.messages.create(model="r", max_tokens=16, messages=HELLO, stream=True)
        with stream:
            kinds = [e.type for e in stream]
    assert kinds == ["message_start", "content_block_start", "content_block_delta",
                     "content_block_delta", "content_block_stop", "message_delta",
                     "message_stop"]


# -- images ---------------------------------------------------------------------------


def test_images_reach_the_upstream_as_image_url_parts(gw, ups):
    a, _ = ups
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": PIXEL}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "text", "text": "What is in these?"},
    ]
    with sdk(gw) as client:
        msg = client.messages.create(model="r", max_tokens=32,
                                     messages=[{"role": "user", "content": content}])
    assert msg.content[0].text == "hello"
    [sent] = upstream_bodies(a)
    assert sent["messages"] == [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "text", "text": "What is in these?"},
    ]}]


# -- stop reasons ---------------------------------------------------------------------


def test_length_is_max_tokens(gw, ups):
    a, _ = ups
    a.script(status(200, completion(text="cut sh", finish_reason="length")))
    with sdk(gw) as client:
        msg = client.messages.create(model="r", max_tokens=2, messages=HELLO)
    assert msg.stop_reason == "max_tokens"
    assert msg.content[0].text == "cut sh"


def test_stop_sequence_buffered_and_streamed(gw, ups):
    a, _ = ups
    a.script(ok("the answer is 42 END"), ok(["the answer ", "is 42 E", "ND"]))
    with sdk(gw) as client:
        msg = client.messages.create(model="r", max_tokens=32, messages=HELLO,
                                     stop_sequences=["STOP", "END"])
        assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "END"
        with client.messages.stream(model="r", max_tokens=32, messages=HELLO,
                                    stop_sequences=["END"]) as stream:
            final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "END"
    assert [b["stop"] for b in upstream_bodies(a)] == [["STOP", "END"], ["END"]]


# -- count_tokens ---------------------------------------------------------------------


def test_count_tokens_is_the_gateways_estimate(gw, ups):
    a, _ = ups
    body: dict[str, Any] = {
        "model": "r", "system": "You are terse.", "tools": [WEATHER_TOOL],
        "messages": [{"role": "user", "content": "How is the weather in Oslo today? " * 20}],
    }
    with sdk(gw) as client:
        counted = client.messages.count_tokens(**body)
    openai_body, _ = decode_request({"max_tokens": 1, **body})
    assert counted.input_tokens == estimate_prompt_tokens(openai_body)[0]
    assert counted.input_tokens > 100
    assert a.requests == []


# -- errors ---------------------------------------------------------------------------


def test_upstream_400_is_invalid_request_error(gw, ups):
    a, b = ups
    a.script(status(400, {"error": {"message": "bad field foo", "type": "invalid_request_error"}}))
    with sdk(gw) as client, pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="r", max_tokens=16, messages=HELLO)
    err = info.value
    assert err.status_code == 400
    assert err.body["type"] == "error"
    assert err.body["error"]["type"] == "invalid_request_error"
    assert "bad field foo" in err.body["error"]["message"]
    assert err.response.headers["x-humpyard-route"] == "r"
    assert b.requests == []


def test_streamed_request_error_is_a_status_not_a_stream(gw, ups):
    a, _ = ups
    a.script(status(400, {"error": {"message": "bad field bar"}}))
    with sdk(gw) as client, pytest.raises(anthropic.BadRequestError) as info:
        with client.messages.stream(model="r", max_tokens=16, messages=HELLO) as stream:
            stream.get_final_message()
    assert info.value.body["error"]["message"].endswith("bad field bar")


def test_upstream_429_everywhere_is_rate_limit_error(gw, ups):
    a, b = ups
    a.script(status(429, {"error": {"message": "slow down a"}}))
    b.script(status(429, {"error": {"message": "slow down b"}}))
    with sdk(gw) as client, pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(model="r", max_tokens=16, messages=HELLO)
    assert info.value.status_code == 429
    assert info.value.body["error"]["type"] == "rate_limit_error"


def test_unknown_model_is_not_found_error(gw, ups):
    a, _ = ups
    with sdk(gw) as client, pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="no-such-route", max_tokens=16, messages=HELLO)
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "not_found_error"
    assert a.requests == []


def test_malformed_request_names_the_field(gw, ups):
    with sdk(gw) as client, pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="r", max_tokens=16, messages=[
            {"role": "user", "content": [{"type": "bogus"}]}])
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert "messages[0].content[0].type" in info.value.body["error"]["message"]


KEYS = f"""
[keys.dev]
key_sha256 = "{hashlib.sha256(b"dev-secret").hexdigest()}"
"""


def test_keyed_gateway_takes_either_key_header_and_refuses_others(ups):
    """The SDK sends its key as ``Authorization: Bearer``; Claude Code and older
    SDKs send ``x-api-key``. Both work; a wrong or missing key is a 401 in
    Anthropic's shape, for ``count_tokens`` too."""
    a, b = ups
    with running_gateway(two_targets(a.url, b.url, KEYS)) as gw:
        with sdk(gw, api_key="dev-secret") as client:
            assert client.messages.create(model="r", max_tokens=16,
                                          messages=HELLO).content[0].text == "hello"
            assert client.messages.count_tokens(model="r", messages=HELLO).input_tokens > 0
            only_x_api_key = {"Authorization": anthropic.omit, "x-api-key": "dev-secret"}
            raw = client.messages.with_raw_response.create(
                model="r", max_tokens=16, messages=HELLO, extra_headers=only_x_api_key)
            assert raw.http_request.headers.get("authorization") is None
            assert raw.parse().content[0].text == "hello"
        with sdk(gw, api_key="wrong-secret") as client:
            with pytest.raises(anthropic.AuthenticationError) as info:
                client.messages.create(model="r", max_tokens=16, messages=HELLO)
            assert info.value.body["error"]["type"] == "authentication_error"
            assert "wrong-secret" not in json.dumps(info.value.body)
            with pytest.raises(anthropic.AuthenticationError):
                client.messages.count_tokens(model="r", messages=HELLO)
            with pytest.raises(anthropic.AuthenticationError) as info:
                client.messages.create(model="r", max_tokens=16, messages=HELLO,
                                       extra_headers={"Authorization": anthropic.omit})
            assert "missing" in info.value.body["error"]["message"]
    assert len(a.requests_to(CHAT)) == 2


# -- failover --------------------------------------------------------------------------


@pytest.mark.parametrize("first_step", [fail_before_content, lambda: status(503)],
                         ids=["dropped-before-content", "503"])
def test_stream_fails_over_before_first_content(gw, ups, first_step):
    a, b = ups
    a.script(first_step())
    b.script(ok(["from ", "second"]))
    with sdk(gw) as client, client.messages.stream(
            model="r", max_tokens=16, messages=HELLO) as stream:
        text = stream.get_final_text()
        headers = stream.response.headers
    assert text == "from second"
    assert headers["x-humpyard-target"] == "second"
    assert headers["x-humpyard-provider"] == "b"
    assert len(a.requests_to(CHAT)) == 1 and len(b.requests_to(CHAT)) == 1
    gw.recorded(1)
    [decision] = gw.decisions()
    assert decision["target"] == "second"


@dataclass(frozen=True)
class ContentThenErrorEvent(Step):
    """Streamed: some text, then an OpenAI ``data: {"error": ...}`` event and a clean end."""

    async def respond(self, ex: Exchange) -> bool:
        chunks = ex.chunks()
        await ex.start_stream()
        await ex.event(chunks.role())
        await ex.event(chunks.content("partial "))
        await ex.event({"error": {"message": "engine crashed", "type": "server_error"}})
        await ex.end_stream()
        return True


@pytest.mark.parametrize(("step", "message"), [
    (ContentThenErrorEvent(), "upstream stream error: engine crashed"),
    (stream_then_fail(["partial "]), "the upstream stream broke"),
], ids=["error-event", "dropped"])
def test_failure_after_first_content_is_an_error_event(gw, ups, step, message):
    """After content nothing fails over; the SDK must not see a complete
    message (no ``message_stop``) but Anthropic's mid-stream ``error`` event."""
    a, b = ups
    a.script(step)
    with sdk(gw) as client, pytest.raises(anthropic.APIStatusError) as info:
        with client.messages.stream(model="r", max_tokens=16, messages=HELLO) as stream:
            for _ in stream:
                pass
    assert stream.current_message_snapshot.content[0].text == "partial "
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "api_error"
    assert info.value.body["error"]["message"].startswith(message)
    assert b.requests == []

"""Anthropic Messages as an upstream: requests out, answers and streams back, errors.

Oracles: the official ``anthropic`` SDK's request types for what we send, the
``openai`` SDK's chat types for what we give back, and round trips through the
gateway's own Anthropic client codec (``anthropic_request`` / ``anthropic_stream``).
"""

from __future__ import annotations

import json

import pydantic
import pytest
from anthropic.types import MessageCreateParams, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from humpyard.protocols.anthropic import encode_usage
from humpyard.protocols.anthropic_errors import anthropic_error_facts
from humpyard.protocols.anthropic_request import decode_request
from humpyard.protocols.anthropic_stream import StreamTranslator
from humpyard.protocols.anthropic_upstream import chat_usage, decode_response, encode_request
from humpyard.protocols.anthropic_upstream_stream import ChunkTranslator, encode_chunk
from humpyard.protocols.sse import SSEDecoder
from humpyard.upstream.classify import FailureClass, classify_status

PARAMS = pydantic.TypeAdapter(MessageCreateParams)
EVENTS = pydantic.TypeAdapter(RawMessageStreamEvent)
PIXEL = "data:image/png;base64,iVBORw0KGgo="
TOOL = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}


def chat(**fields):
    base = {"model": "route", "max_tokens": 1000, "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
    base.update(fields)
    return base


def encode(**fields):
    out, notes = encode_request(chat(**fields), model="claude-sonnet-4-5")
    PARAMS.validate_python(out)  # a body the Anthropic SDK would send
    return out, notes


# --- requests ---------------------------------------------------------------------


def test_plain_request():
    out, notes = encode()
    assert out == {"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": "be brief",
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert notes == []


def test_tool_round_trip_history():
    out, _ = encode(tools=[TOOL], tool_choice="auto", parallel_tool_calls=False, messages=[
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": "Reading.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "a"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "user", "content": "and?"}])
    assert out["tools"] == [{"name": "read_file", "description": "Read a file",
                             "input_schema": TOOL["function"]["parameters"]}]
    assert out["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "read a"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "42"},
            {"type": "text", "text": "and?"}]}]


@pytest.mark.parametrize(("choice", "rule"), [
    ("required", {"type": "any"}), ("none", {"type": "none"}),
    ({"type": "function", "function": {"name": "read_file"}},
     {"type": "tool", "name": "read_file"})])
def test_tool_choice(choice, rule):
    assert encode(tools=[TOOL], tool_choice=choice)[0]["tool_choice"] == rule


def test_images_files_stop_user_and_mid_conversation_system():
    out, _ = encode(stop="END", user="u-1", messages=[
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": PIXEL}},
            {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
            {"type": "file", "file": {"filename": "a.pdf",
                                      "file_data": "data:application/pdf;base64,JVBE"}}]},
        {"role": "system", "content": "later rule"}])
    blocks = out["messages"][0]["content"]
    assert blocks[1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                     "data": "iVBORw0KGgo="}}
    assert blocks[2] == {"type": "image", "source": {"type": "url",
                                                     "url": "https://x.test/a.png"}}
    assert blocks[3]["type"] == "document" and blocks[3]["source"]["media_type"] == \
        "application/pdf"
    assert "later rule" in blocks[4]["text"] and "system" not in out
    assert out["stop_sequences"] == ["END"] and out["metadata"] == {"user_id": "u-1"}


def test_reasoning_effort_becomes_a_thinking_budget():
    out, notes = encode(reasoning_effort="medium", max_tokens=32000)
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 8192} and notes == []
    out, notes = encode(reasoning_effort="high", temperature=0.2, max_tokens=32000)
    assert "thinking" not in out
    assert notes == ["reasoning_effort 'high' dropped: Anthropic takes no thinking with "
                     "temperature, top_p or a forced tool"]
    out, notes = encode(reasoning_effort="low", max_tokens=500)
    assert "thinking" not in out and "no room" in notes[0]


def test_thinking_is_dropped_when_the_tool_loop_carries_no_thinking_block():
    """A chat (or Responses) client with reasoning on, in a tool loop: the upstream got
    ``thinking`` with a last assistant turn of tool calls and no thinking block, which
    Anthropic refuses (400 "Expected `thinking` or `redacted_thinking`, but found
    `tool_use`"), so every second turn of the loop failed."""
    loop = [{"role": "user", "content": "what time is it?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "now", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]
    out, notes = encode(messages=loop, reasoning_effort="high", max_tokens=32000,
                        tools=[{"type": "function", "function": {"name": "now",
                                                                 "parameters": {}}}])
    assert "thinking" not in out
    assert notes == ["reasoning_effort 'high' dropped: the last assistant turn's tool calls "
                     "carry no thinking block, which Anthropic requires with thinking on"]
    answered = [*loop, {"role": "assistant", "content": "It is noon."},
                {"role": "user", "content": "thanks; and tomorrow?"}]
    out, notes = encode(messages=answered, reasoning_effort="high", max_tokens=32000)
    assert out["thinking"]["type"] == "enabled" and notes == []  # the loop is over


def test_what_cannot_be_carried_is_noted():
    body = chat(temperature=1.7, seed=7, response_format={"type": "json_object"})
    del body["max_tokens"]
    out, notes = encode_request(body)
    assert out["temperature"] == 1 and out["max_tokens"] == 4096 and out["model"] == "route"
    assert notes == ["max_tokens set to 4096: Anthropic requires one",
                     "temperature 1.7 lowered to 1: Anthropic's maximum",
                     "seed dropped: Anthropic Messages takes none",
                     "response_format dropped: Anthropic Messages takes none"]


def test_round_trip_through_the_client_decoder():
    """chat → Anthropic (upstream encoder) → chat (the /v1/messages decoder) keeps the turns."""
    original = chat(tools=[TOOL], messages=[
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "a"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"}])
    anthropic_body, _ = encode_request(original)
    back, _ = decode_request(anthropic_body)
    assert back["messages"] == original["messages"]
    assert back["tools"] == original["tools"]


# --- answers ----------------------------------------------------------------------


def test_decode_response_with_tools_thinking_and_cache_usage():
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
               "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"},
                           {"type": "text", "text": "Reading."},
                           {"type": "tool_use", "id": "toolu_1", "name": "read_file",
                            "input": {"path": "a"}}],
               "stop_reason": "tool_use", "stop_sequence": None,
               "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                         "cache_creation_input_tokens": 20}}
    out = decode_response(message, created=7)
    parsed = ChatCompletion.model_validate(out)
    assert parsed.choices[0].finish_reason == "tool_calls"
    assert parsed.choices[0].message.content == "Reading."
    call = parsed.choices[0].message.tool_calls[0]
    assert call.id == "toolu_1" and json.loads(call.function.arguments) == {"path": "a"}
    assert out["choices"][0]["message"]["reasoning_content"] == "hmm"
    assert out["usage"] == {"prompt_tokens": 130, "completion_tokens": 5, "total_tokens": 135,
                           "prompt_tokens_details": {"cached_tokens": 100},
                           "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}


@pytest.mark.parametrize(("stop", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
    ("tool_use", "tool_calls"), ("refusal", "content_filter"), (None, "stop")])
def test_stop_reasons(stop, finish):
    out = decode_response({"content": [{"type": "text", "text": "x"}], "stop_reason": stop})
    assert out["choices"][0]["finish_reason"] == finish


def test_odd_answers_do_not_raise():
    out = decode_response({})
    assert out["choices"][0]["message"] == {"role": "assistant", "content": ""}
    assert chat_usage(None)["total_tokens"] == 0


# --- streams ----------------------------------------------------------------------


def anthropic_stream(chunks, *, usage=None):
    """Anthropic events made by the gateway's own chat→Anthropic translator."""
    translator = StreamTranslator("claude-x", "msg_1")
    events = []
    for c in chunks:
        events += translator.feed(c)
    if usage:
        events += translator.feed({"choices": [], "usage": usage})
    events += translator.finish()
    return events


def chunk(content=None, tool_calls=None, finish=None):
    delta = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def accumulate(chunks):
    text, calls, finish, usage = "", {}, None, None
    for c in chunks:
        if c.get("usage"):
            usage = c["usage"]
        for choice in c.get("choices") or []:
            delta = choice["delta"]
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] += call.get("function", {}).get("name") or ""
                slot["arguments"] += call.get("function", {}).get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return text, calls, finish, usage


def translate(events):
    translator = ChunkTranslator(created=5, model="route")
    out = []
    for name, data in events:
        out += translator.feed(name, data)
    for c in out:
        if "error" not in c:
            ChatCompletionChunk.model_validate(c)
    return out, translator


def test_stream_round_trip_text_and_tools():
    events = anthropic_stream([
        chunk("Let me "), chunk("look."),
        chunk(tool_calls=[{"index": 0, "id": "c1", "type": "function",
                           "function": {"name": "read_file", "arguments": '{"path":'}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": ' "a"}'}}]),
        chunk(finish="tool_calls")], usage={"prompt_tokens": 12, "completion_tokens": 4})
    for _, data in events:
        if data["type"] != "ping":
            EVENTS.validate_python(data)
    out, translator = translate(events)
    text, calls, finish, usage = accumulate(out)
    assert text == "Let me look." and finish == "tool_calls"
    assert calls == {0: {"id": "c1", "name": "read_file", "arguments": '{"path": "a"}'}}
    assert usage["completion_tokens"] == 4
    assert translator.done


def test_stream_usage_with_cache_counts_and_thinking():
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_9", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1, "cache_read_input_tokens": 50,
                      "cache_creation_input_tokens": 7}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "thinking", "thinking": "",
                                                   "signature": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "signature_delta", "signature": "s"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("ping", {"type": "ping"}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 9}}),
        ("message_stop", {"type": "message_stop"})]
    out, _ = translate(events)
    assert out[0]["id"] == "msg_9" and out[0]["model"] == "claude-x"
    assert [c["choices"][0]["delta"].get("reasoning_content") for c in out[1:2]] == ["hmm"]
    assert out[-2]["choices"][0]["finish_reason"] == "stop"
    assert out[-1]["choices"] == [] and out[-1]["usage"] == {
        "prompt_tokens": 60, "completion_tokens": 9, "total_tokens": 69,
        "prompt_tokens_details": {"cached_tokens": 50},
        "cache_read_input_tokens": 50, "cache_creation_input_tokens": 7}


def test_stream_error_event_becomes_an_error_chunk():
    out, translator = translate([
        ("message_start", {"type": "message_start", "message": {"id": "m"}}),
        ("error", {"type": "error", "error": {"type": "overloaded_error",
                                              "message": "Overloaded"}})])
    assert out[-1] == {"error": {"message": "Overloaded", "type": "overloaded_error",
                                 "code": "overloaded_error"}}
    assert translator.done and translator.feed("ping", {"type": "ping"}) == []


def test_chunks_encode_as_sse():
    wire = encode_chunk({"choices": [], "usage": {"prompt_tokens": 1}})
    [event] = SSEDecoder().feed(wire)
    assert json.loads(event.data) == {"choices": [], "usage": {"prompt_tokens": 1}}


# --- errors -----------------------------------------------------------------------


def error(kind, message):
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


@pytest.mark.parametrize(("status", "body", "failure", "gone"), [
    (404, error("not_found_error", "model: claude-nope"), FailureClass.UNAVAILABLE, True),
    (400, error("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
     FailureClass.OVERFLOW, False),
    (400, error("invalid_request_error",
                "input length and `max_tokens` exceed context limit: 190000 + 32000 > 200000"),
     FailureClass.OVERFLOW, False),
    (413, error("request_too_large", "Request exceeds the maximum size"),
     FailureClass.OVERFLOW, False),
    (529, error("overloaded_error", "Overloaded"), FailureClass.SERVER_ERROR, False),
    (500, error("api_error", "Internal server error"), FailureClass.SERVER_ERROR, False),
    (429, error("rate_limit_error", "Number of request tokens has exceeded your rate limit"),
     FailureClass.RATE_LIMIT, False),
    (401, error("authentication_error", "invalid x-api-key"), FailureClass.UNAVAILABLE, False),
    (403, error("permission_error", "no access"), FailureClass.FORBIDDEN, False),
    (404, error("not_found_error", "Not found"), FailureClass.UNAVAILABLE, False),
    (400, error("invalid_request_error", "messages.0.content: Field required"),
     FailureClass.REQUEST, False),
    (502, b"<html>bad gateway</html>", FailureClass.SERVER_ERROR, False),
])
def test_error_facts_classify_like_openai_errors(status, body, failure, gone):
    facts = anthropic_error_facts(status, body)
    verdict = classify_status(*facts)
    assert verdict.failure_class is failure and verdict.is_model_gone is gone
    assert facts[0] == status


def test_cache_counts_survive_the_way_back_to_anthropic_clients():
    """Anthropic usage → chat usage → Anthropic usage gives the same counts."""
    original = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20}
    assert encode_usage(chat_usage(original)) == original


@pytest.mark.parametrize("deltas", [[], [""]], ids=["no delta", "an empty partial_json"])
def test_a_streamed_tool_call_without_input_has_empty_object_arguments(deltas):
    """A tool with no input, streamed (Anthropic sends ``input: {}`` and an empty
    ``partial_json``), came out with ``arguments: ""`` (no JSON a client can parse),
    where the buffered answer gives ``"{}"``."""
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}}),
        *[("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
            "type": "input_json_delta", "partial_json": d}}) for d in deltas],
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"})]
    out, _ = translate(events)
    _, calls, finish, _ = accumulate(out)
    assert calls == {0: {"id": "toolu_1", "name": "now", "arguments": "{}"}}
    assert finish == "tool_calls"


def test_a_chat_clients_later_system_message_is_folded_with_a_note():
    """Folded into the next user turn for an Anthropic upstream, as for Messages and
    Responses clients, but without the note those get: a silent change."""
    out, notes = encode(messages=[
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "mid-system"}, {"role": "user", "content": "thanks"}])
    assert out["system"] == "be brief"
    assert "<system-reminder>\nmid-system\n</system-reminder>" in \
        out["messages"][-1]["content"][0]["text"]
    assert notes == ["1 system message(s) inside messages folded into user turns as "
                     "<system-reminder> text"]

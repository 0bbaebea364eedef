"""OpenAI chunks → Responses stream events, checked with the official SDK's types and
its ``responses.stream`` accumulator over our bytes."""

from __future__ import annotations

import json

import httpx2
import openai
import pydantic
import pytest
from openai.types.responses import ResponseStreamEvent

from humpyard.protocols.responses_request import response_context
from humpyard.protocols.responses_stream import ResponsesStreamTranslator, encode_event
from humpyard.protocols.sse import SSEDecoder
from tests.support.chat_chunks import chunk, usage_chunk
from tests.support.chat_chunks import tool_fragment as fragment

EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
             "tools": [{"type": "function", "name": "spawn_agent",
                        "parameters": {"type": "object", "properties": {}}}]}
REQUEST = {"model": "gpt-test", "input": "hi", "stream": True,
           "tools": [{"type": "function", "name": "read_file", "parameters": {}}, NAMESPACE,
                     {"type": "custom", "name": "apply_patch"}]}
CTX = response_context(REQUEST)


def run(chunks, *, fail=None):
    translator = ResponsesStreamTranslator(CTX, "resp_abc", 1_700_000_000)
    events = []
    for c in chunks:
        events += translator.feed(c)
    events += translator.fail(fail) if fail else translator.finish()
    for i, (name, data) in enumerate(events):  # every event is one the SDK knows
        assert data["type"] == name and data["sequence_number"] == i
        EVENTS.validate_python(data)
    assert translator.finish() == [] and translator.feed(chunk("late")) == []
    return events


def names(events):
    return [name for name, _ in events]


def sdk_stream(chunks):
    """Our bytes through the SDK's ``responses.stream``: (text deltas, final response)."""
    translator = ResponsesStreamTranslator(CTX, "resp_abc", 1_700_000_000)
    payload = b"".join(encode_event(n, d) for c in chunks for n, d in translator.feed(c))
    payload += b"".join(encode_event(n, d) for n, d in translator.finish())

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=payload,
                               headers={"content-type": "text/event-stream"})

    with httpx2.Client(transport=httpx2.MockTransport(handler)) as http:
        client = openai.OpenAI(api_key="k", base_url="http://gw.test/v1", http_client=http,
                               max_retries=0)
        with client.responses.stream(model="gpt-test", input="hi") as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
    return deltas, final


def test_text_stream_event_order():
    events = run([chunk("Hel", role="assistant"), chunk("lo"), chunk(finish="stop"),
                  usage_chunk()])
    assert names(events) == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    done = events[-1][1]["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["text"] == "Hello"
    assert done["usage"]["input_tokens"] == 11 and done["usage"]["output_tokens"] == 7
    assert events[0][1]["response"]["status"] == "in_progress"


def test_sdk_accumulates_text_and_tool_calls():
    deltas, final = sdk_stream([
        chunk("Let me "), chunk("look."),
        chunk(tool_calls=[fragment(0, '{"path": "/tm', "call_1", "read_file")]),
        chunk(tool_calls=[fragment(0, 'p/x"}')]),
        chunk(tool_calls=[fragment(1, "{}", "call_2", "multi_agent_v1__spawn_agent")]),
        chunk(finish="tool_calls"), usage_chunk(prompt=40, completion=9, cached=32)])
    assert deltas == ["Let me ", "look."]
    assert final.output_text == "Let me look."
    message, read, spawn = final.output
    assert read.type == "function_call" and read.name == "read_file"
    assert json.loads(read.arguments) == {"path": "/tmp/x"} and read.call_id == "call_1"
    assert spawn.type == "function_call" and spawn.name == "spawn_agent"
    assert spawn.namespace == "multi_agent_v1"
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens == 32


def test_tool_call_events():
    events = run([chunk(tool_calls=[fragment(0, "", "call_1", "read_file")]),
                  chunk(tool_calls=[fragment(0, '{"a":')]), chunk(tool_calls=[fragment(0, "1}")]),
                  chunk(finish="tool_calls")])
    assert names(events)[2:] == [
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert events[-3][1]["arguments"] == '{"a":1}'
    assert events[2][1]["item"]["status"] == "in_progress"
    assert events[-2][1]["item"]["status"] == "completed"


def test_arguments_before_the_name_wait_for_it():
    events = run([chunk(tool_calls=[fragment(0, '{"a":', "call_1")]),
                  chunk(tool_calls=[fragment(0, "1}", name="read_file")]),
                  chunk(finish="tool_calls")])
    added = [d for n, d in events if n == "response.output_item.added"]
    assert added[0]["item"]["name"] == "read_file"
    done = events[-1][1]["response"]["output"][0]
    assert done["arguments"] == '{"a":1}'


def test_a_call_whose_name_never_came_is_still_sent():
    events = run([chunk(tool_calls=[fragment(0, "{}", "call_1")]), chunk(finish="tool_calls")])
    [call] = events[-1][1]["response"]["output"]
    assert call["name"] == "" and call["arguments"] == "{}"


def test_custom_tool_call_input_is_sent_whole():
    events = run([chunk(tool_calls=[fragment(0, '{"input": "*** Begin', "c", "apply_patch")]),
                  chunk(tool_calls=[fragment(0, ' Patch"}')]), chunk(finish="tool_calls")])
    assert "response.function_call_arguments.delta" not in names(events)
    [delta] = [d for n, d in events if n == "response.custom_tool_call_input.delta"]
    assert delta["delta"] == "*** Begin Patch"
    [call] = events[-1][1]["response"]["output"]
    assert call["type"] == "custom_tool_call" and call["input"] == "*** Begin Patch"


def test_reasoning_then_text():
    events = run([chunk(reasoning_content="think"), chunk(reasoning_content="ing"),
                  chunk("answer"), chunk(finish="stop")])
    assert "response.reasoning_text.delta" in names(events)
    reasoning, message = events[-1][1]["response"]["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "thinking"}]
    assert message["content"][0]["text"] == "answer"
    indexes = [d["output_index"] for n, d in events if n == "response.output_item.added"]
    assert indexes == [0, 1]


def test_reasoning_alone_is_not_content():
    translator = ResponsesStreamTranslator(CTX, "resp_abc", 1)
    translator.feed(chunk(reasoning_content="hmm"))
    assert not translator.has_content
    translator.feed(chunk("x"))
    assert translator.has_content


def test_length_ends_incomplete():
    events = run([chunk("cut"), chunk(finish="length")])
    assert names(events)[-1] == "response.incomplete"
    assert events[-1][1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_failure_ends_with_error_and_response_failed():
    events = run([chunk("partial")], fail="the upstream stream broke")
    assert names(events)[-2:] == ["error", "response.failed"]
    assert events[-2][1]["message"] == "the upstream stream broke"
    failed = events[-1][1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "the upstream stream broke"}


def test_an_empty_stream_still_completes():
    events = run([])
    assert names(events) == ["response.created", "response.in_progress", "response.completed"]


def test_fragment_for_a_closed_call_is_counted():
    translator = ResponsesStreamTranslator(CTX, "resp_abc", 1)
    translator.feed(chunk(tool_calls=[fragment(0, "{}", "c1", "read_file")]))
    translator.feed(chunk(tool_calls=[fragment(1, "{}", "c2", "read_file")]))
    assert translator.feed(chunk(tool_calls=[fragment(0, "more")])) == []
    assert translator.dropped_fragments == 1


@pytest.mark.parametrize("split", [1, 7, 64])
def test_sse_bytes_decode_back_to_the_same_events(split):
    events = run([chunk("héllo"), chunk(finish="stop")])
    wire = b"".join(encode_event(n, d) for n, d in events)
    decoder = SSEDecoder()
    got = []
    for i in range(0, len(wire), split):
        got += decoder.feed(wire[i:i + split])
    assert [(e.event, json.loads(e.data)) for e in got] == events


def test_sdk_accumulates_reasoning_and_custom_calls():
    _, final = sdk_stream([
        chunk(reasoning_content="plan"), chunk("ok"),
        chunk(tool_calls=[fragment(0, '{"input": "*** Begin Patch"}', "c9", "apply_patch")]),
        chunk(finish="tool_calls")])
    reasoning, message, patch = final.output
    assert reasoning.type == "reasoning" and message.type == "message"
    assert patch.type == "custom_tool_call" and patch.input == "*** Begin Patch"
    assert final.status == "completed"


def test_a_streamed_refusal_is_a_refusal_part_as_a_buffered_one_is():
    """An upstream streaming ``delta.refusal`` gave a Responses client an empty output
    (the translator read only ``content``); a buffered refusal is a message whose part
    is a ``refusal``. The stream now carries the same, checked by the SDK."""
    chunks = [chunk(role="assistant", refusal="I can"), chunk(refusal="'t"),
              chunk(finish="stop"), usage_chunk()]
    events = run(chunks)
    assert "response.refusal.delta" in names(events)
    assert "response.refusal.done" in names(events)
    _, final = sdk_stream(chunks)
    (message,) = final.output
    assert message.type == "message"
    assert [(p.type, p.refusal) for p in message.content] == [("refusal", "I can't")]

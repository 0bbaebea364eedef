"""OpenAI chunks → Anthropic stream events, checked against the official SDK's types."""

from __future__ import annotations

import json

import anthropic
import pydantic
import pytest
from anthropic.types import RawMessageStreamEvent

from humpyard.protocols.anthropic_stream import StreamTranslator, encode_event
from humpyard.protocols.sse import SSEDecoder
from tests.support.chat_chunks import chunk, tool_fragment, usage_chunk

try:  # newer SDKs run on httpx2 and refuse httpx objects
    import httpx2 as sdk_httpx
except ImportError:  # pragma: no cover - older SDKs
    import httpx as sdk_httpx  # type: ignore[no-redef]

EVENTS = pydantic.TypeAdapter(RawMessageStreamEvent)


def run(chunks, translator=None):
    translator = translator or StreamTranslator("claude-x", "msg_1")
    events = []
    for c in chunks:
        events += translator.feed(c)
    events += translator.finish()
    for name, data in events:  # every event is one the SDK parses, named by its type
        assert data["type"] == name
        if name != "ping":
            EVENTS.validate_python(data)
    return events


def names(events):
    return [name for name, _ in events]


def blocks(events):
    """Rebuild content from events: text joined, tool input parsed from partial_json."""
    built: dict[int, dict] = {}
    for name, data in events:
        if name == "content_block_start":
            assert data["index"] == len(built)  # indexes count up from 0
            built[data["index"]] = {**data["content_block"], "_json": ""}
        elif name == "content_block_delta":
            block, delta = built[data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                block["_json"] += delta["partial_json"]
    for block in built.values():
        raw = block.pop("_json")
        if block["type"] == "tool_use":
            block["input"] = json.loads(raw) if raw else {}
    return [built[i] for i in sorted(built)]


def final(events):
    return next(data for name, data in events if name == "message_delta")


def test_text_stream():
    events = run([chunk(content="", role="assistant"), chunk("Hel"), chunk("lo"),
                  chunk(finish="stop"), usage_chunk()])
    assert names(events) == ["message_start", "ping", "content_block_start",
                             "content_block_delta", "content_block_delta",
                             "content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["id"] == "msg_1" and start["model"] == "claude-x"
    assert start["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert blocks(events) == [{"type": "text", "text": "Hello"}]
    assert final(events) == {"type": "message_delta",
                             "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                             "usage": {"input_tokens": 11, "output_tokens": 7}}


def test_has_content_only_after_text_or_tool_call():
    translator = StreamTranslator("m", "msg_1")
    assert names(translator.feed(chunk(content="", role="assistant"))) == ["message_start", "ping"]
    assert not translator.has_content
    translator.feed(chunk("x"))
    assert translator.has_content

    tools = StreamTranslator("m", "msg_2")
    tools.feed(chunk(tool_calls=[tool_fragment(0, call_id="c", name="f")]))
    assert tools.has_content


def test_tool_call_reassembly_from_awkward_fragments():
    arguments = '{"city": "Par\\u00eds", "days": [1, 2], "note": "a \\"quoted\\" word"}'
    cuts = [0, 1, 2, 9, 10, 18, 19, 24, 30, 41, 42, 55, len(arguments)]
    pieces = [arguments[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    chunks = [chunk(tool_calls=[tool_fragment(0, call_id="call_9", name="get_weather")])]
    chunks += [chunk(tool_calls=[tool_fragment(0, piece)]) for piece in pieces]
    chunks += [chunk(finish="tool_calls"), usage_chunk()]
    events = run(chunks)
    assert blocks(events) == [{"type": "tool_use", "id": "call_9", "name": "get_weather",
                               "input": json.loads(arguments)}]
    assert final(events)["delta"]["stop_reason"] == "tool_use"


def test_text_then_multiple_tool_calls_get_their_own_blocks():
    chunks = [
        chunk("Checking both."),
        chunk(tool_calls=[tool_fragment(0, '{"ci', call_id="call_a", name="get_weather")]),
        chunk(tool_calls=[tool_fragment(0, 'ty": "Paris"}')]),
        chunk(tool_calls=[tool_fragment(1, "", call_id="call_b", name="get_weather")]),
        chunk(tool_calls=[tool_fragment(1, '{"city"')]),
        chunk(tool_calls=[tool_fragment(1, ': "Rome"}')]),
        chunk(finish="tool_calls"),
        usage_chunk(),
    ]
    events = run(chunks)
    assert blocks(events) == [
        {"type": "text", "text": "Checking both."},
        {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_b", "name": "get_weather", "input": {"city": "Rome"}},
    ]
    starts = [d["index"] for n, d in events if n == "content_block_start"]
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert starts == stops == [0, 1, 2]
    # each block stops before the next starts
    order = [(n, d["index"]) for n, d in events if n.startswith("content_block_s")]
    assert order == [("content_block_start", 0), ("content_block_stop", 0),
                     ("content_block_start", 1), ("content_block_stop", 1),
                     ("content_block_start", 2), ("content_block_stop", 2)]


def test_parallel_calls_in_one_chunk_and_missing_ids():
    events = run([chunk(tool_calls=[tool_fragment(0, "{}", name="a"),
                                    tool_fragment(1, '{"x": 1}', name="b")]),
                  chunk(finish="stop")])
    assert blocks(events) == [
        {"type": "tool_use", "id": "toolu_1_0", "name": "a", "input": {}},
        {"type": "tool_use", "id": "toolu_1_1", "name": "b", "input": {"x": 1}},
    ]
    # tool calls with finish "stop" still end in tool_use, as clients loop on it
    assert final(events)["delta"]["stop_reason"] == "tool_use"
    assert final(events)["usage"] == {"output_tokens": 0}


def test_calls_without_index_are_told_apart_by_id():
    """Some upstreams omit ``index``; a new id still starts a new tool_use block."""
    calls = [{"id": "c1", "function": {"name": "a", "arguments": '{"n": 1}'}},
             {"id": "c2", "function": {"name": "b", "arguments": '{"n": 2}'}}]
    events = run([chunk(tool_calls=[call]) for call in calls] + [chunk(finish="tool_calls")])
    assert blocks(events) == [
        {"type": "tool_use", "id": "c1", "name": "a", "input": {"n": 1}},
        {"type": "tool_use", "id": "c2", "name": "b", "input": {"n": 2}},
    ]


def test_arguments_before_name_wait_for_the_name():
    translator = StreamTranslator("m", "msg_1")
    translator.feed(chunk(tool_calls=[tool_fragment(0, '{"q":', call_id="c")]))
    assert not translator.has_content
    events = run([chunk(tool_calls=[tool_fragment(0, ' "x"}', name="search")])], translator)
    assert blocks(events) == [{"type": "tool_use", "id": "c", "name": "search",
                               "input": {"q": "x"}}]


def test_fragment_for_a_closed_tool_call_is_counted_not_sent():
    translator = StreamTranslator("m", "msg_1")
    events = run([
        chunk(tool_calls=[tool_fragment(0, "{}", call_id="a", name="f")]),
        chunk(tool_calls=[tool_fragment(1, "{}", call_id="b", name="g")]),
        chunk(tool_calls=[tool_fragment(0, "late")]),
    ], translator)
    assert [b["input"] for b in blocks(events)] == [{}, {}]
    assert translator.dropped_fragments == 1


@pytest.mark.parametrize(("finish", "reason"), [
    ("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal"),
    (None, "end_turn"),
])
def test_stop_reasons(finish, reason):
    events = run([chunk("x"), chunk(finish=finish)])
    assert final(events)["delta"] == {"stop_reason": reason, "stop_sequence": None}


def test_stop_sequence_from_vllm_stop_reason_or_text_tail():
    named = chunk(finish="stop")
    named["choices"][0]["stop_reason"] = "END"
    events = run([chunk("1 2 3"), named], StreamTranslator("m", "msg_1", ["END"]))
    assert final(events)["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}

    events = run([chunk("done <"), chunk("/ans"), chunk("wer>"), chunk(finish="stop")],
                 StreamTranslator("m", "msg_1", ["</answer>"]))
    assert final(events)["delta"] == {"stop_reason": "stop_sequence",
                                      "stop_sequence": "</answer>"}


def test_usage_with_cache_and_in_the_finish_chunk():
    last = chunk(finish="stop")
    last["usage"] = {"prompt_tokens": 50, "completion_tokens": 3,
                     "prompt_tokens_details": {"cached_tokens": 20}}
    translator = StreamTranslator("m", "msg_1")
    events = run([chunk("x"), last], translator)
    assert final(events)["usage"] == {"input_tokens": 30, "output_tokens": 3,
                                      "cache_read_input_tokens": 20}
    assert translator.usage == last["usage"]


def test_thinking_only_when_asked():
    chunks = [chunk(reasoning_content="hmm, "), chunk(reasoning="ok"), chunk("42"),
              chunk(finish="stop")]
    assert blocks(run(chunks)) == [{"type": "text", "text": "42"}]

    translator = StreamTranslator("m", "msg_1", include_thinking=True)
    events = translator.feed(chunks[0])
    assert not translator.has_content  # thinking alone still allows failover
    events += run(chunks[1:], translator)
    assert blocks(events) == [
        {"type": "thinking", "thinking": "hmm, ok", "signature": ""},
        {"type": "text", "text": "42"},
    ]


def test_empty_stream_is_still_a_valid_message():
    translator = StreamTranslator("m", "msg_1")
    events = translator.finish()
    assert names(events) == ["message_start", "ping", "message_delta", "message_stop"]
    assert translator.finish() == []
    assert translator.feed(chunk("late")) == []


def test_encode_event_bytes_round_trip():
    data = {"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "line\nbreak ü"}}
    raw = encode_event("content_block_delta", data)
    assert raw.startswith(b"event: content_block_delta\ndata: {")
    assert raw.endswith(b"\n\n") and raw.count(b"\n") == 3
    [event] = SSEDecoder().feed(raw)
    assert event.event == "content_block_delta" and json.loads(event.data) == data


def test_sdk_stream_accumulates_our_events():
    """The official SDK's streaming helper reads our bytes into a final Message."""
    chunks = [chunk("Let me "), chunk("look."),
              chunk(tool_calls=[tool_fragment(0, '{"path": "/tm', call_id="call_1",
                                              name="read_file")]),
              chunk(tool_calls=[tool_fragment(0, 'p/x"}')]),
              chunk(finish="tool_calls"), usage_chunk(prompt=40, completion=9)]
    stream = b"".join(encode_event(name, data) for name, data in run(chunks))

    def handler(request: sdk_httpx.Request) -> sdk_httpx.Response:
        return sdk_httpx.Response(200, content=stream,
                                  headers={"content-type": "text/event-stream"})

    with sdk_httpx.Client(transport=sdk_httpx.MockTransport(handler)) as http:
        client = anthropic.Anthropic(api_key="k", base_url="http://gw.test", http_client=http,
                                     max_retries=0)
        with client.messages.stream(model="claude-x", max_tokens=100,
                                    messages=[{"role": "user", "content": "read it"}]) as s:
            text = "".join(s.text_stream)
            message = s.get_final_message()
    assert text == "Let me look."
    assert message.id == "msg_1" and message.stop_reason == "tool_use"
    assert message.content[1].type == "tool_use"
    assert message.content[1].input == {"path": "/tmp/x"}
    assert (message.usage.input_tokens, message.usage.output_tokens) == (40, 9)


def test_a_streamed_refusal_is_text_ending_in_refusal_as_a_buffered_one():
    """``delta.refusal`` from an OpenAI-style upstream gave a Messages client no content
    and ``end_turn``; a buffered refusal is its text with ``stop_reason`` refusal."""
    events = run([chunk(role="assistant", refusal="I can"), chunk(refusal="'t"),
                  chunk(finish="stop"), usage_chunk()])
    assert blocks(events) == [{"type": "text", "text": "I can't"}]
    assert final(events)["delta"]["stop_reason"] == "refusal"
    text_then_refusal = run([chunk("Sure, "), chunk(refusal="no"), chunk(finish="stop")])
    assert final(text_then_refusal)["delta"]["stop_reason"] == "end_turn"

"""Anthropic Messages <-> OpenAI chat translation: requests, responses, errors."""

from __future__ import annotations

import json

import anthropic
import pytest
from anthropic.types import Message
from anthropic.types.shared import ErrorResponse

from humpyard.errors import RequestError
from humpyard.protocols.anthropic import (
    MAX_TOKENS_LIMIT,
    decode_request,
    encode_response,
    encode_usage,
    error_body,
    map_stop_reason,
    message_id_for,
    parse_arguments,
    stop_sequence_hit,
)

try:  # newer SDKs run on httpx2 and refuse httpx objects
    import httpx2 as sdk_httpx
except ImportError:  # pragma: no cover - older SDKs
    import httpx as sdk_httpx  # type: ignore[no-redef]


def body(**fields):
    base = {"model": "claude-x", "max_tokens": 256,
            "messages": [{"role": "user", "content": "hi"}]}
    base.update(fields)
    return base


def decode(**fields):
    return decode_request(body(**fields))


def refused(request: dict) -> str:
    with pytest.raises(RequestError) as info:
        decode_request(request)
    assert info.value.status == 400
    return info.value.message


# --- decode: basics ----------------------------------------------------------


def test_minimal_request():
    out, notes = decode()
    assert out == {"model": "claude-x", "max_tokens": 256,
                   "messages": [{"role": "user", "content": "hi"}]}
    assert notes == []


def test_system_string_becomes_leading_system_message():
    out, _ = decode(system="be brief")
    assert out["messages"][0] == {"role": "system", "content": "be brief"}
    assert out["messages"][1]["role"] == "user"


def test_system_text_blocks_are_joined_and_cache_control_dropped_with_a_note():
    out, notes = decode(system=[
        {"type": "text", "text": "one", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "two"},
    ])
    assert out["messages"][0] == {"role": "system", "content": "one\ntwo"}
    assert notes == ["cache_control dropped: the upstream takes no prompt-caching marks"]


def test_empty_system_adds_no_message():
    out, _ = decode(system="")
    assert [m["role"] for m in out["messages"]] == ["user"]


def test_user_text_blocks_become_one_string():
    out, _ = decode(messages=[{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    assert out["messages"] == [{"role": "user", "content": "a\nb"}]


def test_images_base64_and_url():
    out, _ = decode(messages=[{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/cat.jpg"}},
    ]}])
    assert out["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://x.test/cat.jpg"}},
    ]}]


def test_documents_text_and_pdf():
    out, _ = decode(messages=[{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                        "data": "plain doc"}},
        {"type": "document", "title": "spec.pdf",
         "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
    ]}])
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "plain doc"},
        {"type": "file", "file": {"filename": "spec.pdf",
                                  "file_data": "data:application/pdf;base64,JVBERi0="}},
    ]


def test_sampling_and_options():
    out, notes = decode(temperature=0.2, top_p=0.9, top_k=40, stop_sequences=["END", "###"],
                        metadata={"user_id": "u-1"}, stream=True)
    assert out["temperature"] == 0.2
    assert out["top_p"] == 0.9
    assert "top_k" not in out
    assert out["stop"] == ["END", "###"]
    assert "user" not in out  # client identifiers are not forwarded unless asked
    assert out["stream"] is True
    assert out["stream_options"] == {"include_usage": True}
    assert notes == ["top_k dropped: the upstream takes no top_k parameter",
                     "metadata.user_id not forwarded: client identifiers stay at the gateway"]
    forwarded, _ = decode_request(body(metadata={"user_id": "u-1"}), forward_user=True)
    assert forwarded["user"] == "u-1"


def test_stream_false_has_no_stream_options():
    out, _ = decode(stream=False)
    assert out["stream"] is False
    assert "stream_options" not in out


def test_thinking_budget_becomes_a_reasoning_effort_with_a_note():
    out, notes = decode(thinking={"type": "enabled", "budget_tokens": 2048})
    assert "thinking" not in out and out["reasoning_effort"] == "low"
    assert notes == ["thinking/effort sent as reasoning_effort 'low'"]
    assert decode(thinking={"type": "disabled"})[1] == []


def test_unknown_top_level_field_is_noted_not_refused():
    out, notes = decode(service_tier="auto")
    assert "service_tier" not in out
    assert notes == ["service_tier ignored: not translated to the upstream"]


# --- decode: tools -----------------------------------------------------------

WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


def test_tools_become_function_tools():
    out, _ = decode(tools=[WEATHER, {"name": "noop", "input_schema": {"type": "object"}}])
    assert out["tools"] == [
        {"type": "function", "function": {"name": "get_weather",
                                          "description": "Weather for a city",
                                          "parameters": WEATHER["input_schema"]}},
        {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
    ]


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, "auto"),
    ({"type": "any"}, "required"),
    ({"type": "none"}, "none"),
    ({"type": "tool", "name": "get_weather"},
     {"type": "function", "function": {"name": "get_weather"}}),
])
def test_tool_choice(choice, expected):
    out, _ = decode(tools=[WEATHER], tool_choice=choice)
    assert out["tool_choice"] == expected
    assert "parallel_tool_calls" not in out


def test_disable_parallel_tool_use():
    out, _ = decode(tools=[WEATHER], tool_choice={"type": "auto",
                                                  "disable_parallel_tool_use": True})
    assert out["parallel_tool_calls"] is False


def test_tool_choice_auto_without_tools_is_omitted():
    out, _ = decode(tool_choice={"type": "auto"})
    assert "tool_choice" not in out and "tools" not in out


CONVERSATION = [
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "two calls", "signature": "sig"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
    ]},
    {"role": "user", "content": [
        {"type": "text", "text": "and hurry"},
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
         "content": [{"type": "text", "text": "timeout"}, {"type": "text", "text": "retry"}]},
    ]},
]


def test_multi_turn_tool_conversation():
    out, notes = decode(tools=[WEATHER], messages=CONVERSATION)
    assert out["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "toolu_2", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
        ]},
        # tool results first, then the rest of the user turn
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: timeout\nretry"},
        {"role": "user", "content": "and hurry"},
    ]
    assert notes == ["thinking blocks in history dropped: the upstream takes none"]


def test_assistant_tool_use_only_has_null_content():
    out, _ = decode(messages=[
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "noop", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
    ])
    assert out["messages"][1]["content"] is None
    assert out["messages"][2:] == [{"role": "tool", "tool_call_id": "t", "content": ""}]


def test_assistant_string_and_empty_content():
    out, _ = decode(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": []},
    ])
    assert out["messages"][1] == {"role": "assistant", "content": "hello"}
    assert out["messages"][3] == {"role": "assistant", "content": ""}


def test_tool_result_images_move_to_a_user_message():
    image = {"type": "image", "source": {"type": "url", "url": "https://x.test/s.png"}}
    out, notes = decode(messages=[
        {"role": "user", "content": "shot?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "screenshot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                      "content": [{"type": "text", "text": "done"}, image]}]},
    ])
    assert out["messages"][2:] == [
        {"role": "tool", "tool_call_id": "t", "content": "done"},
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://x.test/s.png"}}]},
    ]
    assert notes == ["tool_result images moved to a user message: OpenAI tool messages carry text"]


# --- decode: validation ------------------------------------------------------


@pytest.mark.parametrize(("change", "message"), [
    ({"model": None}, "model: required"),
    ({"model": 3}, "model: must be a non-empty string"),
    ({"max_tokens": None}, "max_tokens: required"),
    ({"max_tokens": 0}, "max_tokens: must be a positive integer"),
    ({"max_tokens": True}, "max_tokens: must be a positive integer"),
    ({"max_tokens": "5"}, "max_tokens: must be a positive integer"),
    ({"max_tokens": MAX_TOKENS_LIMIT + 1},
     f"max_tokens: {MAX_TOKENS_LIMIT + 1} is over the limit of {MAX_TOKENS_LIMIT}"),
    ({"messages": None}, "messages: required"),
    ({"messages": []}, "messages: must be a non-empty list"),
    ({"system": 5}, "system: must be a string or a list of text blocks"),
    ({"system": [{"type": "image"}]}, "system[0].type: must be 'text', got 'image'"),
    ({"temperature": 3}, "temperature: must be between 0 and 1, got 3"),
    ({"top_p": "high"}, "top_p: must be a number"),
    ({"top_k": -1}, "top_k: must be a non-negative integer"),
    ({"stop_sequences": "END"}, "stop_sequences: must be a list of strings"),
    ({"stream": "yes"}, "stream: must be a boolean"),
    ({"metadata": {"user_id": 7}}, "metadata.user_id: must be a string"),
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens: must be a positive integer"),
    ({"tools": {}}, "tools: must be a list"),
    ({"tools": [{"name": "x"}]}, "tools[0].input_schema: required object"),
    ({"tools": [{"input_schema": {}}]}, "tools[0].name: required"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
     "tools[0].type: server tool 'web_search_20250305' is not supported: only client tools are"),
    ({"tool_choice": {"type": "tool", "name": "nope"}},
     "tool_choice.name: no tool named 'nope' in tools"),
    ({"tool_choice": {"type": "maybe"}},
     "tool_choice.type: must be auto, any, tool or none, got 'maybe'"),
    ({"tool_choice": {"type": "any"}}, "tool_choice: 'any' needs at least one tool in tools"),
])
def test_top_level_validation_names_the_field(change, message):
    request = body(**change)
    for key, value in change.items():
        if value is None:
            del request[key]
    assert refused(request) == message


@pytest.mark.parametrize(("messages", "message"), [
    (["hi"], "messages[0]: must be an object"),
    ([{"role": "tool", "content": "x"}],
     "messages[0].role: must be 'user', 'assistant' or 'system', got 'tool'"),
    ([{"role": "user", "content": "a"}, {"role": "system", "content": [{"type": "image"}]}],
     "messages[1].content[0].type: must be 'text' in a system message, got 'image'"),
    ([{"role": "user"}], "messages[0].content: required"),
    ([{"role": "user", "content": 5}],
     "messages[0].content: must be a string or a list of content blocks"),
    ([{"role": "user", "content": ["x"]}], "messages[0].content[0]: must be an object"),
    ([{"role": "user", "content": [{"text": "x"}]}], "messages[0].content[0].type: required"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
      {"role": "user", "content": [{"type": "text", "text": "c"}, {"type": "foo"}]}],
     "messages[2].content[1].type: unknown block type 'foo'"),
    ([{"role": "user", "content": [{"type": "text", "text": 1}]}],
     "messages[0].content[0].text: must be a string"),
    ([{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}],
     "messages[0].content[0].source.type: unsupported image source 'file' (base64 and url are)"),
    ([{"role": "user", "content": [{"type": "image", "source": {"type": "base64",
                                                                 "data": "x"}}]}],
     "messages[0].content[0].source.media_type: required"),
    ([{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]}],
     "messages[0].content[0].type: 'tool_use' blocks belong in assistant turns"),
    ([{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
     "messages[0].content[0].type: 'tool_result' blocks belong in user turns"),
    ([{"role": "user", "content": [{"type": "tool_result"}]}],
     "messages[0].content[0].tool_use_id: required"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                    "is_error": "yes"}]}],
     "messages[0].content[0].is_error: must be a boolean"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                    "content": [{"type": "video"}]}]}],
     "messages[0].content[0].content[0].type: unsupported block type 'video' in a tool_result"),
    ([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n",
                                         "input": "{}"}]}],
     "messages[0].content[0].input: must be an object"),
])
def test_message_validation_names_the_field(messages, message):
    assert refused(body(messages=messages)) == message


def test_body_must_be_an_object():
    assert refused([]) == "body: must be a JSON object"  # type: ignore[arg-type]


# --- encode ------------------------------------------------------------------


def completion(message: dict, finish_reason: str | None = "stop", **extra) -> dict:
    return {"id": "chatcmpl-abc123", "object": "chat.completion", "model": "gpt-x",
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
            **extra}


def test_encode_text():
    out = encode_response(completion({"content": "Hello!"}), model="claude-x")
    assert out == {
        "id": "msg_chatcmpl-abc123", "type": "message", "role": "assistant",
        "model": "claude-x", "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 5},
    }
    Message.model_validate(out)


def test_encode_tool_calls_round_trip():
    upstream = completion({"content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": '}},  # truncated
    ]}, finish_reason="tool_calls")
    out = encode_response(upstream, model="claude-x")
    assert out["stop_reason"] == "tool_use"
    assert out["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {}},
    ]
    message = Message.model_validate(out)
    # the client sends the turn back with results; it decodes to matching ids
    request, _ = decode(tools=[WEATHER], messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant",
         "content": [b.model_dump(mode="json", exclude_none=True) for b in message.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "?"}]},
    ])
    assistant = request["messages"][1]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert [m["tool_call_id"] for m in request["messages"][2:]] == ["call_1", "call_2"]


def test_encode_text_and_tool_call_with_stop_finish_is_tool_use():
    upstream = completion({"content": "Let me check.", "tool_calls": [
        {"type": "function", "function": {"name": "noop", "arguments": {"a": 1}}}]})
    out = encode_response(upstream, model="m")
    assert out["stop_reason"] == "tool_use"
    assert out["content"][0] == {"type": "text", "text": "Let me check."}
    assert out["content"][1] == {"type": "tool_use", "id": "toolu_chatcmpl-abc123_0",
                                 "name": "noop", "input": {"a": 1}}


@pytest.mark.parametrize(("finish", "expected"), [
    ("stop", "end_turn"), ("length", "max_tokens"), ("tool_calls", "tool_use"),
    ("function_call", "tool_use"), ("content_filter", "refusal"), (None, "end_turn"),
    ("something_new", "end_turn"),
])
def test_map_stop_reason(finish, expected):
    assert map_stop_reason(finish) == expected
    out = encode_response(completion({"content": "x"}, finish_reason=finish), model="m")
    assert out["stop_reason"] == expected
    Message.model_validate(out)


def test_map_stop_reason_stop_sequence():
    assert map_stop_reason("stop", True) == "stop_sequence"
    assert map_stop_reason("length", True) == "max_tokens"


def test_stop_sequence_from_vllm_stop_reason():
    upstream = completion({"content": "1, 2, 3"})
    upstream["choices"][0]["stop_reason"] = "END"
    out = encode_response(upstream, model="m", stop_sequences=["END"])
    assert (out["stop_reason"], out["stop_sequence"]) == ("stop_sequence", "END")
    assert encode_response(upstream, model="m")["stop_reason"] == "end_turn"


def test_stop_sequence_from_text_ending():
    out = encode_response(completion({"content": "a b ###"}), model="m",
                          stop_sequences=["#", "###"])
    assert (out["stop_reason"], out["stop_sequence"]) == ("stop_sequence", "###")
    assert stop_sequence_hit("abc", ["x"]) is None
    assert stop_sequence_hit("abc", None) is None


def test_encode_refusal():
    out = encode_response(completion({"content": None, "refusal": "I can't."}), model="m")
    assert out["content"] == [{"type": "text", "text": "I can't."}]
    assert out["stop_reason"] == "refusal"


def test_encode_thinking_only_when_asked():
    upstream = completion({"content": "42", "reasoning_content": "6 times 7"})
    assert [b["type"] for b in encode_response(upstream, model="m")["content"]] == ["text"]
    out = encode_response(upstream, model="m", include_thinking=True)
    assert out["content"][0] == {"type": "thinking", "thinking": "6 times 7", "signature": ""}
    Message.model_validate(out)


def test_encode_never_crashes_on_odd_upstream_output():
    odd = {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, 5],
                                    "tool_calls": ["junk", {"function": None}]}}]}
    out = encode_response(odd, model="m", message_id="msg_fixed")
    assert out["id"] == "msg_fixed"
    assert out["content"][0] == {"type": "text", "text": "a"}
    assert out["content"][1]["input"] == {} and out["content"][2]["name"] == ""
    assert out["usage"] == {"input_tokens": 0, "output_tokens": 0}
    Message.model_validate(out)
    empty = encode_response({}, model="m")
    assert empty["content"] == [] and empty["stop_reason"] == "end_turn"
    Message.model_validate(empty)


def test_message_ids_are_stable():
    assert message_id_for({"id": "chatcmpl-1/x"}) == "msg_chatcmpl-1x"
    assert message_id_for({"id": "msg_kept"}) == "msg_kept"
    anonymous = {"choices": []}
    assert message_id_for(anonymous) == message_id_for(dict(anonymous))
    assert message_id_for(anonymous).startswith("msg_")


def test_parse_arguments():
    assert parse_arguments('{"a": [1]}') == {"a": [1]}
    assert parse_arguments("[1]") == {}
    assert parse_arguments("") == {}
    assert parse_arguments(None) == {}
    assert parse_arguments("{bad") == {}


def test_encode_usage_with_cached_tokens():
    usage = {"prompt_tokens": 100, "completion_tokens": 7,
             "prompt_tokens_details": {"cached_tokens": 60}}
    assert encode_usage(usage) == {"input_tokens": 40, "output_tokens": 7,
                                   "cache_read_input_tokens": 60}
    assert encode_usage(None) == {"input_tokens": 0, "output_tokens": 0}
    assert encode_usage({"prompt_tokens": True, "completion_tokens": "3"}) == {
        "input_tokens": 0, "output_tokens": 0}


def test_encode_usage_with_an_openai_style_upstreams_cache_writes():
    """``prompt_tokens_details.cache_write_tokens`` (as the ledger reads it) was left in
    ``input_tokens``, and no ``cache_creation_input_tokens`` was given."""
    usage = {"prompt_tokens": 130, "completion_tokens": 5,
             "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 20}}
    assert encode_usage(usage) == {"input_tokens": 10, "output_tokens": 5,
                                   "cache_read_input_tokens": 100,
                                   "cache_creation_input_tokens": 20}


def test_sdk_client_parses_the_encoded_message():
    """The official SDK, over a mock transport, reads our body as a Message."""
    upstream = completion({"content": "Hi there"})

    def handler(request: sdk_httpx.Request) -> sdk_httpx.Response:
        return sdk_httpx.Response(200, json=encode_response(upstream, model="claude-x"))

    with sdk_httpx.Client(transport=sdk_httpx.MockTransport(handler)) as http:
        client = anthropic.Anthropic(api_key="k", base_url="http://gw.test", http_client=http,
                                     max_retries=0)
        message = client.messages.create(model="claude-x", max_tokens=10,
                                         messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].type == "text" and message.content[0].text == "Hi there"
    assert message.usage.input_tokens == 12


# --- errors ------------------------------------------------------------------


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (401, "authentication_error"), (402, "billing_error"),
    (403, "permission_error"), (404, "not_found_error"), (409, "invalid_request_error"),
    (413, "request_too_large"), (422, "invalid_request_error"), (429, "rate_limit_error"),
    (500, "api_error"), (502, "api_error"), (503, "api_error"), (504, "timeout_error"),
    (529, "overloaded_error"), (599, "api_error"),
])
def test_error_body(status, kind):
    out = error_body(status, "boom")
    assert out == {"type": "error", "error": {"type": kind, "message": "boom"}}
    if kind != "request_too_large":  # documented by Anthropic, absent from the SDK's union
        ErrorResponse.model_validate(out)


@pytest.mark.parametrize(("status", "exception"), [
    (400, anthropic.BadRequestError), (401, anthropic.AuthenticationError),
    (404, anthropic.NotFoundError), (429, anthropic.RateLimitError),
    (503, anthropic.InternalServerError),
])
def test_sdk_raises_the_right_exception_for_error_bodies(status, exception):
    def handler(request: sdk_httpx.Request) -> sdk_httpx.Response:
        return sdk_httpx.Response(status, json=error_body(status, "nope"))

    with sdk_httpx.Client(transport=sdk_httpx.MockTransport(handler)) as http:
        client = anthropic.Anthropic(api_key="k", base_url="http://gw.test", http_client=http,
                                     max_retries=0)
        with pytest.raises(exception) as info:
            client.messages.create(model="m", max_tokens=1,
                                   messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["error"]["message"] == "nope"  # type: ignore[index]

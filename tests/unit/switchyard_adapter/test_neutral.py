"""OpenAI chat ↔ Switchyard's neutral request and response (``switchyard/neutral.py``)."""

import json

from humpyard.switchyard.neutral import (
    completion_to_neutral,
    content_blocks,
    neutral_to_completion,
    neutral_to_request,
    request_to_neutral,
)

TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'}}


def test_system_and_developer_messages_become_instructions() -> None:
    n = request_to_neutral({"model": "auto", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "developer", "content": [{"type": "text", "text": "no emojis"}]},
    ]})
    assert n["instructions"] == [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "developer", "content": [{"type": "text", "text": "no emojis"}]},
    ]
    assert n["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert n["model"] == "auto"


def test_assistant_tool_calls_become_tool_call_blocks_with_parsed_arguments() -> None:
    n = request_to_neutral({"messages": [
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}]})
    assert n["messages"] == [{"role": "assistant", "content": [
        {"type": "tool_call", "id": "call_1", "name": "bash",
         "arguments": {"command": "pytest -q"}}]}]


def test_assistant_text_is_kept_beside_its_tool_calls() -> None:
    n = request_to_neutral({"messages": [
        {"role": "assistant", "content": "running the tests", "tool_calls": [TOOL_CALL]}]})
    kinds = [b["type"] for b in n["messages"][0]["content"]]
    assert kinds == ["text", "tool_call"]


def test_unparseable_arguments_are_kept_raw_and_missing_ids_generated() -> None:
    n = request_to_neutral({"messages": [{"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{not json"}},
        {"type": "function", "function": {"name": "g", "arguments": ""}},
    ]}]})
    first, second = n["messages"][0]["content"]
    assert first["arguments"] == {"raw": "{not json"}
    assert second["arguments"] == {}
    assert first["id"] and first["id"] != second["id"]


def test_a_tool_result_becomes_a_tool_result_block_in_a_user_message() -> None:
    n = request_to_neutral({"messages": [
        {"role": "tool", "tool_call_id": "call_1",
         "content": "Traceback (most recent call last):\nMemoryError"}]})
    assert n["messages"] == [{"role": "user", "content": [{
        "type": "tool_result", "tool_call_id": "call_1",
        "content": [{"type": "text",
                     "text": "Traceback (most recent call last):\nMemoryError"}],
        "is_error": None}]}]


def test_tool_result_parts_are_joined_and_legacy_function_results_kept() -> None:
    n = request_to_neutral({"messages": [
        {"role": "tool", "tool_call_id": "a",
         "content": [{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}]},
        {"role": "function", "name": "lookup", "content": "42"}]})
    a, b = (m["content"][0] for m in n["messages"])
    assert a["content"] == [{"type": "text", "text": "line 1\nline 2"}]
    assert (b["tool_call_id"], b["content"][0]["text"]) == ("lookup", "42")


def test_a_whole_agent_turn_keeps_its_order() -> None:
    n = request_to_neutral({"messages": [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "fix the test"},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "1 failed"},
        {"role": "assistant", "content": "one test fails"},
    ]})
    shape = [(m["role"], [b["type"] for b in m["content"]]) for m in n["messages"]]
    assert shape == [("user", ["text"]), ("assistant", ["tool_call"]),
                     ("user", ["tool_result"]), ("assistant", ["text"])]


def test_content_parts() -> None:
    blocks = content_blocks([
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-1"}},
        {"type": "refusal", "refusal": "no"},
        {"type": "something_new", "x": 1},
    ])
    assert blocks == [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "url",
                                     "data": {"url": "https://x/y.png", "detail": "low"}}},
        {"type": "audio", "source": {"type": "base64",
                                     "data": {"media_type": "audio/wav", "data": "AAAA"}}},
        {"type": "file", "source": {"type": "file_id", "data": "file-1"}},
        {"type": "refusal", "text": "no"},
        {"type": "unknown", "provider": "openai_chat",
         "raw": {"type": "something_new", "x": 1}},
    ]
    assert content_blocks(None) == content_blocks([]) == [{"type": "text", "text": ""}]


def test_tools_choice_sampling_and_output() -> None:
    n = request_to_neutral({
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {
            "name": "bash", "description": "run", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "bash"}},
        "temperature": 1, "top_p": 0.5, "max_tokens": 100, "reasoning_effort": "low",
        "response_format": {"type": "json_object"}, "stream": True,
    })
    assert n["tools"] == [{"name": "bash", "description": "run",
                           "parameters": {"type": "object"}, "strict": None}]
    assert n["tool_choice"] == {"type": "tool", "data": {"name": "bash"}}
    assert n["sampling"] == {"temperature": 1.0, "top_p": 0.5, "top_k": None}
    assert n["output"] == {"max_output_tokens": 100,
                           "response_format": {"type": "json_object"}}
    assert n["reasoning"] == {"effort": "low", "raw": None}
    assert n["stream"] is True
    for choice in ("auto", "none", "required"):
        body = {"messages": [], "tool_choice": choice}
        assert request_to_neutral(body)["tool_choice"] == {"type": choice}
    assert request_to_neutral({"messages": []})["tool_choice"] is None


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    n = request_to_neutral({"messages": [], "max_tokens": 5, "max_completion_tokens": 7})
    assert n["output"]["max_output_tokens"] == 7


def test_the_body_is_not_modified() -> None:
    body = {"messages": [{"role": "assistant", "tool_calls": [TOOL_CALL]}]}
    before = json.dumps(body, sort_keys=True)
    request_to_neutral(body)
    assert json.dumps(body, sort_keys=True) == before


def test_a_judge_request_becomes_an_openai_body() -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "V", "schema": {}}}
    body = neutral_to_request({
        "model": "judge:j", "stream": False,
        "instructions": [{"role": "system", "content": [{"type": "text", "text": "judge"}]}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "transcript"}]}],
        "tools": [], "tool_choice": None,
        "sampling": {"temperature": None, "top_p": None, "top_k": None},
        "output": {"max_output_tokens": 4096, "response_format": schema},
        "reasoning": {"effort": None, "raw": None},
    })
    assert body == {
        "messages": [{"role": "system", "content": "judge"},
                     {"role": "user", "content": "transcript"}],
        "stream": False, "max_tokens": 4096, "response_format": schema,
    }


def test_neutral_tool_traffic_becomes_openai_messages_again() -> None:
    n = request_to_neutral({"messages": [
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {}}}],
        "tool_choice": "auto"})
    body = neutral_to_request(n)
    assert body["messages"] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]
    assert body["tools"] == [{"type": "function", "function": {"name": "bash",
                                                               "parameters": {}}}]
    assert body["tool_choice"] == "auto"


def completion(**message: object) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}}


def test_a_completion_becomes_a_neutral_answer_with_our_id() -> None:
    agg = completion_to_neutral(completion(content='{"escalate": false}'), response_id="t1")
    assert agg == {
        "id": "t1", "model": "m",
        "outputs": [{"role": "assistant", "stop_reason": "end_turn",
                     "content": [{"type": "text", "text": '{"escalate": false}'}]}],
        "usage": {"input_tokens": 10, "output_tokens": 4, "total_tokens": 14,
                  "reasoning_tokens": None},
    }


def test_a_tool_calling_completion_keeps_its_calls() -> None:
    agg = completion_to_neutral(completion(content=None, tool_calls=[TOOL_CALL]),
                                response_id="t")
    out = agg["outputs"][0]
    assert out["stop_reason"] == "tool_use"
    assert out["content"] == [{"type": "tool_call", "id": "call_1", "name": "bash",
                               "arguments": {"command": "pytest -q"}}]


def test_a_neutral_answer_becomes_a_completion() -> None:
    agg = completion_to_neutral(completion(content="hello"), response_id="t")
    back = neutral_to_completion(agg, model="fallback")
    assert back["choices"][0]["message"] == {"role": "assistant", "content": "hello"}
    assert back["choices"][0]["finish_reason"] == "stop"
    assert back["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
    assert neutral_to_completion({"outputs": []}, model="m")["model"] == "m"

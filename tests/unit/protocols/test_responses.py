"""Chat completions → Responses ``response`` objects, checked with the official SDK's types."""

from __future__ import annotations

import httpx2
import openai
import pytest
from openai.types.responses import Response

from humpyard.protocols.responses import encode_response, encode_usage, error_body
from humpyard.protocols.responses_request import response_context

NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
             "tools": [{"type": "function", "name": "spawn_agent",
                        "parameters": {"type": "object", "properties": {}}}]}
REQUEST = {"model": "gpt-test", "input": "hi", "instructions": "be brief",
           "tools": [{"type": "function", "name": "exec_command", "parameters": {}},
                     NAMESPACE, {"type": "custom", "name": "apply_patch"}],
           "temperature": 0.5, "metadata": {"k": "v"}, "max_output_tokens": 99,
           "reasoning": {"effort": "low"}, "prompt_cache_key": "pck"}
CTX = response_context(REQUEST)


def completion(message, finish="stop", usage=None):
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "up",
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": finish}],
            "usage": usage or {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}


def encode(message, **kw):
    body = encode_response(completion(message, **kw), CTX, response_id="resp_abc",
                           created_at=1_700_000_000)
    return body, Response.model_validate(body)


def test_text_answer():
    body, parsed = encode({"content": "hello"})
    assert parsed.output_text == "hello" and parsed.status == "completed"
    assert parsed.id == "resp_abc" and parsed.model == "gpt-test"
    assert body["output"] == [{"type": "message", "id": "msg_abc", "role": "assistant",
                               "status": "completed", "content": [
                                   {"type": "output_text", "text": "hello", "annotations": [],
                                    "logprobs": []}]}]
    # the request's options are echoed, as OpenAI does
    assert parsed.instructions == "be brief" and parsed.temperature == 0.5
    assert parsed.metadata == {"k": "v"} and parsed.max_output_tokens == 99
    assert parsed.reasoning is not None and parsed.reasoning.effort == "low"
    assert parsed.store is False and parsed.prompt_cache_key == "pck"
    assert [t.type for t in parsed.tools] == ["function", "namespace", "custom"]


def test_tool_calls_map_back_to_namespace_and_custom():
    _, parsed = encode({"content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'}},
        {"id": "call_2", "type": "function",
         "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"}},
        {"id": "call_3", "type": "function",
         "function": {"name": "apply_patch", "arguments": '{"input": "*** Begin Patch"}'}},
    ]}, finish="tool_calls")
    first, second, third = parsed.output
    assert first.type == "function_call" and first.name == "exec_command"
    assert first.call_id == "call_1" and first.arguments == '{"cmd":"ls"}'
    assert first.namespace is None
    assert second.type == "function_call" and second.name == "spawn_agent"
    assert second.namespace == "multi_agent_v1"
    assert third.type == "custom_tool_call" and third.input == "*** Begin Patch"
    assert len({first.id, second.id, third.id}) == 3


def test_reasoning_and_refusal():
    _, parsed = encode({"content": None, "refusal": "I can't", "reasoning_content": "hmm"})
    reasoning, message = parsed.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "hmm"
    assert message.type == "message" and message.content[0].type == "refusal"
    assert message.content[0].refusal == "I can't"


def test_length_makes_an_incomplete_response():
    _, parsed = encode({"content": "cut"}, finish="length")
    assert parsed.status == "incomplete"
    assert parsed.incomplete_details is not None
    assert parsed.incomplete_details.reason == "max_output_tokens"


def test_usage_with_cache_and_reasoning_tokens():
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
             "prompt_tokens_details": {"cached_tokens": 60},
             "completion_tokens_details": {"reasoning_tokens": 7},
             "cache_creation_input_tokens": 30}
    _, parsed = encode({"content": "x"}, usage=usage)
    assert parsed.usage is not None
    assert parsed.usage.input_tokens == 100 and parsed.usage.output_tokens == 20
    assert parsed.usage.total_tokens == 120
    assert parsed.usage.input_tokens_details.cached_tokens == 60
    assert parsed.usage.input_tokens_details.cache_write_tokens == 30
    assert parsed.usage.output_tokens_details.reasoning_tokens == 7
    assert encode_usage(None)["total_tokens"] == 0


@pytest.mark.parametrize("odd", [{}, {"choices": []}, {"choices": ["x"]},
                                 {"choices": [{"message": {"tool_calls": [None, {}]}}]}])
def test_odd_upstream_output_never_raises(odd):
    body = encode_response(odd, CTX, response_id="resp_x", created_at=1)
    Response.model_validate(body)


def test_the_sdk_reads_our_response_and_errors():
    """``responses.create`` parses what we send; our error body becomes the SDK's error."""
    answer = encode_response(completion({"content": "hello"}), CTX, response_id="resp_abc",
                             created_at=1)

    def handler(request: httpx2.Request) -> httpx2.Response:
        if b'"fail"' in request.content:
            return httpx2.Response(400, json=error_body(400, "store: true is not supported",
                                                        param="store"))
        return httpx2.Response(200, json=answer)

    with httpx2.Client(transport=httpx2.MockTransport(handler)) as http:
        client = openai.OpenAI(api_key="k", base_url="http://gw.test/v1", http_client=http,
                               max_retries=0)
        got = client.responses.create(model="gpt-test", input="hi")
        assert got.output_text == "hello"
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="gpt-test", input="fail")
    assert info.value.param == "store" and "store: true" in info.value.message

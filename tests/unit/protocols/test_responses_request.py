"""OpenAI Responses API requests → OpenAI chat bodies: input items, tools, options, refusals."""

from __future__ import annotations

import json

import pytest

from humpyard.errors import RequestError
from humpyard.protocols.openai import validate_chat
from humpyard.protocols.responses_request import decode_request, response_context
from humpyard.protocols.system_fold import reminder

FN = {"type": "function", "name": "exec_command", "description": "Run a command",
      "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
      "strict": False}
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
             "tools": [{"type": "function", "name": "spawn_agent",
                        "parameters": {"type": "object", "properties": {}}}]}
WEB = {"type": "web_search", "external_web_access": True}


def body(**fields):
    base = {"model": "gpt-test", "input": "hi"}
    base.update(fields)
    return base


def decode(**fields):
    out, notes = decode_request(body(**fields))
    validate_chat(out)  # whatever the decoder makes, the chat path takes
    return out, notes


def refused(**fields) -> str:
    with pytest.raises(RequestError) as info:
        decode_request(body(**fields))
    assert info.value.status == 400
    return info.value.message


def msg(role, *parts):
    return {"type": "message", "role": role,
            "content": [{"type": "input_text" if role != "assistant" else "output_text",
                         "text": p} for p in parts]}


# --- input ----------------------------------------------------------------------


def test_string_input_and_instructions():
    out, notes = decode(instructions="be brief")
    assert out == {"model": "gpt-test", "messages": [{"role": "system", "content": "be brief"},
                                                     {"role": "user", "content": "hi"}]}
    assert notes == []


def test_message_items_with_every_role():
    out, _ = decode(input=[msg("developer", "rules"), msg("system", "more rules"),
                           msg("user", "a", "b"), msg("assistant", "ok"),
                           {"role": "user", "content": "plain"}])
    assert out["messages"] == [
        {"role": "system", "content": "rules\n\nmore rules"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "plain"}]


def test_developer_message_after_the_first_turn_is_folded():
    out, notes = decode(input=[msg("user", "go"), msg("assistant", "done"),
                               msg("developer", "sandbox changed"), msg("user", "again")])
    assert out["messages"][-1] == {"role": "user",
                                   "content": reminder("sandbox changed") + "\nagain"}
    assert any("folded into user turns" in n for n in notes)


def test_images_and_files():
    out, _ = decode(input=[{"role": "user", "content": [
        {"type": "input_text", "text": "what is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "low"},
        {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JV"},
    ]}])
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO",
                                            "detail": "low"}},
        {"type": "file", "file": {"filename": "a.pdf",
                                  "file_data": "data:application/pdf;base64,JV"}}]


def test_function_call_round_trip_items():
    out, notes = decode(tools=[FN], input=[
        msg("user", "list files"),
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command",
         "arguments": '{"cmd":"ls"}'},
        {"type": "function_call", "call_id": "c2", "name": "exec_command",
         "arguments": '{"cmd":"pwd"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "/home"}]},
    ])
    assert out["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'}},
            {"id": "c2", "type": "function",
             "function": {"name": "exec_command", "arguments": '{"cmd":"pwd"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "c2", "content": "/home"}]
    assert "reasoning items dropped: the upstream takes none" in notes
    assert "encrypted reasoning content dropped: only OpenAI can read it" in notes


def test_assistant_text_then_call_share_one_message():
    out, _ = decode(tools=[FN], input=[
        msg("user", "q"), msg("assistant", "Let me look."),
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"}])
    assert out["messages"][1]["content"] == "Let me look."
    assert [c["id"] for c in out["messages"][1]["tool_calls"]] == ["c1"]


def test_tool_output_images_move_to_a_user_message():
    out, notes = decode(input=[
        msg("user", "q"),
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_image", "image_url": "https://x.test/a.png"}]}])
    assert out["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": ""},
        {"role": "user", "content": [{"type": "image_url",
                                      "image_url": {"url": "https://x.test/a.png"}}]}]
    assert any("images moved" in n for n in notes)


# --- tools ------------------------------------------------------------------------


def test_function_namespace_and_custom_tools():
    custom = {"type": "custom", "name": "apply_patch", "description": "Patch files",
              "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}
    out, notes = decode(tools=[FN, NAMESPACE, custom, WEB], tool_choice="auto",
                        parallel_tool_calls=False)
    names = [t["function"]["name"] for t in out["tools"]]
    assert names == ["exec_command", "multi_agent_v1__spawn_agent", "apply_patch"]
    assert out["tools"][0]["function"] == {
        "name": "exec_command", "description": "Run a command",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}
    patch = out["tools"][2]["function"]
    assert patch["parameters"]["required"] == ["input"]
    assert "lark grammar" in patch["description"] and "start: /.+/" in patch["description"]
    assert out["tool_choice"] == "auto" and out["parallel_tool_calls"] is False
    assert notes == ["built-in tool 'web_search' dropped: the upstream cannot run it"]


def test_namespaced_and_custom_calls_in_history():
    custom = {"type": "custom", "name": "apply_patch"}
    out, _ = decode(tools=[NAMESPACE, custom], input=[
        msg("user", "q"),
        {"type": "function_call", "call_id": "c1", "name": "spawn_agent",
         "namespace": "multi_agent_v1", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "spawned"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch",
         "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"}])
    calls = [m["tool_calls"][0]["function"] for m in out["messages"] if m.get("tool_calls")]
    assert calls == [{"name": "multi_agent_v1__spawn_agent", "arguments": "{}"},
                     {"name": "apply_patch",
                      "arguments": json.dumps({"input": "*** Begin Patch"})}]


def test_named_tool_choice():
    out, _ = decode(tools=[FN, NAMESPACE],
                    tool_choice={"type": "function", "name": "spawn_agent",
                                 "namespace": "multi_agent_v1"})
    assert out["tool_choice"] == {"type": "function",
                                  "function": {"name": "multi_agent_v1__spawn_agent"}}


def test_context_maps_names_back():
    ctx = response_context(body(tools=[FN, NAMESPACE, {"type": "custom", "name": "patch"}]))
    assert ctx.names.lookup("multi_agent_v1__spawn_agent").namespace == "multi_agent_v1"
    assert ctx.names.lookup("multi_agent_v1__spawn_agent").name == "spawn_agent"
    assert ctx.names.lookup("patch").custom
    assert ctx.names.lookup("exec_command").namespace is None
    assert ctx.model == "gpt-test"


# --- options ----------------------------------------------------------------------


def test_options():
    out, notes = decode(max_output_tokens=500, temperature=1.5, top_p=0.9,
                        reasoning={"effort": "high", "summary": "auto"},
                        text={"format": {"type": "json_schema", "name": "answer",
                                         "schema": {"type": "object"}, "strict": True}},
                        metadata={"k": "v"}, include=["reasoning.encrypted_content"],
                        store=False, prompt_cache_key="pck", stream=True)
    assert out["max_tokens"] == 500 and out["temperature"] == 1.5 and out["top_p"] == 0.9
    assert out["reasoning_effort"] == "high"
    assert out["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": {"type": "object"}, "strict": True}}
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    assert "metadata" not in out and "store" not in out and "prompt_cache_key" not in out
    assert notes == [
        "reasoning.summary ignored: the upstream returns no reasoning summaries",
        "include 'reasoning.encrypted_content' not honoured: the upstream returns no such data",
        "prompt_cache_key not forwarded: it steers OpenAI's own cache routing"]


def test_json_object_and_text_formats():
    assert decode(text={"format": {"type": "json_object"}})[0]["response_format"] == {
        "type": "json_object"}
    assert "response_format" not in decode(text={"format": {"type": "text"}})[0]


def test_user_forwarded_only_when_asked():
    out, notes = decode(user="u-1", safety_identifier="s-1")
    assert "user" not in out and "safety_identifier" not in out
    assert "user not forwarded: client identifiers stay at the gateway" in notes
    out, _ = decode_request(body(user="u-1", safety_identifier="s-1"), forward_user=True)
    assert out["user"] == "u-1" and out["safety_identifier"] == "s-1"


def test_unknown_fields_are_noted():
    _, notes = decode(client_metadata={"session_id": "s"}, service_tier="auto")
    assert notes == ["client_metadata ignored: not translated to the upstream",
                     "service_tier ignored: not translated to the upstream"]


# --- refusals ---------------------------------------------------------------------


STATELESS = ("the gateway keeps no responses: send store: false (or leave it out) and the "
             "whole conversation in input")


@pytest.mark.parametrize(("fields", "message"), [
    ({"store": True}, f"store: true is not supported: {STATELESS}"),
    ({"previous_response_id": "resp_1"}, f"previous_response_id: not supported: {STATELESS}"),
    ({"conversation": "conv_1"}, f"conversation: not supported: {STATELESS}"),
    ({"prompt": {"id": "pmpt_1"}}, f"prompt: not supported: {STATELESS}"),
    ({"background": True}, "background: true is not supported: the gateway answers in the "
                           "request"),
    ({"store": "no"}, "store: must be a boolean"),
    ({"model": ""}, "model: required, a non-empty string"),
    ({"input": None}, "input: required"),
    ({"input": 5}, "input: must be a string or a list of items"),
    ({"input": []}, "input: required: at least one message or item"),
    ({"input": [{"type": "message", "role": "tool", "content": "x"}]},
     "input[0].role: must be one of user, assistant, system, developer, got 'tool'"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]},
     f"input[0].type: item references are not supported: {STATELESS}"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]},
     "input[0].type: 'web_search_call' items are not supported"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
     "input[0].call_id: required"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
     "input[0].content[0].image_url: required (file_id images are not supported)"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
     "input[0].content[0].type: unsupported content part 'input_audio'"),
    ({"tools": [WEB]}, "tools[0].type: built-in tool 'web_search' is not supported: the "
                       "gateway's upstreams run no hosted tools; only function, custom and "
                       "namespace tools are"),
    ({"tools": [FN], "tool_choice": {"type": "web_search"}},
     "tool_choice.type: built-in tool 'web_search' is not supported: the gateway's upstreams "
     "run no hosted tools"),
    ({"tools": [FN], "tool_choice": {"type": "function", "name": "nope"}},
     "tool_choice.name: no tool named 'nope' in tools"),
    ({"tool_choice": "required"},
     "tool_choice: 'required' needs at least one function tool in tools"),
    ({"tools": [{"type": "hologram"}]}, "tools[0].type: unknown tool type 'hologram'"),
    ({"tools": [FN, FN]}, "tools: two tools are named 'exec_command'"),
    ({"max_output_tokens": 0}, "max_output_tokens: must be a positive integer"),
    ({"temperature": 3}, "temperature: must be between 0 and 2, got 3"),
    ({"reasoning": {"effort": "huge"}},
     "reasoning.effort: must be one of none, minimal, low, medium, high, xhigh, max, "
     "got 'huge'"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}},
     "text.format.schema: required object (a JSON schema)"),
    ({"include": "all"}, "include: must be a list of strings"),
    ({"stream": "yes"}, "stream: must be a boolean"),
])
def test_refusals_name_the_field(fields, message):
    assert refused(**fields) == message

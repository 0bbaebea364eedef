"""Replay every captured client request (tests/fixtures) through the decoders.

Each file is a request as Claude Code 2.1.197 or Codex CLI 0.171.0 sent it
(``tests/agents/capture.py``). Every one must decode; what it decodes to must
pass the chat validator and encode for an Anthropic upstream as the
``anthropic`` SDK's request type accepts; the facts the issue names are
checked on the real shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest
from anthropic.types import MessageCreateParams
from openai.types.responses import Response

from humpyard.protocols.anthropic_request import BILLING_HEADER
from humpyard.protocols.anthropic_request import decode_request as decode_messages
from humpyard.protocols.anthropic_upstream import encode_request
from humpyard.protocols.openai import validate_chat
from humpyard.protocols.responses import encode_response
from humpyard.protocols.responses_request import decode_request as decode_responses
from humpyard.protocols.responses_request import response_context

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CLAUDE = sorted((FIXTURES / "claude_code").glob("*.json"))
CODEX = sorted((FIXTURES / "codex").glob("*.json"))
PARAMS = pydantic.TypeAdapter(MessageCreateParams)


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_corpus_is_there():
    assert len(CLAUDE) >= 4 and len(CODEX) >= 3
    clients = {load(p)["client"] for p in CLAUDE + CODEX}
    assert clients == {"claude-code 2.1.197", "codex-cli 0.171.0"}


def to_anthropic_upstream(chat: dict) -> dict:
    out, _ = encode_request(chat, model="claude-sonnet-4-5")
    PARAMS.validate_python(out)
    return out


@pytest.mark.parametrize("path", CLAUDE, ids=lambda p: p.name)
def test_claude_code_requests_replay(path):
    fixture = load(path)
    assert fixture["path"] == "/v1/messages"
    body = fixture["body"]
    chat, notes = decode_messages(body)
    validate_chat(chat)
    roles = [m["role"] for m in chat["messages"]]
    assert roles[0] == "system" and "system" not in roles[1:]  # mid-conversation ones folded
    assert not chat["messages"][0]["content"].startswith(BILLING_HEADER)
    assert BILLING_HEADER not in json.dumps(chat)
    assert "user" not in chat  # metadata.user_id carries a device id
    assert chat["reasoning_effort"] == body["output_config"]["effort"]
    assert chat["max_tokens"] == body["max_tokens"]
    assert "cache_control dropped: the upstream takes no prompt-caching marks" in notes
    assert any("folded into user turns" in n for n in notes)
    assert {t["function"]["name"] for t in chat["tools"]} >= {"Bash", "Read", "Agent"}
    to_anthropic_upstream(chat)
    kept, _ = decode_messages(body, keep_billing_header=True)
    assert kept["messages"][0]["content"].startswith(BILLING_HEADER)


def test_claude_code_tool_round_trip_carries_the_result():
    chat, notes = decode_messages(load(FIXTURES / "claude_code" / "tool_round_trip.2.json")
                                  ["body"])
    [call] = [c for m in chat["messages"] for c in m.get("tool_calls", [])]
    [result] = [m for m in chat["messages"] if m["role"] == "tool"]
    assert call["function"]["name"] == "Read" and result["tool_call_id"] == call["id"]
    assert "the note says 42" in result["content"]
    assert "thinking blocks in history dropped: the upstream takes none" in notes


@pytest.mark.parametrize("path", CODEX, ids=lambda p: p.name)
def test_codex_requests_replay(path):
    fixture = load(path)
    assert fixture["path"] == "/v1/responses"
    body = fixture["body"]
    assert body["store"] is False and body["stream"] is True
    chat, notes = decode_responses(body)
    validate_chat(chat)
    roles = [m["role"] for m in chat["messages"]]
    assert roles[0] == "system" and "system" not in roles[1:]
    assert "Codex CLI" in chat["messages"][0]["content"]  # the developer message
    names = {t["function"]["name"] for t in chat["tools"]}
    assert "exec_command" in names and "multi_agent_v1__spawn_agent" in names
    assert "built-in tool 'web_search' dropped: the upstream cannot run it" in notes
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    to_anthropic_upstream(chat)
    # an answer to it is a response the SDK accepts, naming the namespaced tool back
    answer = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"}}]}}]}
    response = Response.model_validate(encode_response(
        answer, response_context(body), response_id="resp_1", created_at=1))
    assert response.output[0].type == "function_call"
    assert response.output[0].namespace == "multi_agent_v1"


def test_codex_tool_round_trip_carries_the_output():
    body = load(FIXTURES / "codex" / "tool_round_trip.2.json")["body"]
    chat, notes = decode_responses(body)
    assistant, tool = chat["messages"][-2:]
    assert assistant["tool_calls"][0]["function"]["name"] == "exec_command"
    assert tool == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"],
                    "content": tool["content"]}
    assert "the note says 42" in tool["content"]
    assert "reasoning items dropped: the upstream takes none" in notes
    assert "encrypted reasoning content dropped: only OpenAI can read it" in notes

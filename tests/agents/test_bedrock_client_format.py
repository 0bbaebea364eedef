"""Claude Code configured for Amazon Bedrock, unmodified, through the real gateway.

``CLAUDE_CODE_USE_BEDROCK=1`` with ``ANTHROPIC_BEDROCK_BASE_URL`` at humpyard and
``CLAUDE_CODE_SKIP_BEDROCK_AUTH=1`` (no SigV4): Claude Code posts InvokeModel
requests to ``/model/{modelId}/invoke-with-response-stream`` and reads the answer
as Bedrock's event stream. Its key is the Bedrock API key variable
(``AWS_BEARER_TOKEN_BEDROCK``, sent as ``Authorization: Bearer``). The Anthropic
variables point at a dead port, so every answer must have come the Bedrock way.
Upstreams: a fake Anthropic Messages provider (Claude Code's own body goes
through) and a fake OpenAI one (translated both ways).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agents.harness import AgentRun, run_claude
from tests.support.anthropic_steps import MESSAGES, message, tool_use
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway
from tests.support.steps import Exchange, Step, agent_turn

KEY = "sk-bedrock-agent-key-0123456789"
NOTE = "the note says 42"
PROFILE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
DEAD = "http://127.0.0.1:9"


def config(upstream: str, protocol: str) -> str:
    return f"""
[providers.fake]
base_url = "{upstream}"
protocol = "{protocol}"
api_key_env = "UP_KEY"

[targets.coder]
endpoints = [{{ provider = "fake", model = "fake-coder" }}]

[routes.auto]
targets = ["coder"]

[[select]]
name = "bedrock-claude"
when = {{ model = "*anthropic.claude-*" }}
route = "auto"

[keys.agent]
key_env = "AGENT_KEY"
admin = true
"""


def bedrock_claude(url: str, prompt: str, workdir: Path, key_via: str = "bearer") -> AgentRun:
    """``claude -p`` in Bedrock mode against ``url``, the key as a Bedrock API key
    (``key_via="bearer"``) or in ``ANTHROPIC_CUSTOM_HEADERS`` (``"custom_header"``)."""
    key = ({"AWS_BEARER_TOKEN_BEDROCK": KEY} if key_via == "bearer"
           else {"ANTHROPIC_CUSTOM_HEADERS": f"x-api-key: {KEY}"})
    return run_claude(DEAD, prompt, workdir=workdir, model=PROFILE, api_key="sk-unused",
                      extra_env={"CLAUDE_CODE_USE_BEDROCK": "1",
                                 "ANTHROPIC_BEDROCK_BASE_URL": url,
                                 "CLAUDE_CODE_SKIP_BEDROCK_AUTH": "1",
                                 "AWS_REGION": "us-east-1", **key})


def served_decisions(gw: Running, count: int) -> list[dict[str, Any]]:
    """Every decision once ``count`` Bedrock requests are recorded (a stream's record
    closes as it ends, which may be after the agent has its answer)."""
    deadline = time.monotonic() + 10
    while True:
        found = gw.decisions()
        if sum(d["protocol"] == "bedrock" for d in found) >= count:
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.02)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "note.txt").write_text(NOTE + "\n")
    return tmp_path


def _tool_results(body: Mapping[str, Any]) -> list[str]:
    out = []
    for m in body.get("messages") or []:
        if m.get("role") == "user" and isinstance(m.get("content"), list):
            for block in m["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out.append(json.dumps(block.get("content")))
    return out


@dataclass(frozen=True)
class AnthropicAgentTurn(Step):
    """An Anthropic model as a coding agent needs one: after a tool result, a text
    quoting it; else, when ``tool`` is offered, a call of it; else ``text``."""

    tool: str
    arguments: Mapping[str, Any]
    text: str = "hello from the fake model"

    async def respond(self, ex: Exchange) -> bool:
        body = ex.request.json if isinstance(ex.request.json, dict) else {}
        results = _tool_results(body)
        if results:
            return await message(f"tool said: {results[-1]}").respond(ex)
        if any(t.get("name") == self.tool for t in body.get("tools") or []):
            return await message(tool_use(self.tool, self.arguments, "toolu_agent_1")
                                 ).respond(ex)
        return await message(self.text).respond(ex)


@pytest.mark.parametrize("key_via", ["bearer", "custom_header"])
def test_claude_code_bedrock_plain_turn(workdir, key_via):
    with FakeUpstream(default=message("plain answer")) as up:
        with running_gateway(config(up.url, "anthropic"),
                             env={"AGENT_KEY": KEY, "UP_KEY": "sk-up"}, admin_key=KEY) as gw:
            run = bedrock_claude(gw.url, "Say hello", workdir, key_via)
            assert run.ok, run.transcript
            decisions = served_decisions(gw, len(up.requests_to(MESSAGES)))
    assert run.result == "plain answer"
    [sent] = up.requests_to(MESSAGES)
    body = sent.json
    assert body["model"] == "fake-coder" and body["stream"] is True
    assert "anthropic_version" not in body and "anthropic_beta" not in body
    betas = sent.headers["anthropic-beta"].split(",")
    assert "claude-code-20250219" in betas and len(betas) > 1  # header and body betas
    assert sent.headers["x-api-key"] == "sk-up"
    # Claude Code also lists Bedrock's inference profiles (the control plane, with no
    # key): humpyard serves no such path, and Claude Code goes on (docs/clients.md).
    [listing] = [d for d in decisions if d["protocol"] != "bedrock"]
    assert listing["status"] == 404 and "GET /inference-profiles" in listing["error"]
    [d] = [d for d in decisions if d["protocol"] == "bedrock"]
    assert (d["protocol"], d["route"], d["rule"], d["key_id"], d["status"], d["model"]) == \
        ("bedrock", "auto", "bedrock-claude", "agent", 200, PROFILE)
    assert d["session_id"] and d["stream"] is True


def test_claude_code_bedrock_tool_round_trip(workdir):
    step = AnthropicAgentTurn("Read", {"file_path": str(workdir / "note.txt")})
    with FakeUpstream(default=step) as up:
        with running_gateway(config(up.url, "anthropic"),
                             env={"AGENT_KEY": KEY, "UP_KEY": "sk-up"}, admin_key=KEY) as gw:
            run = bedrock_claude(gw.url, "Read note.txt and tell me what it says", workdir)
            assert run.ok, run.transcript
            decisions = served_decisions(gw, len(up.requests_to(MESSAGES)))
    assert run.result is not None and NOTE in run.result
    first, second = (r.json for r in up.requests_to(MESSAGES))
    assert any(t.get("name") == "Read" for t in first["tools"])
    assert not _tool_results(first)
    assert NOTE in _tool_results(second)[-1]  # the tool's output reached the model
    served = [d for d in decisions if d["protocol"] == "bedrock"]
    assert len(served) == 2 and {d["status"] for d in served} == {200}


def test_claude_code_bedrock_tool_round_trip_to_an_openai_upstream(workdir):
    step = agent_turn("Read", {"file_path": str(workdir / "note.txt")})
    with FakeUpstream(default=step) as up:
        with running_gateway(config(up.url, "openai"),
                             env={"AGENT_KEY": KEY, "UP_KEY": "sk-up"}, admin_key=KEY) as gw:
            run = bedrock_claude(gw.url, "Read note.txt and tell me what it says", workdir)
            assert run.ok, run.transcript
    assert run.result is not None and NOTE in run.result
    first, second = (r.json for r in up.requests_to("/v1/chat/completions"))
    assert any(t["function"]["name"] == "Read" for t in first["tools"])
    assert any(NOTE in str(m["content"]) for m in second["messages"] if m["role"] == "tool")

"""Claude Code and Codex CLI, unmodified, through the real gateway.

Each agent runs non-interactively (``claude -p``, ``codex exec``; the harness
in ``harness.py``) against ``humpyard`` on a real port, in front of a fake
OpenAI chat upstream (``tests/support``) that answers as a model would: a
plain answer, or a call of the agent's own tool and then a text quoting the
tool's output. What the upstream received is checked on every turn: the tool's
output must reach it on the next turn, and the agents' shapes must have been
translated (no billing line, no system message after the first, no hosted
tools), and the decision must say so.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.agents.harness import AgentRun, run_claude, run_codex
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway
from tests.support.steps import Exchange, Step, agent_turn, ok

KEY = "sk-agent-key-0123456789"
NOTE = "the note says 42"
CHAT = "/v1/chat/completions"


def config(upstream: str) -> str:
    return f"""
[providers.fake]
base_url = "{upstream}"

[targets.coder]
endpoints = [{{ provider = "fake", model = "fake-coder" }}]

[routes.auto]
targets = ["coder"]

[[select]]
name = "claude-code"
when = {{ model = "claude-*" }}
route = "auto"

[keys.agent]
key_env = "AGENT_KEY"
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "note.txt").write_text(NOTE + "\n")
    return tmp_path


def serve(up: FakeUpstream) -> AbstractContextManager[Running]:
    return running_gateway(config(up.url), env={"AGENT_KEY": KEY}, admin_key=KEY)


def check(run: AgentRun) -> None:
    assert run.ok, run.transcript


def chat_bodies(up: FakeUpstream) -> list[dict]:
    return [r.json for r in up.requests_to(CHAT)]


def tool_messages(body: dict) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            for m in body["messages"] if m["role"] == "tool"]


# -- Claude Code --------------------------------------------------------------------


def test_claude_code_plain_turn(workdir):
    with FakeUpstream(default=agent_turn(text="plain answer")) as up:
        with serve(up) as gw:
            run = run_claude(gw.url, "Say hello", workdir=workdir, api_key=KEY)
            check(run)
            assert run.result == "plain answer"
            decisions = gw.decisions()
    [body] = chat_bodies(up)
    assert body["model"] == "fake-coder" and body["stream"] is True
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "system" and "system" not in roles[1:]
    assert "x-anthropic-billing-header" not in json.dumps(body)
    assert "user" not in body  # metadata.user_id stays at the gateway
    [d] = decisions
    assert (d["protocol"], d["route"], d["rule"], d["key_id"], d["status"]) == \
        ("anthropic", "auto", "claude-code", "agent", 200)
    assert d["session_id"] and d["stream"] is True
    assert any(n.startswith("cache_control dropped") for n in d["notes"])
    assert any(n.startswith("x-anthropic-billing-header") for n in d["notes"])


def test_claude_code_tool_round_trip(workdir):
    step = agent_turn("Read", {"file_path": str(workdir / "note.txt")})
    with FakeUpstream(default=step) as up:
        with serve(up) as gw:
            run = run_claude(gw.url, "Read note.txt and tell me what it says",
                             workdir=workdir, api_key=KEY)
            check(run)
            decisions = gw.decisions()
    assert run.result is not None and NOTE in run.result
    first, second = chat_bodies(up)
    assert any(t["function"]["name"] == "Read" for t in first["tools"])
    assert not tool_messages(first)
    [output] = tool_messages(second)
    assert NOTE in output  # the tool's output reached the model on the next turn
    [call] = [c for m in second["messages"] if m["role"] == "assistant"
              for c in m.get("tool_calls") or []]
    assert call["id"] == "call_agent_1" and call["function"]["name"] == "Read"
    assert len(decisions) == 2 and {d["status"] for d in decisions} == {200}


SUBAGENT_CONFIG = """
[providers.fake]
base_url = "{url}"
[targets.main]
endpoints = [{{ provider = "fake", model = "fake-main" }}]
[targets.small]
endpoints = [{{ provider = "fake", model = "fake-small" }}]
[routes.auto]
targets = ["main"]
[routes.cheap]
targets = ["small"]
[[select]]
name = "subagents"
when = {{ subagent = true }}
route = "cheap"
[[select]]
name = "claude-code"
when = {{ model = "claude-*" }}
route = "auto"
"""


class DelegateOnce(Step):
    """The main model (``fake-main``) delegates with Claude Code's Agent tool, then
    quotes what came back; the subagent's model (``fake-small``) answers in text."""

    main = agent_turn("Agent", {"description": "Say hi", "prompt": "Say hi to the user",
                                "subagent_type": "general-purpose"})
    sub = ok("hi from the subagent")

    async def respond(self, ex: Exchange) -> bool:
        return await (self.main if ex.model == "fake-main" else self.sub).respond(ex)


def test_claude_code_subagent_calls_are_routed_as_subagents(workdir):
    """Claude Code marks its subagents' calls with x-claude-code-agent-id: the
    ``subagent`` selector sends them to their own route."""
    with FakeUpstream(default=DelegateOnce()) as up, \
            running_gateway(SUBAGENT_CONFIG.format(url=up.url)) as gw:
        run = run_claude(gw.url, "Ask a subagent to say hi", workdir=workdir)
        check(run)
        decisions = gw.decisions()
    assert run.result is not None and "hi from the subagent" in run.result
    by_rule = {d["rule"] for d in decisions}
    assert by_rule == {"claude-code", "subagents"}, decisions
    models = [b["model"] for b in chat_bodies(up)]
    assert models[0] == "fake-main" and "fake-small" in models
    assert all(d["session_id"] == decisions[0]["session_id"] for d in decisions)


# -- Codex CLI ----------------------------------------------------------------------


def test_codex_plain_turn(workdir):
    with FakeUpstream(default=agent_turn(text="plain answer")) as up:
        with serve(up) as gw:
            run = run_codex(gw.url, "Say hello", workdir=workdir, model="auto", api_key=KEY)
            check(run)
            decisions = gw.decisions()
    assert run.result is not None and run.result.strip() == "plain answer"
    [body] = chat_bodies(up)
    assert body["model"] == "fake-coder" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    names = {t["function"]["name"] for t in body["tools"]}
    assert "exec_command" in names and not any(t.get("type") == "web_search"
                                               for t in body["tools"])
    assert any("__" in n for n in names)  # the namespace tool, flattened
    [d] = decisions
    assert (d["protocol"], d["route"], d["key_id"], d["status"]) == \
        ("responses", "auto", "agent", 200)
    assert d["session_id"] and d["stream"] is True
    assert "built-in tool 'web_search' dropped: the upstream cannot run it" in d["notes"]


def test_codex_tool_round_trip(workdir):
    with FakeUpstream(default=agent_turn("exec_command", {"cmd": "cat note.txt"})) as up:
        with serve(up) as gw:
            run = run_codex(gw.url, "Run cat note.txt and tell me what it says",
                            workdir=workdir, model="auto", api_key=KEY)
            check(run)
            decisions = gw.decisions()
    assert run.result is not None and NOTE in run.result
    bodies = chat_bodies(up)
    assert len(bodies) >= 2
    assert not tool_messages(bodies[0])
    [output] = tool_messages(bodies[1])
    assert NOTE in output
    [call] = [c for m in bodies[1]["messages"] if m["role"] == "assistant"
              for c in m.get("tool_calls") or []]
    assert call["id"] == "call_agent_1" and call["function"]["name"] == "exec_command"
    assert {d["protocol"] for d in decisions} == {"responses"}
    assert {d["status"] for d in decisions} == {200}

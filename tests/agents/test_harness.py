"""The real-agent harness against the recording fake provider.

These run the installed Claude Code and Codex CLI end to end (a plain turn and
a tool round trip each) against ``Recorder``, which stands where the gateway
will: they prove the harness works and pin the request shapes the gateway's
``/v1/messages`` and ``/v1/responses`` must accept.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.harness import ROOT, AgentRun, codex_config, run_claude, run_codex
from tests.agents.recorder import Recorder, ToolPlan

NOTE = "the note says 42"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "note.txt").write_text(NOTE + "\n")
    return tmp_path


def check(run: AgentRun) -> None:
    assert run.ok, run.transcript


def test_claude_plain_turn(workdir):
    with Recorder(text="plain answer") as rec:
        run = run_claude(rec.url, "Say hello", workdir=workdir)
    check(run)
    assert run.result == "plain answer"
    [body] = rec.bodies("/v1/messages")
    assert body["model"] == "claude-opus-4-8" and body["stream"] is True
    assert body["messages"][0]["role"] == "user"
    # Claude Code's shape the gateway must take: the billing line, cache marks,
    # a mid-conversation system message, effort and adaptive thinking.
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header:")
    assert any(m["role"] == "system" for m in body["messages"])
    assert body["output_config"]["effort"] and body["thinking"]["type"]
    assert rec.requests[0].method == "HEAD" and rec.requests[0].path == "/"
    key_headers = {r.headers.get("x-api-key") for r in rec.requests if r.method == "POST"}
    assert key_headers == {"sk-ant-harness-key"}


def test_claude_tool_round_trip(workdir):
    with Recorder(tool=ToolPlan("Read", {"file_path": str(workdir / "note.txt")})) as rec:
        run = run_claude(rec.url, "Read note.txt and tell me what it says", workdir=workdir)
    check(run)
    assert run.result is not None and NOTE in run.result
    first, second = rec.bodies("/v1/messages")
    assert any(t["name"] == "Read" for t in first["tools"])
    [result] = [b for m in second["messages"] if isinstance(m["content"], list)
                for b in m["content"] if b.get("type") == "tool_result"]
    assert result["tool_use_id"] == "toolu_fake_1" and NOTE in str(result["content"])


def test_codex_plain_turn(workdir):
    with Recorder(text="plain answer") as rec:
        run = run_codex(rec.url, "Say hello", workdir=workdir)
    check(run)
    assert run.result is not None and run.result.strip() == "plain answer"
    [body] = rec.bodies("/v1/responses")
    assert body["stream"] is True and body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"] and body["prompt_cache_key"]
    types = {t["type"] for t in body["tools"]}
    assert {"function", "namespace", "web_search"} <= types
    assert [i["role"] for i in body["input"] if i["type"] == "message"][:1] == ["developer"]
    [request] = [r for r in rec.requests if r.path == "/v1/responses"]
    assert request.headers["authorization"] == "Bearer sk-harness-key"


def test_codex_tool_round_trip(workdir):
    with Recorder(tool=ToolPlan("exec_command", {"cmd": "cat note.txt"})) as rec:
        run = run_codex(rec.url, "Run cat note.txt and tell me what it says", workdir=workdir)
    check(run)
    assert run.result is not None and NOTE in run.result
    first, second = rec.bodies("/v1/responses")
    [output] = [i for i in second["input"] if i["type"] == "function_call_output"]
    [call] = [i for i in second["input"] if i["type"] == "function_call"]
    assert call["call_id"] == output["call_id"] == "call_fake_1"
    assert NOTE in output["output"]


def test_docs_show_the_codex_config_the_harness_writes():
    doc = (ROOT / "docs" / "clients.md").read_text()
    written = codex_config("http://127.0.0.1:8080", "auto", "HUMPYARD_KEY")
    for line in ('model_provider = "humpyard"', "[model_providers.humpyard]",
                 'base_url = "http://127.0.0.1:8080/v1"', 'wire_api = "responses"',
                 'env_key = "HUMPYARD_KEY"'):
        assert line in written and line in doc

"""Claude Code, unmodified, through humpyard to a Claude model on Amazon Bedrock.

``claude -p`` talks Anthropic Messages to humpyard (``ANTHROPIC_BASE_URL``);
humpyard calls ``FakeBedrock`` (``tests/support``), which checks each call's
SigV4 signature by recomputing it with botocore. A plain turn, and a tool
round trip in which the tool's output must reach Bedrock on the next turn.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agents.harness import run_claude
from tests.support.fake_bedrock import (
    ACCESS_KEY,
    SECRET_KEY,
    SESSION_TOKEN,
    FakeBedrock,
    Reply,
    agent_turn,
)
from tests.support.gateway import running_gateway

NOTE = "the note says 42"
MODEL = "global.anthropic.claude-opus-4-5-20251101-v1:0"


def config(url: str) -> str:
    return f"""
[providers.bedrock]
protocol = "bedrock"
region = "us-east-1"
base_url = "{url}"
[targets.opus]
endpoints = [{{ provider = "bedrock", model = "{MODEL}" }}]
[routes.auto]
targets = ["opus"]
[[select]]
name = "claude-code"
when = {{ model = "claude-*" }}
route = "auto"
"""


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "note.txt").write_text(NOTE + "\n")
    return tmp_path


def test_claude_code_plain_turn_on_bedrock(workdir):
    with FakeBedrock(default=Reply("plain answer")) as bedrock, \
            running_gateway(config(bedrock.url)) as gw:
        run = run_claude(gw.url, "Say hello", workdir=workdir)
        assert run.ok, run.transcript
        decisions = gw.decisions()
    assert run.result == "plain answer"
    calls = [r for r in bedrock.received if r.operation.startswith("invoke")]
    assert calls and all(r.signature_ok for r in bedrock.received)
    main = calls[-1]
    assert main.model == MODEL and main.operation == "invoke-with-response-stream"
    assert main.json["anthropic_version"] == "bedrock-2023-05-31"
    assert "model" not in main.json and "stream" not in main.json
    # Claude Code's cache breakpoints reach Bedrock; its Anthropic-only betas do not
    assert "cache_control" in json.dumps(main.json)
    assert "claude-code-20250219" not in main.json.get("anthropic_beta", [])
    assert {d["status"] for d in decisions} == {200}


def test_claude_code_tool_round_trip_on_bedrock(workdir):
    turn = agent_turn("Read", {"file_path": str(workdir / "note.txt")})
    with FakeBedrock(default=turn) as bedrock, running_gateway(config(bedrock.url)) as gw:
        run = run_claude(gw.url, "Read note.txt and tell me what it says", workdir=workdir)
        assert run.ok, run.transcript
        decisions = gw.decisions()
    assert run.result is not None and NOTE in run.result
    with_tools = [r for r in bedrock.received if r.operation.startswith("invoke")
                  and any(t.get("name") == "Read" for t in r.json.get("tools") or [])]
    first, second = with_tools[0], with_tools[-1]
    assert all(r.signature_ok for r in bedrock.received)
    last_turn = second.json["messages"][-1]["content"]
    [result] = [b for b in last_turn if b.get("type") == "tool_result"]
    assert NOTE in json.dumps(result)  # the tool's output reached Bedrock
    assert "tool_result" not in json.dumps(first.json["messages"])
    assert {d["status"] for d in decisions} == {200}


# Claude Code configured for Bedrock (the client format) through humpyard to Bedrock:
# both of issue 27's halves on one path. The model id Claude Code sends names the route
# through a selector rule; humpyard signs its own call to the fake Bedrock.

BEDROCK_CLIENT_RULE = """
[[select]]
name = "bedrock-format"
when = { model = "*anthropic.claude-*" }
route = "auto"
"""


def bedrock_format_claude(url: str, prompt: str, workdir: Path):
    return run_claude("http://127.0.0.1:9", prompt, workdir=workdir,
                      model="us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                      api_key="sk-unused",
                      extra_env={"CLAUDE_CODE_USE_BEDROCK": "1",
                                 "ANTHROPIC_BEDROCK_BASE_URL": url,
                                 "CLAUDE_CODE_SKIP_BEDROCK_AUTH": "1",
                                 "AWS_REGION": "us-east-1"})


def test_claude_code_in_bedrock_format_plain_turn_to_bedrock(workdir):
    with FakeBedrock(default=Reply("answer by the bedrock way")) as bedrock, \
            running_gateway(config(bedrock.url) + BEDROCK_CLIENT_RULE) as gw:
        run = bedrock_format_claude(gw.url, "Say hello", workdir)
        assert run.ok, run.transcript
        decisions = gw.decisions()
    assert run.result == "answer by the bedrock way"
    calls = [r for r in bedrock.received if r.operation.startswith("invoke")]
    assert calls and all(r.signature_ok for r in bedrock.received)
    assert calls[-1].model == MODEL  # the configured endpoint, not the client's id
    assert "model" not in calls[-1].json and "stream" not in calls[-1].json
    assert any(d["protocol"] == "bedrock" and d["status"] == 200 for d in decisions)


def test_claude_code_in_bedrock_format_tool_round_trip_to_bedrock(workdir):
    turn = agent_turn("Read", {"file_path": str(workdir / "note.txt")})
    with FakeBedrock(default=turn) as bedrock, \
            running_gateway(config(bedrock.url) + BEDROCK_CLIENT_RULE) as gw:
        run = bedrock_format_claude(gw.url, "Read note.txt and tell me what it says", workdir)
        assert run.ok, run.transcript
    assert run.result is not None and NOTE in run.result
    with_tools = [r for r in bedrock.received if r.operation.startswith("invoke")
                  and any(t.get("name") == "Read" for t in r.json.get("tools") or [])]
    assert all(r.signature_ok for r in bedrock.received)
    [result] = [b for b in with_tools[-1].json["messages"][-1]["content"]
                if b.get("type") == "tool_result"]
    assert NOTE in json.dumps(result)

"""The replay corpus: every captured client request through the gateway, over sockets.

Each file in ``tests/fixtures/claude_code`` and ``tests/fixtures/codex`` is a
request as Claude Code or Codex CLI sent it (``tests/fixtures/README.md``). It
is replayed with its own headers (credentials replaced) to the gateway on a
real port, in front of a fake OpenAI chat upstream that answers as a model
would (text, or a call of the agent's tool), streamed as sent and buffered.
Every answer must be well formed: each stream event and every buffered body
validates against the official SDK's own types, in the order the SDK expects;
and the upstream must have received a chat body it can take.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic.types
import httpx
import openai.types.responses
import pydantic
import pytest

from humpyard.protocols.openai import validate_chat
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway
from tests.support.steps import Exchange, Step, agent_turn

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = sorted([*FIXTURES.glob("claude_code/*.json"), *FIXTURES.glob("codex/*.json")])
DROPPED_HEADERS = frozenset({"authorization", "x-api-key", "content-length", "host",
                             "accept-encoding", "connection"})
ANTHROPIC_EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)
RESPONSES_EVENT = pydantic.TypeAdapter(openai.types.responses.ResponseStreamEvent)
CONFIG = """
[providers.fake]
base_url = "{url}"
[targets.coder]
endpoints = [{{ provider = "fake", model = "fake-coder" }}]
[routes.auto]
targets = ["coder"]
[[select]]
name = "everything"
route = "auto"
"""


class AgentTools(Step):
    """The agents' own tools: a call of Read (Claude Code) or exec_command (Codex) when
    offered and not yet answered, a text quoting the tool's output after."""

    read = agent_turn("Read", {"file_path": "/home/dev/project/note.txt"})
    run = agent_turn("exec_command", {"cmd": "ls"})

    async def respond(self, ex: Exchange) -> bool:
        body = ex.request.json if isinstance(ex.request.json, dict) else {}
        names = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        return await (self.read if "Read" in names else self.run).respond(ex)


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream(default=AgentTools()) as u:
        yield u


@pytest.fixture(scope="module")
def gw(up: FakeUpstream) -> Iterator[Running]:
    with running_gateway(CONFIG.format(url=up.url)) as g:
        yield g


def test_the_corpus_has_both_agents():
    assert {p.parent.name for p in CORPUS} == {"claude_code", "codex"}
    assert len(CORPUS) >= 7


def replay(gw: Running, fixture: dict[str, Any], body: dict[str, Any]) -> httpx.Response:
    headers = {k: v for k, v in fixture["headers"].items() if k not in DROPPED_HEADERS}
    with gw.client() as c:
        return c.request(fixture["method"], fixture["path"], json=body, headers=headers)


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        out.append((fields["event"], json.loads(fields["data"])))
    return out


def check_anthropic_stream(events: list[tuple[str, dict[str, Any]]]) -> None:
    for name, data in events:
        assert data["type"] == name
        if name != "ping":  # Anthropic's keep-alive; the SDK skips it
            ANTHROPIC_EVENT.validate_python(data)
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert "error" not in names


def check_responses_stream(events: list[tuple[str, dict[str, Any]]]) -> None:
    for name, data in events:
        assert data["type"] == name
        RESPONSES_EVENT.validate_python(data)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    names = [n for n, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "buffered"])
def test_replay(gw, up, path, stream):
    fixture = json.loads(path.read_text())
    before = len(up.requests_to("/v1/chat/completions"))
    r = replay(gw, fixture, {**fixture["body"], "stream": stream})
    assert r.status_code == 200, r.text
    assert r.headers["x-humpyard-route"] == "auto"
    anthropic_path = fixture["path"] == "/v1/messages"
    if stream:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.text)
        (check_anthropic_stream if anthropic_path else check_responses_stream)(events)
    elif anthropic_path:
        anthropic.types.Message.model_validate(r.json())
    else:
        answer = openai.types.responses.Response.model_validate(r.json())
        assert answer.status == "completed" and answer.output
    [sent] = [q.json for q in up.requests_to("/v1/chat/completions")[before:]]
    validate_chat(sent)
    assert sent["model"] == "fake-coder" and sent.get("stream", False) is stream
    assert "cache_control" not in json.dumps(sent)

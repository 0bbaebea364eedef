"""Claude Code and Codex CLI, unmodified, through a stream that starts with SSE
comments: the upstream's first content comes after 2.5 s, so the gateway sends
the 200 head and ``: keep-alive`` comments first (issue 26, ADR 0020). Both
agents must skip the comments and take the answer as usual."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.harness import run_claude, run_codex
from tests.agents.test_through_gateway import KEY, check, serve
from tests.support.fake_upstream import FakeUpstream
from tests.support.steps import agent_turn, delay

SLOW = 2.5  # seconds before the upstream answers: past the first heartbeat (1 s)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def test_claude_code_takes_a_stream_that_starts_with_comments(workdir):
    with FakeUpstream(default=delay(SLOW, agent_turn(text="plain answer"))) as up:
        with serve(up) as gw:
            run = run_claude(gw.url, "Say hello", workdir=workdir, api_key=KEY)
            check(run)
            decisions = gw.decisions()
    assert run.result == "plain answer"
    assert [d["status"] for d in decisions] == [200]


def test_codex_takes_a_responses_stream_that_starts_with_comments(workdir):
    with FakeUpstream(default=delay(SLOW, agent_turn(text="plain answer"))) as up:
        with serve(up) as gw:
            run = run_codex(gw.url, "Say hello", workdir=workdir, model="auto", api_key=KEY)
            check(run)
            decisions = gw.decisions()
    assert run.result is not None and run.result.strip() == "plain answer"
    assert [d["status"] for d in decisions] == [200]

"""README.md's Claude Code and Codex CLI lines, as printed, against ``make run``.

``humpyard demo`` (what ``make run`` starts) runs as a subprocess on
``examples/demo.toml``; the README's blocks for each agent are taken from the
file and run in bash exactly as written, with only the gateway's address
changed to the demo's free port (tests never bind fixed ports). Each agent
must answer with the demo's simulated provider's text, and the demo's ledger
must show the route and rule the README promises.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.agents.harness import ROOT, TIMEOUT, ensure_agents
from tests.integration.test_demo import demo

README = ROOT / "README.md"
ADDRESS = "http://127.0.0.1:8080"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
# Not part of what the README asks of a user: keep the agents from phoning home
# during tests (docs/clients.md, "The real agents in the tests").
QUIET_CLAUDE = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
QUIET_CODEX = "\ncheck_for_update_on_startup = false\n"
QUIET_CODEX_TABLES = "\n[analytics]\nenabled = false\n\n[feedback]\nenabled = false\n"


def readme_blocks() -> list[tuple[str, str]]:
    section = README.read_text().split("## Pointing clients at it", 1)[1].split("\n## ", 1)[0]
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(section)]


def block_with(kind: str, text: str) -> str:
    [found] = [body for k, body in readme_blocks() if k == kind and text in body]
    return found


def test_the_readme_opens_with_make_run_and_make_test():
    first = README.read_text().split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in first[:2]] == [["make", "run"], ["make", "test"]]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory):
    """The demo, as ``make run`` starts it, on a free port."""
    tmp = tmp_path_factory.mktemp("demo")
    with demo("--port", "0", "--state-dir", str(tmp / "state"), cwd=tmp) as d:
        out = d.wait_for("Ctrl-C stops everything.")
        url = re.search(r"running at (http://127\.0\.0\.1:\d+)", out)
        assert url is not None, out
        yield url.group(1)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: a git repository (Codex runs in one) with a file in it."""
    repo = tmp_path / "project"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README.txt").write_text("a project\n")
    return repo


def user_env(home: Path, **extra: str) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    path = f"{ensure_agents()}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", "TERM": "dumb", **extra}


def run_block(block: str, gateway: str, cwd: Path, env: dict[str, str]) -> str:
    script = block.replace(ADDRESS, gateway)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout}\n--- stderr\n" \
                                 f"{done.stderr}"
    return done.stdout


def decisions(gateway: str) -> list[dict]:
    return httpx.get(gateway + "/v1/decisions", params={"limit": 5}).json()["decisions"]


def test_the_claude_code_lines(gateway, project, tmp_path):
    block = block_with("sh", "ANTHROPIC_BASE_URL")
    assert f"export ANTHROPIC_BASE_URL={ADDRESS}" in block
    assert "export ANTHROPIC_MODEL=auto" in block and 'claude -p "Say hello"' in block
    out = run_block(block, gateway, project, user_env(tmp_path / "home", **QUIET_CLAUDE))
    assert out.startswith("[sim:steady-medium] you said:"), out
    [last, *_] = decisions(gateway)
    assert (last["protocol"], last["route"], last["status"]) == ("anthropic", "auto", 200)


def test_claude_codes_own_model_names_route_in_the_demo(gateway, project, tmp_path):
    block = block_with("sh", "ANTHROPIC_BASE_URL").replace("export ANTHROPIC_MODEL=auto", "")
    out = run_block(block, gateway, project, user_env(tmp_path / "home", **QUIET_CLAUDE))
    assert out.startswith("[sim:steady-medium] you said:"), out
    [last, *_] = decisions(gateway)
    assert last["model"].startswith("claude-")
    assert (last["route"], last["rule"], last["status"]) == ("auto", "claude-code", 200)


def test_the_codex_lines(gateway, project, tmp_path):
    config = block_with("ini", "wire_api")
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    top, tables = config.split("\n[", 1)
    (home / ".codex" / "config.toml").write_text(
        (top + QUIET_CODEX + "\n[" + tables + QUIET_CODEX_TABLES).replace(ADDRESS, gateway))
    assert '[model_providers.humpyard]' in config and 'wire_api = "responses"' in config
    assert ADDRESS in config
    out = run_block(block_with("sh", "codex exec"), gateway, project, user_env(home))
    assert "[sim:steady-medium] you said: Say hello" in out, out
    [last, *_] = decisions(gateway)
    assert (last["protocol"], last["route"], last["status"]) == ("responses", "auto", 200)
    assert "built-in tool 'web_search' dropped: the upstream cannot run it" in last["notes"]

"""Run the real coding agents non-interactively against a given base URL.

``run_claude`` drives ``claude -p`` (Claude Code) and ``run_codex`` drives
``codex exec`` (Codex CLI), both installed at pinned versions by
``tests/agents/install.sh`` into ``.cache/agents`` (``ensure_agents`` runs it;
it is a no-op once done). Each run gets a fresh home directory and a clean
environment (only ``PATH`` and the locale are inherited, so no developer
credentials or settings leak in), with the agents' network extras off:

- Claude Code: ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` (telemetry, error
  reporting, update checks), ``DISABLE_AUTOUPDATER`` and friends, and
  ``--strict-mcp-config`` with no MCP servers;
- Codex: a ``config.toml`` in a temporary ``CODEX_HOME`` with one
  ``model_providers`` entry (``wire_api = "responses"``) pointed at the URL,
  update checks, analytics, feedback and OpenTelemetry off.

Both return an ``AgentRun`` with the exit code, the outputs and the agent's
final answer. The URL is the gateway's root (``http://host:port``); the
harness adds ``/v1`` where the agent wants it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALL = Path(__file__).with_name("install.sh")
CLAUDE_CODE_VERSION = "2.1.197"
CODEX_VERSION = "0.171.0"
TIMEOUT = 180.0


def agents_dir() -> Path:
    """Where ``install.sh`` puts the agents (``HUMPYARD_AGENTS_DIR`` overrides)."""
    return Path(os.environ.get("HUMPYARD_AGENTS_DIR") or ROOT / ".cache" / "agents")


def ensure_agents() -> Path:
    """Install the agents if needed (idempotent, cached); return their ``bin`` directory.

    Raises ``subprocess.CalledProcessError`` when the install fails (no npm,
    no registry), so a test that needs the agents fails loudly, never skips.
    """
    subprocess.run(["bash", str(INSTALL)], check=True, stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=900)
    return agents_dir() / "node_modules" / ".bin"


@dataclass(frozen=True)
class AgentRun:
    """One finished agent run.

    ``result`` is the agent's final answer as it reported it (Claude Code's
    ``--output-format json`` ``result``; Codex's ``--output-last-message``),
    or None when it reported none. ``is_error`` is Claude Code's own verdict
    (always False for Codex, whose exit code says it).
    """

    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    result: str | None
    is_error: bool = False

    @property
    def transcript(self) -> str:
        """Everything the agent printed, for assertion messages."""
        return f"$ {' '.join(self.argv[:3])} ...\nexit {self.exit_code}\n" \
               f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.is_error


def _base_env(home: Path) -> dict[str, str]:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "LANG": os.environ.get("LANG", "C.UTF-8"), "TERM": "dumb", "NO_COLOR": "1"}
    return env


def run_claude(base_url: str, prompt: str, *, workdir: Path, model: str = "claude-opus-4-8",
               api_key: str = "sk-ant-harness-key", extra_args: Sequence[str] = (),
               extra_env: dict[str, str] | None = None, timeout: float = TIMEOUT) -> AgentRun:
    """``claude -p PROMPT`` against ``base_url`` (its ``ANTHROPIC_BASE_URL``), in ``workdir``.

    Claude Code keeps its default tools; in print mode it may read files in
    ``workdir`` without asking. The key is sent as ``x-api-key``.
    """
    binary = ensure_agents() / "claude"
    with tempfile.TemporaryDirectory(prefix="claude-home-") as home:
        env = _base_env(Path(home)) | {
            "ANTHROPIC_BASE_URL": base_url.rstrip("/"),
            "ANTHROPIC_API_KEY": api_key,
            "CLAUDE_CONFIG_DIR": str(Path(home) / ".claude"),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_BUG_COMMAND": "1",
            **(extra_env or {}),
        }
        argv = [str(binary), "-p", prompt, "--model", model, "--output-format", "json",
                "--strict-mcp-config", *extra_args]
        done = subprocess.run(argv, env=env, cwd=workdir, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    result, is_error = None, False
    try:
        report = json.loads(done.stdout)
    except ValueError:
        report = None
    if isinstance(report, dict):
        result = report.get("result") if isinstance(report.get("result"), str) else None
        is_error = bool(report.get("is_error"))
    return AgentRun(argv, done.returncode, done.stdout, done.stderr, result, is_error)


def codex_config(base_url: str, model: str, env_key: str) -> str:
    """The ``config.toml`` a Codex user writes for the gateway (docs/clients.md shows it)."""
    return f"""\
model = "{model}"
model_provider = "humpyard"
check_for_update_on_startup = false

[model_providers.humpyard]
name = "humpyard"
base_url = "{base_url.rstrip('/')}/v1"
wire_api = "responses"
env_key = "{env_key}"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
"""


def run_codex(base_url: str, prompt: str, *, workdir: Path, model: str = "gpt-test",
              api_key: str = "sk-harness-key", extra_args: Sequence[str] = (),
              extra_env: dict[str, str] | None = None, timeout: float = TIMEOUT) -> AgentRun:
    """``codex exec PROMPT`` against ``base_url`` through a Responses-API provider.

    Runs without approvals or sandbox (``workdir`` is the test's own temporary
    directory, and the commands are whatever the test's fake model asks for).
    The key travels as ``Authorization: Bearer``.
    """
    binary = ensure_agents() / "codex"
    with tempfile.TemporaryDirectory(prefix="codex-home-") as home:
        codex_home = Path(home) / ".codex"
        codex_home.mkdir()
        (codex_home / "config.toml").write_text(codex_config(base_url, model, "HUMPYARD_KEY"))
        last = Path(home) / "last-message.txt"
        env = _base_env(Path(home)) | {"CODEX_HOME": str(codex_home), "HUMPYARD_KEY": api_key,
                                       **(extra_env or {})}
        argv = [str(binary), "exec", "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox", "--color", "never",
                "--output-last-message", str(last), *extra_args, prompt]
        done = subprocess.run(argv, env=env, cwd=workdir, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        result = last.read_text() if last.exists() else None
    return AgentRun(argv, done.returncode, done.stdout, done.stderr, result)

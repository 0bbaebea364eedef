"""Capture request shapes from the real agents into ``tests/fixtures/``.

Run by hand when an agent's pinned version changes::

    .venv/bin/python -m tests.agents.capture

Each scenario runs an agent (``harness``) against the recording fake provider
(``recorder``) and writes every model request it made as one JSON file per
request under ``tests/fixtures/<agent>/``: ``{"client", "method", "path",
"headers", "body"}``. What is written is scrubbed:

- keys (``x-api-key``, ``authorization``) become ``<redacted>``;
- the run's temporary directories become ``/home/dev/project`` and
  ``/home/dev``, and random per-machine ids (Claude Code's ``device_id``,
  Codex's installation id) a fixed stand-in;
- any string longer than ``ELIDE_OVER`` characters (system prompts, tool
  descriptions: the agents' own prose, which the fixtures do not need) keeps
  its first ``ELIDE_KEEP`` characters and says how many were elided, so the
  shapes stay real and the files small.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.agents.harness import (
    CLAUDE_CODE_VERSION,
    CODEX_VERSION,
    ROOT,
    AgentRun,
    run_claude,
    run_codex,
)
from tests.agents.recorder import Recorder, ToolPlan

FIXTURES = ROOT / "tests" / "fixtures"
ELIDE_OVER = 400
ELIDE_KEEP = 160
SECRET_HEADERS = {"x-api-key", "authorization"}
KEPT_HEADERS = re.compile(r"^(anthropic-|x-claude-code-|x-app$|user-agent$|x-codex-|session-id$|"
                          r"thread-id$|originator$|accept$|content-type$|x-api-key$|"
                          r"authorization$|x-client-request-id$)")
FAKE_ID = "0" * 64


def elide(value: Any) -> Any:
    """Shorten long strings everywhere in ``value`` (see the module docstring)."""
    if isinstance(value, str) and len(value) > ELIDE_OVER:
        return f"{value[:ELIDE_KEEP]}… [{len(value) - ELIDE_KEEP} characters elided]"
    if isinstance(value, list):
        return [elide(v) for v in value]
    if isinstance(value, dict):
        return {k: elide(v) for k, v in value.items()}
    return value


def scrub(text: str, paths: dict[str, str]) -> str:
    for real, stand_in in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(real, stand_in)
    text = re.sub(r'(device_id\\{0,3}":\\{0,3}")[0-9a-f]{64}', rf"\g<1>{FAKE_ID}", text)
    return re.sub(r'(installation_id\\{0,3}":\\{0,3}"|x-codex-installation-id":")[0-9a-f-]{36}',
                  r"\g<1>00000000-0000-0000-0000-000000000000", text)


def write(agent: str, name: str, client: str, rec: Recorder, suffix: str,
          paths: dict[str, str]) -> list[Path]:
    out = FIXTURES / agent
    out.mkdir(parents=True, exist_ok=True)
    written = []
    requests = [r for r in rec.requests if r.method == "POST" and r.path.endswith(suffix)]
    for i, r in enumerate(requests, start=1):
        headers = {k: ("<redacted>" if k in SECRET_HEADERS else v)
                   for k, v in sorted(r.headers.items()) if KEPT_HEADERS.match(k)}
        doc = {"client": client, "method": r.method, "path": r.path, "headers": headers,
               "body": elide(r.json)}
        path = out / (f"{name}.json" if len(requests) == 1 else f"{name}.{i}.json")
        path.write_text(scrub(json.dumps(doc, indent=1, ensure_ascii=False), paths) + "\n")
        written.append(path)
    return written


Scenario = Callable[[str, Path], AgentRun]


def capture(agent: str, name: str, client: str, suffix: str,
            recorder: Callable[[Path], Recorder], scenario: Scenario) -> list[Path]:
    with tempfile.TemporaryDirectory(prefix="capture-") as tmp:
        work = Path(tmp).resolve()
        (work / "note.txt").write_text("the note says 42\n")
        with recorder(work) as rec:
            run = scenario(rec.url, work)
        if not run.ok:
            raise SystemExit(f"{agent} {name} failed:\n{run.transcript}")
        return write(agent, name, client, rec, suffix,
                     {str(work): "/home/dev/project", tempfile.gettempdir() + "/": "/home/dev/"})


def main() -> None:
    claude = f"claude-code {CLAUDE_CODE_VERSION}"
    codex = f"codex-cli {CODEX_VERSION}"
    written: list[Path] = []

    def plain(work: Path) -> Recorder:
        return Recorder(text="hi")

    written += capture("claude_code", "plain", claude, "/v1/messages", plain,
                       lambda url, work: run_claude(url, "Say hello", workdir=work))
    written += capture(
        "claude_code", "tool_round_trip", claude, "/v1/messages",
        lambda work: Recorder(tool=ToolPlan("Read", {"file_path": str(work / "note.txt")}),
                              reasoning=True),
        lambda url, work: run_claude(url, "Read note.txt and tell me what it says",
                                     workdir=work))
    written += capture(
        "claude_code", "route_model", claude, "/v1/messages", plain,
        lambda url, work: run_claude(url, "Say hello", workdir=work, model="agent"))
    written += capture("codex", "plain", codex, "/v1/responses", plain,
                       lambda url, work: run_codex(url, "Say hello", workdir=work))
    written += capture(
        "codex", "tool_round_trip", codex, "/v1/responses",
        lambda work: Recorder(tool=ToolPlan("exec_command", {"cmd": "cat note.txt"}),
                              reasoning=True),
        lambda url, work: run_codex(url, "Run cat note.txt and tell me what it says",
                                    workdir=work))
    for path in written:
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()

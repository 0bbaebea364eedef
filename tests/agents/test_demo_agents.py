"""The demo as a newcomer tries it with a coding agent: ``humpyard demo`` (three
simulated providers and the gateway on ``examples/demo.toml``, as ``make run``
starts it) and the real Claude Code and Codex CLI that ``make test`` installs,
each asked to "create hello.txt containing hi" in a scratch directory.

The simulated provider answers with a call of the agent's own tool (Claude
Code's ``Write``, Codex's ``apply_patch`` or ``exec_command``), the agent runs
it, and the simulator closes the turn with a short text: the file exists with
the content asked for, and the agent finished on its own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.harness import ROOT, run_claude, run_codex

ASK = "create hello.txt containing hi"
METADATA_WARNING = "Model metadata for"


class Demo:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.output = ""
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.lock:
                self.output += line

    def url(self, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            with self.lock:
                m = re.search(r"humpyard demo is running at (http://127\.0\.0\.1:\d+)",
                              self.output)
                if m and "Ctrl-C stops everything." in self.output:
                    return m.group(1)
            time.sleep(0.05)
        raise AssertionError(f"the demo did not start:\n{self.output}")


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state = tmp_path_factory.mktemp("demo-state")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "humpyard.cli", "demo", "--config",
         str(ROOT / "examples" / "demo.toml"), "--port", "0", "--state-dir", str(state)],
        cwd=state, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    demo = Demo(proc)
    try:
        yield demo.url()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        demo.reader.join(5)
        assert proc.stdout is not None
        proc.stdout.close()


def test_claude_code_creates_the_file_through_the_demo(demo_url: str, tmp_path: Path) -> None:
    # In print mode Claude Code asks before an edit; acceptEdits is what a user
    # approving the write would do.
    run = run_claude(demo_url, ASK, workdir=tmp_path,
                     extra_args=["--permission-mode", "acceptEdits"])
    assert run.ok, run.transcript
    assert (tmp_path / "hello.txt").read_text() == "hi\n", run.transcript
    assert run.result is not None and "hello.txt" in run.result, run.transcript
    assert '"permission_denials":[]' in run.stdout.replace(" ", ""), run.transcript


@pytest.mark.parametrize("model, tool", [("gpt-5.5", "apply_patch"), ("auto", "exec")])
def test_codex_creates_the_file_through_the_demo(demo_url: str, tmp_path: Path, model: str,
                                                 tool: str) -> None:
    run = run_codex(demo_url, ASK, workdir=tmp_path, model=model)
    assert run.ok, run.transcript
    assert (tmp_path / "hello.txt").read_text() == "hi\n", run.transcript
    assert run.result is not None and "hello.txt" in run.result, run.transcript
    if tool == "apply_patch":
        assert "apply patch" in run.stderr, run.transcript
        # a model name Codex knows (routed by the demo's "codex" rule): no warning
        assert METADATA_WARNING not in run.stderr, run.transcript
    else:
        assert "/bin/bash -lc" in run.stderr and "hello.txt" in run.stderr, run.transcript

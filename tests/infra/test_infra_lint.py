"""template.yaml passes cfn-lint and ``sam validate --lint``, offline.

Both tools run from ``.venv-infra`` (see ``infra_support``), started
together so the slower one sets the pace. ``sam validate --lint`` runs
cfn-lint's rules on SAM's translation locally; plain ``sam validate`` would
call CloudFormation (credentials, network), so that form is not used.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from infra_support import ROOT, TEMPLATE, TOOL_ENV, infra_tool

TIMEOUT = 180


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, subprocess.Popen[str]]]:
    commands = {
        "cfn-lint": [str(infra_tool("cfn-lint")), str(TEMPLATE)],
        "sam": [str(infra_tool("sam")), "validate", "--lint", "--template", str(TEMPLATE)],
    }
    procs = {name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=TOOL_ENV, cwd=ROOT)
             for name, cmd in commands.items()}
    try:
        yield procs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.communicate()


def _result(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=TIMEOUT)
    return proc.returncode, out


def test_cfn_lint_passes(runs: dict[str, subprocess.Popen[str]]) -> None:
    code, out = _result(runs["cfn-lint"])
    assert code == 0, out


def test_sam_validate_lint_passes(runs: dict[str, subprocess.Popen[str]]) -> None:
    code, out = _result(runs["sam"])
    assert code == 0, out
    assert "is a valid SAM Template" in out

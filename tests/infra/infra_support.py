"""Shared by the tests in tests/infra: the template, the infra tools, the translation.

The CloudFormation tools live in their own virtualenv, ``.venv-infra/``
(``make infra-venv``), so the app's environment stays light. Without it
these tests skip locally and fail under CI (``CI`` set), where a skip would
hide a broken template.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
INFRA_VENV = ROOT / ".venv-infra"
TOOL_ENV = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
            "SAM_CLI_TELEMETRY": "0", "SAM_CLI_DISABLE_VERSION_CHECK": "1"}


def infra_tool(name: str) -> Path:
    """``.venv-infra/bin/<name>``; a missing venv fails the test (``make test`` builds it)."""
    path = INFRA_VENV / "bin" / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make infra-venv` (make test does)")
    return path


class _CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags (``!Ref X`` → ``{"Ref": "X"}``)."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


@cache
def _template_text() -> str:
    return TEMPLATE.read_text()


def template() -> dict[str, Any]:
    """``template.yaml`` as written (a fresh copy each call)."""
    return yaml.load(_template_text(), Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass


@cache
def _translated(overrides: tuple[str, ...]) -> str:
    answer = json.loads(_translator().ask(json.dumps(list(overrides))))
    assert "error" not in answer, f"SAM translation failed:\n{answer['error']}"
    return json.dumps(answer["doc"])


class _Translator:
    """``sam_translate.py --serve`` in ``.venv-infra``: one process for the session
    (starting one and importing SAM's translator costs about a second a translation)."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [str(infra_tool("python")), str(ROOT / "tests" / "infra" / "sam_translate.py"),
             "--serve", str(TEMPLATE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=TOOL_ENV, cwd=ROOT)
        atexit.register(self.close)

    def ask(self, line: str) -> str:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        answer = self._proc.stdout.readline()
        assert answer, f"the SAM translator exited ({self._proc.poll()})"
        return answer

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


@cache
def _translator() -> _Translator:
    return _Translator()


def translated(parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """The CloudFormation JSON SAM makes of the template (a fresh copy each call),
    translated with ``parameters`` as ``sam deploy`` would pass them."""
    overrides = tuple(f"{k}={v}" for k, v in sorted((parameters or {}).items()))
    return json.loads(_translated(overrides))  # type: ignore[no-any-return]


def resources(doc: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in doc["Resources"].items() if v["Type"] == type_}


def run_python(code: str, *, path: list[Path], env: dict[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this venv with exactly ``path`` prepended."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("HUMPYARD_", "AWS_", "PYTHON"))}
    clean["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    clean.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=clean, cwd=ROOT)

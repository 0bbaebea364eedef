"""Shared by the tests in tests/infra: the template, the infra tools, the translation.

The CloudFormation tools live in their own virtualenv, ``.venv-infra/``
(``make infra-venv``), so the app's environment stays light. Without it
these tests skip locally and fail under CI (``CI`` set), where a skip would
hide a broken template.
"""

from __future__ import annotations

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
    python = infra_tool("python")
    done = subprocess.run([str(python), str(ROOT / "tests" / "infra" / "sam_translate.py"),
                           str(TEMPLATE), *overrides], capture_output=True, text=True,
                          timeout=120, env=TOOL_ENV, cwd=ROOT)
    assert done.returncode == 0, f"SAM translation failed:\n{done.stderr}"
    return done.stdout


def translated(parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """The CloudFormation JSON SAM makes of the template (a fresh copy each call),
    translated with ``parameters`` as ``sam deploy`` would pass them."""
    overrides = _overrides(parameters)
    if overrides in _translated_many:
        return json.loads(_translated_many[overrides])  # type: ignore[no-any-return]
    return json.loads(_translated(overrides))  # type: ignore[no-any-return]


def _overrides(parameters: dict[str, str] | None) -> tuple[str, ...]:
    return tuple(f"{k}={v}" for k, v in sorted((parameters or {}).items()))


_translated_many: dict[tuple[str, ...], str] = {}


def translate_ahead(many: list[dict[str, str]]) -> None:
    """Translate every parameter set of ``many`` in one translator process (starting
    one costs about a second), for ``translated`` to hand out afterwards."""
    wanted = [o for o in dict.fromkeys(_overrides(p) for p in many)
              if o not in _translated_many]
    if not wanted:
        return
    done = subprocess.run([str(infra_tool("python")),
                           str(ROOT / "tests" / "infra" / "sam_translate.py"), "--many",
                           str(TEMPLATE)], input=json.dumps([list(o) for o in wanted]),
                          capture_output=True, text=True, timeout=300, env=TOOL_ENV, cwd=ROOT)
    assert done.returncode == 0, f"SAM translation failed:\n{done.stderr}"
    for overrides, doc in zip(wanted, json.loads(done.stdout), strict=True):
        _translated_many[overrides] = json.dumps(doc)


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

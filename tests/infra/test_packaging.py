"""What ``pip install humpyard`` and the Lambda layer get (issue 29, point 5).

- a LICENSE file with the Apache-2.0 text pyproject.toml declares;
- ``httptools>=0.6.3`` (0.6.0-0.6.2 lack ``set_dangerous_leniencies``, which the
  upstream parser calls, and bundle an llhttp with a request-smuggling flaw);
- the Lambda-only packages in the ``[aws]`` extra, not the base dependencies;
  botocore declared, boto3 neither declared for the gateway nor imported;
- the layer installed from ``infra/layer-requirements.lock``: exact versions,
  every one hashed, inside pyproject.toml's ranges, with ``--require-hashes``.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCK = ROOT / "infra" / "layer-requirements.lock"
LAMBDA_ONLY = {"mangum", "botocore", "boto3", "aws-lambda-powertools", "aws-xray-sdk"}


def requirements(entries: list[str]) -> dict[str, Requirement]:
    reqs = [Requirement(e) for e in entries]
    return {canonicalize_name(r.name): r for r in reqs}


BASE = requirements(PROJECT["dependencies"])
AWS = requirements(PROJECT["optional-dependencies"]["aws"])
DEV = requirements(PROJECT["optional-dependencies"]["dev"])


def lock_entries() -> dict[str, tuple[Version, list[str]]]:
    text = LOCK.read_text().replace("\\\n", " ")
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)", line)
        assert m, f"not an exact, hashed pin: {line!r}"
        out[canonicalize_name(m.group(1))] = (Version(m.group(2)),
                                              re.findall(r"sha256:([0-9a-f]{64})", m.group(3)))
    return out


def test_the_license_file_is_the_apache_2_text():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert PROJECT["license"] == "Apache-2.0"
    assert "LICENSE" in PROJECT["license-files"]


def test_httptools_is_at_least_0_6_3():
    spec = BASE["httptools"].specifier
    for bad in ("0.6.0", "0.6.1", "0.6.2"):
        assert not spec.contains(bad), bad
    assert spec.contains("0.6.3")


def test_lambda_only_packages_are_in_the_aws_extra_not_the_base():
    assert not LAMBDA_ONLY & set(BASE), sorted(LAMBDA_ONLY & set(BASE))
    assert {"mangum", "botocore", "aws-lambda-powertools"} <= set(AWS)
    assert "boto3" not in AWS  # humpyard imports botocore directly (aws/clients.py)


def test_dev_installs_the_aws_extra_for_the_tests():
    assert "humpyard" in DEV and "aws" in DEV["humpyard"].extras
    assert "moto" in DEV


def test_no_shipped_module_imports_boto3():
    shipped = [*(ROOT / "shared" / "humpyard").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]
    for path in shipped:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "boto3" or n.startswith("boto3.") for n in names), path


def test_the_lock_pins_exactly_what_pyproject_allows():
    locked = lock_entries()
    assert locked, "the lock is empty"
    for name, req in {**BASE, **AWS}.items():
        if req.marker is not None and not req.marker.evaluate(
                {"python_version": "3.12", "python_full_version": "3.12.0",
                 "sys_platform": "linux", "platform_system": "Linux"}):
            continue
        assert name in locked, f"{name} is not in the lock"
        version, hashes = locked[name]
        assert req.specifier.contains(version, prereleases=True), (name, version, req)
        assert hashes
    assert "humpyard" not in locked  # built from this tree
    assert "boto3" not in locked
    assert locked["httptools"][0] >= Version("0.6.3")


def test_package_sh_installs_the_lock_with_hashes_required():
    script = (ROOT / "infra" / "package.sh").read_text()
    assert "LOCK=${LOCK:-infra/layer-requirements.lock}" in script
    install = re.search(r'pip_target --no-deps --require-hashes -r "\$LOCK"', script)
    assert install, "package.sh does not install the lock with --require-hashes"
    # humpyard itself goes in without resolving anything else
    assert re.search(r'pip_target --no-deps --upgrade "\$WHEEL"', script)
    # the lock is written by the documented script
    assert (ROOT / "infra" / "lock-layer.sh").exists()
    assert "infra/lock-layer.sh" in LOCK.read_text()

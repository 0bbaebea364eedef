"""Every function in template.yaml points at code that exists and imports cleanly.

Each ``Handler`` is imported in a fresh interpreter with only its
``CodeUri`` directory and ``shared/`` (standing in for the dependencies
layer, ``/opt/python``) on ``sys.path`` and no AWS or humpyard variables
set: an import must not read the environment, touch the network, build
the gateway, or pull in Switchyard.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

import pytest
from infra_support import ROOT, run_python, template

FUNCTIONS = {k: v for k, v in template()["Resources"].items()
             if v["Type"] == "AWS::Serverless::Function"}

IMPORT_CHECK = """
import importlib, sys
module = importlib.import_module({module!r})
entry = getattr(module, {attr!r})
assert callable(entry), "not callable"
once = getattr(module, "_instance", None)
assert once is None or once._value is None, "the instance was built at import"
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("switchyard", "nemo_switchyard"))
assert not loaded, f"imports Switchyard: {{loaded}}"
print("ok")
"""


def _code_uri(props: dict[str, Any]) -> str:
    uri = props.get("CodeUri") or template()["Globals"]["Function"]["CodeUri"]
    assert isinstance(uri, str), uri
    return uri


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_handler_exists_and_imports(logical_id: str) -> None:
    props = FUNCTIONS[logical_id]["Properties"]
    code = ROOT / _code_uri(props)
    assert code.is_dir(), f"{logical_id}: CodeUri {code} is not a directory"
    handler = props["Handler"]
    if handler.endswith(".sh"):  # Lambda Web Adapter: the handler is the start script
        script = code / handler
        assert script.is_file() and script.stat().st_mode & stat.S_IXUSR, script
        factory = re.search(r"--factory (\w+):(\w+)", script.read_text())
        assert factory, f"{script} does not start a uvicorn factory"
        path = [script.parent, ROOT / "shared"]
        module, attr = factory.group(1), factory.group(2)
    else:
        module, _, attr = handler.rpartition(".")
        assert (code / (module.replace(".", os.sep) + ".py")).is_file(), handler
        path = [code, ROOT / "shared"]
    done = run_python(IMPORT_CHECK.format(module=module, attr=attr), path=path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_bundled_configuration_is_valid() -> None:
    """``HUMPYARD_CONFIG`` names a file in the code; it loads given the secret's names."""
    from humpyard.config import load_config

    variables = template()["Globals"]["Function"]["Environment"]["Variables"]
    path = ROOT / _code_uri({}) / variables["HUMPYARD_CONFIG"]
    text = path.read_text()
    names = set(re.findall(r'(?:api_key_env|key_env) = "(\w+)"', text))
    config = load_config(path, env={n: f"value-of-{n.lower()}" for n in names})
    assert config.routes and not config.warnings


def test_the_layer_is_what_package_sh_builds() -> None:
    layer = template()["Resources"]["DependenciesLayer"]["Properties"]
    script = (ROOT / "infra" / "package.sh").read_text()
    assert layer["ContentUri"].rstrip("/") == "build/layer"
    assert 'BUILD_DIR=${BUILD_DIR:-build}' in script and 'LAYER="$BUILD_DIR/layer/python"' in script
    assert "--invalidation-mode unchecked-hash" in script
    assert "--platform \"$PLATFORM\"" in script and "manylinux2014_aarch64" in script
    assert layer["CompatibleArchitectures"] == template()["Globals"]["Function"]["Architectures"]
    stream_sh = ROOT / "functions" / "stream" / "run.sh"
    assert "/opt/python" in stream_sh.read_text()  # where Lambda unpacks the layer

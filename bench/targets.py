"""What gets benchmarked: the simulator itself, humpyard (two ways) and the peers.

A ``Target`` knows how to write its configuration, the command that serves it
on a port, the path that says it is up, and the credential its clients send.
Peers live in their own venvs under ``bench/.peers/`` (git-ignored), created
and filled with pip only when ``PEERS=1``; a peer that cannot be installed or
started is recorded with the reason, never fails the run.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEERS_DIR = BENCH / ".peers"
VENV_BIN = Path(sys.executable).parent

LITELLM_SPEC = "litellm[proxy]==1.106.12"
SWITCHYARD_SPEC = "nemo-switchyard==0.3.0"
ROUTE = "bench"  # the model name clients ask for, on every gateway


@dataclass
class Target:
    """One server under test. ``cmd`` is None for the direct (simulator) baseline."""

    name: str
    label: str
    cmd: list[str] | None = None
    ready_path: str = "/v1/models"
    ready_timeout: float = 30.0
    auth: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    version: str = ""
    skipped: str | None = None  # why this target could not be measured


def humpyard_config(sim_port: int, ledger: Path | None) -> str:
    text = f"""# written by bench/run.py
[providers.sim]
base_url = "http://127.0.0.1:{sim_port}/v1"

[targets.t]
endpoints = [{{ provider = "sim", model = "m" }}]

[routes.{ROUTE}]
type = "passthrough"
targets = ["t"]

[health]
failure_threshold = 3
"""
    if ledger is not None:
        text += f'\n[ledger]\npath = "{ledger}"\n'
    return text


def humpyard(tmp: Path, sim_port: int, port: int, *, ledger: bool, workers: int = 1) -> Target:
    """``humpyard serve``; ``workers`` > 1 runs ``--workers``, on the ledger file (the
    row compares with one process on the same file)."""
    ledger = ledger or workers > 1
    name = "humpyard+ledger" if ledger else "humpyard"
    if workers > 1:
        name += f"-w{workers}"
    cfg = tmp / f"{name}.toml"
    cfg.write_text(humpyard_config(sim_port, tmp / f"{name}.db" if ledger else None))
    cmd = [str(VENV_BIN / "humpyard"), "serve", "--config", str(cfg), "--host", "127.0.0.1",
           "--port", str(port)]
    label = "humpyard (SQLite ledger)" if ledger else "humpyard (no ledger)"
    if workers > 1:
        cmd += ["--workers", str(workers)]
        label = f"humpyard --workers {workers} (one SQLite file)"
    return Target(name, label, cmd, version=_version("humpyard"))


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


# -- peers ----------------------------------------------------------------------


def ensure_venv(name: str, spec: str, log: Path, timeout: float = 900) -> tuple[Path, str]:
    """The python of ``bench/.peers/<name>`` with ``spec`` installed; raises RuntimeError."""
    venv = PEERS_DIR / name
    py = venv / "bin" / "python"
    dist, _, want = spec.partition("==")
    dist = dist.split("[")[0]
    if py.exists():
        have = _peer_version(py, dist)
        if have == want:
            return py, have
    PEERS_DIR.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", None) or "python3"
    print(f"  installing {spec} into {venv.relative_to(ROOT)} (once) ...", flush=True)
    with open(log, "ab") as out:
        steps = [[base, "-m", "venv", str(venv)],
                 [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  spec]]
        for step in steps:
            res = subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
            if res.returncode != 0:
                raise RuntimeError(f"`{' '.join(step[-3:])}` failed (exit {res.returncode}); "
                                   f"see {log}")
    have = _peer_version(py, dist)
    if have != want:
        raise RuntimeError(f"{dist} {want} not importable after install (found {have!r})")
    return py, have


def _peer_version(py: Path, dist: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    res = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60)
    return res.stdout.strip() if res.returncode == 0 else ""


def litellm(tmp: Path, sim_port: int, port: int) -> Target:
    """LiteLLM proxy, one worker, the same upstream under the model name ``bench``."""
    try:
        py, version = ensure_venv("litellm", LITELLM_SPEC, tmp / "install-litellm.log")
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        return Target("litellm", "LiteLLM proxy", skipped=f"install failed: {e}")
    cfg = tmp / "litellm.yaml"
    cfg.write_text(f"""# written by bench/run.py
model_list:
  - model_name: {ROUTE}
    litellm_params:
      model: openai/m
      api_base: http://127.0.0.1:{sim_port}/v1
      api_key: sk-bench-upstream
litellm_settings:
  telemetry: false
""")
    # LiteLLM 1.106 refuses to start without a master key; clients then send it.
    key = "sk-" + secrets.token_hex(32)
    env = {"LITELLM_MASTER_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_LOG": "ERROR", "DISABLE_ADMIN_UI": "True"}
    cmd = [str(py.parent / "litellm"), "--config", str(cfg), "--host", "127.0.0.1",
           "--port", str(port), "--num_workers", "1"]
    return Target("litellm", "LiteLLM proxy", cmd, ready_path="/health/liveliness",
                  ready_timeout=180, auth=key, env=env, version=version)


def switchyard(tmp: Path, sim_port: int, port: int) -> Target:
    """Switchyard's native (Rust) server hosted by ``sy_host.py``; passthrough route."""
    try:
        py, version = ensure_venv("switchyard", SWITCHYARD_SPEC, tmp / "install-switchyard.log")
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        return Target("switchyard", "Switchyard server", skipped=f"install failed: {e}")
    cfg = tmp / "switchyard.toml"
    cfg.write_text(f"""# written by bench/run.py
schema_version = 1

[llm_clients.sim]
format = "openai_chat"
base_url = "http://127.0.0.1:{sim_port}/v1"
max_retries = 0

[targets.t]
id = "m"
llm_client = "sim"

[routes.{ROUTE}]
id = "{ROUTE}"
type = "passthrough"
target = "t"
""")
    cmd = [str(py), str(BENCH / "sy_host.py"), str(cfg), str(port)]
    return Target("switchyard", "Switchyard server (Rust)", cmd, ready_path="/health",
                  ready_timeout=60, env={"RUST_LOG": "warn"}, version=version)

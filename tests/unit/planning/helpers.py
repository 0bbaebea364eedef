"""Small builders shared by the planning tests: configs from TOML text, facts, plans."""

from __future__ import annotations

import random
from typing import Any

from humpyard.config import Config, load_config_text
from humpyard.planning.plan import plan
from humpyard.planning.types import (
    EndpointHealth,
    LatencyFigure,
    Override,
    Plan,
    RequestFacts,
    StateSnapshot,
)

NOW = 1_800_000_000.0

PROVIDERS = """
[providers.local]
base_url = "http://127.0.0.1:9001/v1"

[providers.pub]
base_url = "http://127.0.0.1:9002/v1"

[providers.pub2]
base_url = "http://127.0.0.1:9004/v1"

[providers.paid]
base_url = "http://127.0.0.1:9003/v1"
"""


def cfg(text: str, env: dict[str, str] | None = None) -> Config:
    """A resolved config: the loopback providers above plus ``text``."""
    return load_config_text(PROVIDERS + text, env=env or {})


def target(name: str, *, cls: str | None = None, provider: str = "pub", model: str | None = None,
           extra: str = "", endpoint: str = "", quality: float | None = None,
           strengths: tuple[str, ...] = ()) -> str:
    """TOML for one target with one endpoint (``endpoint`` adds fields to it)."""
    lines = [f"[targets.{name}]"]
    if cls:
        lines.append(f'class = "{cls}"')
    if quality is not None:
        lines.append(f"quality = {quality}")
    if strengths:
        lines.append("strengths = [" + ", ".join(f'"{s}"' for s in strengths) + "]")
    ep = f'provider = "{provider}", model = "{model or name}"'
    if endpoint:
        ep += f", {endpoint}"
    lines.append(f"endpoints = [{{ {ep} }}]")
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


def route(name: str, targets: list[str], **fields: Any) -> str:
    lines = [f"[routes.{name}]", "targets = [" + ", ".join(f'"{t}"' for t in targets) + "]"]
    for k, v in fields.items():
        lines.append(f"{k} = {toml_value(v)}")
    return "\n".join(lines) + "\n"


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return str(v)


def facts(model: str = "r", **kw: Any) -> RequestFacts:
    return RequestFacts(model=model, **kw)


def snap(*, cold: dict[str, float] | None = None, probing: tuple[str, ...] = (),
         latency: dict[str, LatencyFigure] | None = None,
         overrides: tuple[Override, ...] = (), spend: dict[str, float] | None = None
         ) -> StateSnapshot:
    """A snapshot; ``cold`` maps endpoint keys (provider/model) to reopen times."""
    health = {k: EndpointHealth(state="cooling_down", cold=True, reopens_at=t)
              for k, t in (cold or {}).items()}
    for k in probing:
        health[k] = EndpointHealth(state="probing", cold=False)
    return StateSnapshot(health=health, latency=latency or {}, overrides=overrides,
                         spend_usd=spend or {}, taken_at=NOW)


def run(config: Config, f: RequestFacts, s: StateSnapshot | None = None, *,
        rng: random.Random | None = None, now: float = NOW, **kw: Any) -> Plan:
    return plan(f, s or StateSnapshot(), config, now, rng or random.Random(0), **kw)


def names(p: Plan) -> list[str]:
    return [t.name for t in p.targets]


def removed(p: Plan, step: str | None = None) -> dict[str, str]:
    return {r.target: r.reason for r in p.removals if step is None or r.step == step}

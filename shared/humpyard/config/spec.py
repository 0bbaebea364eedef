"""The resolved, immutable configuration the gateway runs on.

``resolve()`` (in ``resolve.py``) turns the raw file into these objects once
per load; the request path only reads them. Secrets (provider and client
keys) live in fields excluded from ``repr`` and from ``public_view()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the pydantic schema is needed to load a file, not to run one
    from humpyard.config.models import Budget, Health, Pool, RawConfig, SelectRule

# Static provider headers whose value is a credential (Azure's ``api-key``, a
# gateway token): ``/v1/config`` shows their names only.
SECRET_HEADER_RE = re.compile(r"key|token|secret|auth|cookie|passw|signature|credential",
                              re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """One (provider, model) pair of a target, with its declared capabilities."""

    provider: str
    model: str
    context_window: int | None = None
    tools: bool | None = None
    vision: bool | None = None
    price_input: float | None = None
    price_output: float | None = None

    @property
    def key(self) -> str:
        """The health/latency key of this endpoint: ``provider/model``."""
        return f"{self.provider}/{self.model}"

    @property
    def priced(self) -> bool:
        return bool(self.price_input or self.price_output)

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * (self.price_input or 0.0)
                + output_tokens * (self.price_output or 0.0)) / 1_000_000


@dataclass(frozen=True, slots=True)
class TargetSpec:
    name: str
    endpoints: tuple[EndpointSpec, ...]
    class_: str | None = None
    strengths: tuple[str, ...] = ()
    quality: float | None = None

    @property
    def priced(self) -> bool:
        return any(e.priced for e in self.endpoints)


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    name: str
    base_url: str
    headers: tuple[tuple[str, str], ...] = ()
    max_retries: int = 0
    timeout_secs: float = 600
    connect_timeout_secs: float = 10
    health_path: str | None = None
    connect_retry_window_secs: float = 0
    quota_source: str | None = None
    api_key_env: str | None = None
    api_key: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """A route with its pool resolved: ``targets`` is what the planner narrows."""

    name: str
    type: str
    targets: tuple[str, ...]
    fallback_on: frozenset[str]
    weights: tuple[float, ...] | None = None
    seed: int | None = None
    explore: float = 0.1
    min_samples: int = 3
    max_age_secs: float = 600
    quality_weight: float = 0.0
    latency_target_ms: float = 2000
    unknown_quality: float = 0.5
    allowed_classes: tuple[str, ...] | None = None
    fallback_on_explicit: bool = False
    pool: Pool | None = None
    pool_left_out: tuple[tuple[str, str], ...] = ()
    tail: tuple[str, ...] = ()
    tail_on: frozenset[str] = frozenset()
    efficient: tuple[str, ...] = ()
    capable: tuple[str, ...] = ()
    judge: str | None = None
    mode: str | None = None
    confidence_threshold: float | None = None
    confirmations: int | None = None
    implicit: bool = False

    @property
    def all_targets(self) -> tuple[str, ...]:
        """Every target the route may ever call, in order, without repeats."""
        seen: dict[str, None] = {}
        for t in (*self.targets, *self.efficient, *self.capable,
                  *((self.judge,) if self.judge else ()), *self.tail):
            seen.setdefault(t, None)
        return tuple(seen)


@dataclass(frozen=True, slots=True)
class KeySpec:
    id: str
    digest: bytes = field(repr=False, compare=False)
    allowed_routes: frozenset[str] | None = None
    manage_overrides: bool = False
    budget: Budget | None = None

    def may_use(self, route: str) -> bool:
        return self.allowed_routes is None or route in self.allowed_routes


@dataclass(frozen=True)
class Config:
    """Everything a running gateway needs, resolved and checked once."""

    raw: RawConfig
    providers: dict[str, ProviderSpec]
    targets: dict[str, TargetSpec]
    routes: dict[str, RouteSpec]
    select: tuple[SelectRule, ...]
    keys: dict[str, KeySpec]
    source: str = "<memory>"
    digest: str = ""
    warnings: tuple[str, ...] = ()

    def route_for(self, model: str) -> RouteSpec | None:
        """The route a model name names: a route, else a bare target's passthrough."""
        return self.routes.get(model)

    @property
    def health(self) -> Health:
        return self.raw.health

    @property
    def has_keys(self) -> bool:
        return bool(self.keys)

    def endpoint_keys(self) -> list[tuple[str, EndpointSpec]]:
        """(target, endpoint) for every endpoint in the file, in file order."""
        return [(t.name, e) for t in self.targets.values() for e in t.endpoints]

    def public_view(self) -> dict[str, Any]:
        """The configuration as JSON for ``GET /v1/config``: no secrets, ever."""
        data = self.raw.model_dump(mode="json", by_alias=True, exclude_none=True)
        for k in data.get("keys", {}).values():
            k.pop("key_sha256", None)
        for p in data.get("providers", {}).values():
            headers = p.get("headers") or {}
            for name in headers:
                if SECRET_HEADER_RE.search(name):
                    headers[name] = "[redacted]"
        data["routes"] = {
            name: {
                "type": r.type, "targets": list(r.targets), "tail": list(r.tail),
                "fallback_on": sorted(r.fallback_on), "implicit": r.implicit,
                **({"allowed_classes": list(r.allowed_classes)} if r.allowed_classes else {}),
                **({"efficient": list(r.efficient), "capable": list(r.capable)}
                   if r.efficient else {}),
                **({"judge": r.judge} if r.judge else {}),
            }
            for name, r in self.routes.items()
        }
        return data

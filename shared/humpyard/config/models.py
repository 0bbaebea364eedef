"""The configuration file's schema, as pydantic models.

These models are the raw shape of ``humpyard.toml``: every table forbids
unknown keys so a typo fails at load, and values are checked strictly (a price
written as a string is an error, not a number pydantic guessed at; an integer
is still a valid number). Cross-references (a route naming a
target, a rule naming a route, pools) are checked and resolved afterwards in
``config/resolve.py``; nothing here reads the environment or the disk. Providers,
their endpoints and prices are in ``provider_models.py``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from humpyard.config.model_base import ENV_NAME_RE, _Strict
from humpyard.config.names import CREDENTIAL_HEADERS, PromptRange
from humpyard.config.provider_models import Endpoint, Provider

LABEL_RE = re.compile(r"^[a-z0-9_-]{1,32}$")
FailureClassName = Literal[
    "overflow", "rate_limit", "timeout", "server_error", "connection", "forbidden", "unavailable",
]
RouteType = Literal["passthrough", "random", "fastest", "stage_router", "llm_classifier"]


class Target(_Strict):
    """A named model served by an ordered list of endpoints."""

    endpoints: list[Endpoint] = Field(min_length=1)
    class_: str | None = Field(default=None, alias="class")
    strengths: list[str] = Field(default_factory=list, max_length=8)
    quality: float | None = Field(default=None, ge=0, le=1)

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True,
                              allow_inf_nan=False)

    @field_validator("class_")
    @classmethod
    def _class(cls, v: str | None) -> str | None:
        if v is not None and not LABEL_RE.match(v):
            raise ValueError(
                f"class {v!r} must be 1-32 lowercase letters, digits, '-' or '_'"
            )
        return v

    @field_validator("strengths")
    @classmethod
    def _strengths(cls, v: list[str]) -> list[str]:
        for s in v:
            if not LABEL_RE.match(s):
                raise ValueError(
                    f"strength {s!r} must be 1-32 lowercase letters, digits, '-' or '_'"
                )
        if len(set(v)) != len(v):
            raise ValueError(f"strengths repeat: {v}")
        return v


class Pool(_Strict):
    """Every target with a strength, optionally narrowed by window and quality."""

    strength: str
    min_context_window: int | None = Field(default=None, gt=0)
    min_quality: float | None = Field(default=None, ge=0, le=1)


class Tail(_Strict):
    """Fixed targets after a pool, reached from the last member only on ``on``."""

    targets: list[str] = Field(min_length=1)
    on: list[FailureClassName] = Field(default_factory=lambda: ["overflow"])  # type: ignore[arg-type]


class Route(_Strict):
    """What clients request as ``model``."""

    type: RouteType = "passthrough"
    targets: list[str] | None = None
    pool: Pool | None = None
    weights: list[float] | None = None
    seed: int | None = None
    explore: float = Field(default=0.1, ge=0, le=1)
    min_samples: int = Field(default=3, ge=1)
    max_age_secs: float = Field(default=600, gt=0)
    quality_weight: float = Field(default=0.0, ge=0, le=1)
    latency_target_ms: float = Field(default=2000, gt=0)
    unknown_quality: float = Field(default=0.5, ge=0, le=1)
    allowed_classes: list[str] | None = None
    fallback_on: list[FailureClassName] | None = None
    then: Tail | None = None
    # Switchyard-backed routes
    efficient: list[str] | None = None
    capable: list[str] | None = None
    judge: str | None = None
    mode: str | None = None
    confidence_threshold: float | None = Field(default=None, ge=0, le=1)
    confirmations: int | None = Field(default=None, ge=1)

    @field_validator("allowed_classes")
    @classmethod
    def _classes(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must list at least one class")
        for c in v:
            if not LABEL_RE.match(c):
                raise ValueError(f"class {c!r} must be 1-32 lowercase letters, digits, '-' or '_'")
        return v

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and any(w < 0 for w in v):
            raise ValueError(f"weights must not be negative, got {v}")
        return v

    @model_validator(mode="after")
    def _shape(self) -> Route:
        tiered = self.type in ("stage_router", "llm_classifier")
        if tiered:
            if not self.efficient or not self.capable:
                raise ValueError(f"a {self.type} route needs both 'efficient' and 'capable'")
            if self.targets or self.pool:
                raise ValueError(f"a {self.type} route names its tiers, not 'targets' or 'pool'")
            if self.type == "llm_classifier" and not self.judge:
                raise ValueError("an llm_classifier route needs a 'judge' target")
            modes = (
                ("efficient_first", "capable_first") if self.type == "stage_router"
                else ("capability", "escalation")
            )
            if self.mode is not None and self.mode not in modes:
                raise ValueError(f"mode must be one of {list(modes)}, got {self.mode!r}")
        else:
            for k in ("efficient", "capable", "judge", "mode", "confidence_threshold",
                      "confirmations"):
                if getattr(self, k) is not None:
                    raise ValueError(f"'{k}' only applies to stage_router/llm_classifier routes")
            if self.pool and self.targets:
                raise ValueError("'pool' cannot be combined with 'targets'")
            if self.pool and self.weights:
                raise ValueError("'pool' cannot be combined with 'weights'")
            if not self.pool and not self.targets:
                raise ValueError("a route needs 'targets' or 'pool'")
        if self.weights is not None:
            if self.type != "random":
                raise ValueError("'weights' only applies to random routes")
            if self.targets is not None and len(self.weights) != len(self.targets):
                raise ValueError(
                    f"weights has {len(self.weights)} entries but targets has "
                    f"{len(self.targets)}"
                )
            if not any(w > 0 for w in self.weights):
                raise ValueError("at least one weight must be positive")
        if self.then is not None and self.pool is None:
            raise ValueError("'then' (a guarded tail) needs a 'pool'")
        return self


class When(_Strict):
    """Conditions of a selector rule; all must hold."""

    model: str | None = None
    key: str | None = None
    profile: str | None = None
    tag: dict[str, str] | None = None
    header: dict[str, str] | None = None
    agent: str | None = None
    task: str | None = None
    subagent: bool | None = None
    stream: bool | None = None
    prompt_tokens: PromptRange | None = None
    tools: bool | None = None
    images: bool | None = None

    @field_validator("header")
    @classmethod
    def _no_credentials(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v:
            for name in v:
                if name.lower() in CREDENTIAL_HEADERS:
                    raise ValueError(f"credential header {name!r} cannot be matched")
        return {k.lower(): g for k, g in v.items()} if v else v

    def is_empty(self) -> bool:
        return all(getattr(self, f) is None for f in type(self).model_fields)


class SelectRule(_Strict):
    """One ``[[select]]`` rule: first match wins."""

    name: str | None = Field(default=None, min_length=1, max_length=64)
    when: When = Field(default_factory=When)
    route: str


class Health(_Strict):
    failure_threshold: int = Field(default=3, ge=0)
    cooldown_secs: float = Field(default=30, gt=0)
    max_cooldown_secs: float = Field(default=300, gt=0)
    max_retry_after_secs: float = Field(default=300, ge=1)
    skip_cold_targets: bool = True


class Overrides(_Strict):
    default_secs: float = Field(default=4 * 3600, gt=0)
    max_secs: float = Field(default=24 * 3600, gt=0)


class Router(_Strict):
    probe_interval_secs: float = Field(default=5, gt=0)
    probe_timeout_secs: float = Field(default=2, gt=0)
    # Upstream calls in flight per process, and how long a call waits for a slot
    # (docs/upstream.md "Concurrency").
    max_concurrent: int = Field(default=10_000, ge=1, le=1_000_000)
    slot_wait_secs: float = Field(default=10, ge=0, le=3600)
    # Limits on answers, every provider's unless it sets its own (docs/upstream.md
    # "Limits on answers"; docs/decisions/0010-limits-on-answers.md).
    max_response_bytes: int = Field(default=32 << 20, ge=1024, le=1 << 30)
    max_decompression_ratio: float = Field(default=250, ge=10, le=100_000)
    max_sse_event_bytes: int = Field(default=4 << 20, ge=1024, le=1 << 28)
    first_byte_timeout_secs: float = Field(default=120, gt=0, le=3600)
    idle_timeout_secs: float = Field(default=300, gt=0, le=3600)
    # A stream with no first content yet: its head and an SSE comment after this
    # long, then a comment every as long until the content (ADR 0020); 0 = off.
    stream_first_heartbeat_secs: float = Field(default=1.0, ge=0, le=300)


class Ledger(_Strict):
    path: str = "humpyard.db"
    decision_retention_days: float = Field(default=30, gt=0)


class StoreSection(_Strict):
    """``[store]``: where the state lives (docs/configuration.md, "[store]"); cross-field
    rules (a DynamoDB backend needs both tables) are checked in ``config/resolve.py``."""

    backend: Literal["sqlite", "memory", "dynamodb"] | None = None
    state_table: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{3,255}$")
    ledger_table: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{3,255}$")
    region: str | None = Field(default=None, pattern=r"^[a-z0-9-]{1,32}$")
    endpoint_url: str | None = Field(default=None, max_length=2048)
    stats_flush_secs: float = Field(default=60, ge=0, le=3600)
    batch_ms: float = Field(default=500, ge=0, le=10_000)


class Clients(_Strict):
    """``[clients]``: what of a client's request reaches the upstream (docs/clients.md)."""

    keep_billing_header: bool = False
    forward_user: bool = False


class Server(_Strict):
    """``[server]``: client connections of ``humpyard serve`` (docs/security.md)."""

    header_timeout_secs: float = Field(default=10, gt=0, le=3600)
    body_timeout_secs: float = Field(default=60, gt=0, le=3600)
    send_timeout_secs: float = Field(default=60, gt=0, le=3600)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    max_connections: int | None = Field(default=None, ge=1, le=10_000_000)
    keepalive_timeout_secs: float = Field(default=30, gt=0, le=3600)
    worker_timeout_secs: float = Field(default=30, ge=2, le=3600)
    stop_timeout_secs: float = Field(default=60, gt=0, le=3600)


class Budget(_Strict):
    usd: float = Field(gt=0)
    period: Literal["day", "month"] = "day"


class Key(_Strict):
    """A client key; the key itself never appears in the file."""

    key_env: str | None = None
    key_sha256: str | None = Field(default=None, repr=False)
    allowed_routes: list[str] | None = None
    manage_overrides: bool = False
    admin: bool = False
    budget: Budget | None = None
    rpm_limit: int | None = Field(default=None, ge=1, le=100_000_000)
    tpm_limit: int | None = Field(default=None, ge=1, le=100_000_000_000)
    max_parallel_requests: int | None = Field(default=None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _one_source(self) -> Key:
        if (self.key_env is None) == (self.key_sha256 is None):
            raise ValueError("set exactly one of 'key_env' or 'key_sha256'")
        if self.key_sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", self.key_sha256):
            raise ValueError("key_sha256 must be 64 hex digits")
        if self.key_env is not None and not ENV_NAME_RE.match(self.key_env):
            raise ValueError("key_env must name an environment variable (letters, digits, '_'), "
                             "not hold the key itself")
        return self


class RawConfig(_Strict):
    """The whole file."""

    providers: dict[str, Provider] = Field(default_factory=dict)
    targets: dict[str, Target] = Field(default_factory=dict)
    routes: dict[str, Route] = Field(default_factory=dict)
    select: list[SelectRule] = Field(default_factory=list)
    health: Health = Field(default_factory=Health)
    overrides: Overrides = Field(default_factory=Overrides)
    router: Router = Field(default_factory=Router)
    ledger: Ledger | None = None
    store: StoreSection | None = None
    clients: Clients = Field(default_factory=Clients)
    server: Server = Field(default_factory=Server)
    keys: dict[str, Key] = Field(default_factory=dict)
    quota_poll_secs: float = Field(default=60, gt=0)
    quota_stale_secs: float = Field(default=300, gt=0)
    reload_poll_secs: float = Field(default=0, ge=0)
    state_refresh_ms: float = Field(default=1000, ge=0)
    max_body_bytes: Annotated[int, Field(gt=0)] = 32 * 1024 * 1024
    stream_heartbeat_secs: float = Field(default=15, ge=0, le=300)
    direct_relay: bool = True
    log_requests: bool = True
    refused_per_minute: float = Field(default=6, ge=0, le=100_000)

    @classmethod
    def parse(cls, data: dict[str, Any]) -> RawConfig:
        return cls.model_validate(data)

"""The resolved, immutable configuration the gateway runs on.

``resolve()`` (in ``resolve.py``) turns the parsed file (the pydantic models of
``models.py``) into these plain dataclasses once per load; the request path only
reads them, so running a configuration never needs pydantic. Secrets (provider
and client keys) live in fields excluded from ``repr`` and from ``public_view()``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from humpyard.config.names import PromptRange


@dataclass(frozen=True, slots=True)
class HealthSpec:
    """``[health]``: the breaker's settings (docs/health.md)."""

    failure_threshold: int = 3
    cooldown_secs: float = 30
    max_cooldown_secs: float = 300
    max_retry_after_secs: float = 300
    skip_cold_targets: bool = True


@dataclass(frozen=True, slots=True)
class AnswerLimits:
    """What the gateway holds of one upstream answer, and how long it waits for it
    (docs/upstream.md, "Limits on answers"): a buffered body's bytes after decoding,
    how much a gzip/deflate body may inflate, one event-stream event's bytes, the
    wait for a streamed call's head, and the longest silence inside a body."""

    max_response_bytes: int = 32 << 20
    max_decompression_ratio: float = 250
    max_sse_event_bytes: int = 4 << 20
    first_byte_timeout_secs: float = 120
    idle_timeout_secs: float = 300


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """``[router]``: readiness probing, and upstream calls in flight per process
    (``max_concurrent``; a call waits at most ``slot_wait_secs`` for a slot)."""

    probe_interval_secs: float = 5
    probe_timeout_secs: float = 2
    max_concurrent: int = 10_000
    slot_wait_secs: float = 10
    limits: AnswerLimits = AnswerLimits()
    stream_first_heartbeat_secs: float = 1.0  # the early head of a slow stream (ADR 0020)


@dataclass(frozen=True, slots=True)
class OverridesSpec:
    """``[overrides]``: how long a runtime override lasts when none is given, and at most."""

    default_secs: float = 4 * 3600
    max_secs: float = 24 * 3600


@dataclass(frozen=True, slots=True)
class LedgerSpec:
    """``[ledger]``: where decisions are kept (SQLite locally) and for how long."""

    path: str = "humpyard.db"
    decision_retention_days: float = 30


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """``[store]``: the backend (``sqlite``, ``memory`` or ``dynamodb``) and, for
    DynamoDB, its tables, region, endpoint and write cadence (``humpyard.fleet``).
    No credentials: they come from the standard AWS chain, never from the file."""

    backend: str = "memory"
    state_table: str | None = None
    ledger_table: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
    stats_flush_secs: float = 60
    batch_ms: float = 500


@dataclass(frozen=True, slots=True)
class ClientsSpec:
    """``[clients]``: what of a client's request reaches the upstream (docs/clients.md).

    ``keep_billing_header``: keep Claude Code's per-conversation
    ``x-anthropic-billing-header`` line at the top of the system prompt (removed by
    default: it defeats the upstream's prefix cache). ``forward_user``: pass client
    identifiers on (Anthropic ``metadata.user_id``, Responses ``user`` and
    ``safety_identifier``, as OpenAI ``user``/``safety_identifier``); by default
    they stay at the gateway.
    """

    keep_billing_header: bool = False
    forward_user: bool = False


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """``[server]``: client connections of ``humpyard serve`` (docs/security.md,
    "Client connections"). ``max_connections`` None: derived from the open-files
    limit (``open_files.connection_cap``)."""

    header_timeout_secs: float = 10
    body_timeout_secs: float = 60
    send_timeout_secs: float = 60
    max_header_bytes: int = 64 * 1024
    max_connections: int | None = None
    keepalive_timeout_secs: float = 30
    worker_timeout_secs: float = 30  # serve --workers: a worker silent this long is replaced
    stop_timeout_secs: float = 60  # SIGTERM: requests still open this long after are stopped


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """A key's budget: ``usd`` per ``period`` (``day`` or ``month``)."""

    usd: float
    period: str = "day"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """A pool route's membership rule: every target with ``strength``, narrowed."""

    strength: str
    min_context_window: int | None = None
    min_quality: float | None = None


@dataclass(frozen=True, slots=True)
class WhenSpec:
    """A selector rule's conditions; ``None`` means the condition is not used."""

    model: str | None = None
    key: str | None = None
    profile: str | None = None
    tag: Mapping[str, str] | None = None
    header: Mapping[str, str] | None = None  # lower-case names
    agent: str | None = None
    task: str | None = None
    subagent: bool | None = None
    stream: bool | None = None
    prompt_tokens: PromptRange | None = None
    tools: bool | None = None
    images: bool | None = None

    def is_empty(self) -> bool:
        """True for a rule without conditions (a catch-all)."""
        return all(getattr(self, f.name) is None for f in fields(self))


@dataclass(frozen=True, slots=True)
class SelectRuleSpec:
    """One ``[[select]]`` rule: when every condition holds, ``route`` serves."""

    route: str
    when: WhenSpec = field(default_factory=WhenSpec)
    name: str | None = None


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
    price_cache_read: float | None = None  # None: cache reads cost price_input
    price_cache_write: float | None = None  # None: cache writes cost price_input
    max_output_tokens: int | None = None  # a larger max_tokens is clamped to it
    reasoning: bool | None = None  # False: reasoning_effort is dropped; None: unknown
    claude: bool | None = None  # Bedrock: Claude whatever the id says; None: by the id

    @property
    def key(self) -> str:
        """The health/latency key of this endpoint: ``provider/model``."""
        return f"{self.provider}/{self.model}"

    @property
    def priced(self) -> bool:
        return bool(self.price_input or self.price_output)

    @property
    def adapts(self) -> bool:
        """Whether a request body is fitted to this endpoint before it is sent."""
        return self.max_output_tokens is not None or self.reasoning is False

    def cost_usd(self, input_tokens: int, output_tokens: int, cache_read: int = 0,
                 cache_write: int = 0) -> float:
        """USD for one answer. ``input_tokens`` counts every prompt token, cached
        ones included (as ``usage.prompt_tokens`` does); ``cache_read`` and
        ``cache_write`` of them are priced at the cache prices where declared,
        else at the input price."""
        price_in = self.price_input or 0.0
        plain = max(0, input_tokens - cache_read - cache_write)
        read = cache_read * (price_in if self.price_cache_read is None
                             else self.price_cache_read)
        write = cache_write * (price_in if self.price_cache_write is None
                               else self.price_cache_write)
        return (plain * price_in + read + write
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
    """One upstream, spoken to in ``protocol`` (``openai`` chat completions or
    ``anthropic`` Messages: docs/clients.md). ``proxy``: None follows the
    environment, "" goes direct, else the proxy URL (it may hold credentials:
    never shown). ``ca_file``/``client_cert``/``client_key``: TLS trust and
    mutual TLS; ``max_concurrent``: calls in flight at once (None: only
    ``[router] max_concurrent``). See docs/upstream.md."""

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
    catalog_id: str | None = None  # the provider's id in a models.dev catalogue
    proxy: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    max_concurrent: int | None = None
    protocol: str = "openai"  # "anthropic": Anthropic Messages at {base_url}/messages
    limits: AnswerLimits = AnswerLimits()  # [router]'s, with the provider's own keys
    rpm_limit: int | None = None  # the provider's own limits, for pacing (health/pacing.py)
    tpm_limit: int | None = None
    region: str | None = None  # protocol "bedrock": the AWS region signed for


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
    pool: PoolSpec | None = None
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
    budget: BudgetSpec | None = None
    admin: bool = False
    """Reads every key's decisions and stats, ``/v1/config``, ``/metrics`` and quota;
    a key without it reads only its own (docs/security.md)."""
    rpm_limit: int | None = None  # requests per minute (docs/routing.md, "Per-key limits")
    tpm_limit: int | None = None  # input + output tokens per minute
    max_parallel_requests: int | None = None  # in flight at once

    def may_use(self, route: str) -> bool:
        return self.allowed_routes is None or route in self.allowed_routes


@dataclass(frozen=True)
class Config:
    """Everything a running gateway needs, resolved and checked once.

    ``public`` is the file as ``GET /v1/config`` shows it, computed at load
    (``public_view`` hands out copies).
    """

    providers: dict[str, ProviderSpec]
    targets: dict[str, TargetSpec]
    routes: dict[str, RouteSpec]
    select: tuple[SelectRuleSpec, ...]
    keys: dict[str, KeySpec]
    health: HealthSpec = field(default_factory=HealthSpec)
    router: RouterSpec = field(default_factory=RouterSpec)
    overrides: OverridesSpec = field(default_factory=OverridesSpec)
    ledger: LedgerSpec | None = None
    store: StoreSpec | None = None  # None: [ledger] decides (SQLite, or memory without it)
    clients: ClientsSpec = field(default_factory=ClientsSpec)
    server: ServerSpec = field(default_factory=ServerSpec)
    quota_poll_secs: float = 60
    quota_stale_secs: float = 300
    reload_poll_secs: float = 0
    state_refresh_ms: float = 1000
    max_body_bytes: int = 32 * 1024 * 1024
    stream_heartbeat_secs: float = 15
    direct_relay: bool = True  # plain stream reads go upstream → client in the callback
    log_requests: bool = True
    refused_per_minute: float = 6
    public: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    source: str = "<memory>"
    digest: str = ""
    warnings: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()  # the included files' paths (a reload watches them too)

    def endpoint_keys(self) -> list[tuple[str, EndpointSpec]]:
        """(target, endpoint) for every endpoint in the file, in file order."""
        return [(t.name, e) for t in self.targets.values() for e in t.endpoints]

    def public_view(self) -> dict[str, Any]:
        """The configuration as JSON for ``GET /v1/config`` (a fresh copy): no secrets, ever."""
        return copy.deepcopy(dict(self.public))

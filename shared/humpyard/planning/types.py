"""Data the planner takes and returns. Plain frozen dataclasses, no behaviour."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from humpyard.config.spec import EndpointSpec


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the planner may know about a request. Credential headers are never here.

    ``headers`` are lowercased names → values. ``prompt_tokens`` is the
    conservative (high) estimate, ``prompt_tokens_low`` the optimistic one used
    only for certain-overflow capability removal; either is None when unknown
    (explain without a stated size).
    """

    model: str
    key_id: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    stream: bool = False
    tools: bool = False
    images: bool = False
    subagent: bool = False
    prompt_tokens: int | None = None
    prompt_tokens_low: int | None = None
    session_id: str | None = None
    max_tokens: int | None = None  # the client's output cap (max_tokens/max_completion_tokens)


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    """The planner's view of one endpoint's breaker (see ``health/breaker.py``)."""

    state: str = "healthy"  # healthy | cooling_down | probing
    cold: bool = False
    reopens_at: float = 0.0
    consecutive_failures: int = 0
    cooldown_remaining_ms: int = 0
    cooldown_source: str | None = None


@dataclass(frozen=True, slots=True)
class LatencyFigure:
    """One target's smoothed time-to-answer."""

    ms: float
    samples: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class Override:
    """A runtime override as stored. ``target`` is set only for ``pin_route``."""

    id: str
    kind: str  # disable_target | drain_provider | pin_route
    subject: str
    target: str | None = None
    reason: str = ""
    created_at: float = 0.0
    expires_at: float = 0.0
    created_by: str | None = None
    stale: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "subject": self.subject,
                "target": self.target, "reason": self.reason,
                "created_at": self.created_at, "expires_at": self.expires_at,
                "created_by": self.created_by, "stale": self.stale}


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """Shared state as of one refresh: what the planner reads instead of the store."""

    health: Mapping[str, EndpointHealth] = field(default_factory=dict)  # "provider/model"
    latency: Mapping[str, LatencyFigure] = field(default_factory=dict)  # target name
    overrides: tuple[Override, ...] = ()  # active (unexpired) ones
    spend_usd: Mapping[str, float] = field(default_factory=dict)  # key id → this period
    taken_at: float = 0.0
    # key id → USD reserved by this process's requests in flight (docs/routing.md, Budgets)
    reserved_usd: Mapping[str, float] = field(default_factory=dict)
    # endpoint key ("provider/model") or provider name → until when the upstream said
    # it will refuse (its rate-limit headers, or the provider's rpm/tpm_limit): pacing
    paced: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Removal:
    """A target taken out of a plan, and why. ``step`` is the planning step.

    A removal by a runtime override carries the override's ``id``, ``kind``
    and ``subject`` (the target, provider or route it names), so a decision
    can say which override acted without looking it up.
    """

    target: str
    step: str  # classes | policy | budget | capability | override | health | pacing
    reason: str
    override_id: str | None = None
    override_kind: str | None = None
    override_subject: str | None = None


@dataclass(frozen=True, slots=True)
class PlannedTarget:
    """A target the executor may call, with the endpoints left to it, in order."""

    name: str
    endpoints: tuple[EndpointSpec, ...]
    class_: str | None = None
    tail: bool = False
    cold: bool = False


@dataclass(frozen=True, slots=True)
class RuleCheck:
    """How one selector rule fared (explain lists them all; decisions the skipped)."""

    index: int
    label: str
    route: str
    matched: bool
    mismatches: tuple[str, ...] = ()
    key_may_use_route: bool = True


@dataclass(frozen=True, slots=True)
class Plan:
    """The ordered targets a request will try and everything removed on the way.

    ``targets`` holds the members first and then the guarded tail (``tail``
    flag set). Moving between two members is governed by ``fallback_on``;
    moving from the last member into the tail by ``tail_on``. For tiered
    (Switchyard) routes ``tiers`` maps ``efficient``/``capable``/``judge`` to the
    eligible targets after the policy (with tier substitution applied).
    """

    route: str
    route_type: str
    rule: str
    rule_source: str  # selector | requested_model
    targets: tuple[PlannedTarget, ...]
    fallback_on: frozenset[str]
    tail_on: frozenset[str] = frozenset()
    removals: tuple[Removal, ...] = ()
    rules: tuple[RuleCheck, ...] = ()
    ranking: tuple[tuple[str, str], ...] = ()  # (target, "fastest" | "explore")
    health_fail_open: bool = False
    prompt_tokens: int | None = None
    tiers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def removed(self, step: str) -> list[Removal]:
        return [r for r in self.removals if r.step == step]

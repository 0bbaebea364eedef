"""Routing policies: per request, which of a route's targets are eligible.

The gateway always applies ``BudgetPolicy``; an embedder may pass its own
policy (default ``AllowAll``), and a target must satisfy both. A policy only
removes: the planner takes a target out of every group the route's algorithm
sees (members, tail, tiers) when the policy returns a reason, and never adds
one back. A policy must be pure and fast: it runs for every target of every
request, and must not do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from humpyard.config.spec import Config, KeySpec, RouteSpec, TargetSpec
from humpyard.planning.types import RequestFacts, StateSnapshot

BUDGET_EXHAUSTED = "budget_exhausted"


@runtime_checkable
class RoutingPolicy(Protocol):
    """Decides whether one target may serve one request."""

    def eligible(self, route: RouteSpec, target: TargetSpec, facts: RequestFacts,
                 snapshot: StateSnapshot) -> str | None:
        """None when the target is eligible, else a short reason (``snake_case``)."""
        ...


class AllowAll:
    """The default embedder policy: every target is eligible."""

    def eligible(self, route: RouteSpec, target: TargetSpec, facts: RequestFacts,
                 snapshot: StateSnapshot) -> str | None:
        return None


class BudgetPolicy:
    """A key whose spend this period has reached its budget may use only free targets.

    Spend is ``snapshot.spend_usd[key_id]``; a target is priced when any of its
    endpoints has a price. Keys without a budget, and requests without a key,
    are never limited.
    """

    def __init__(self, keys: Mapping[str, KeySpec] | Config):
        self._keys: Mapping[str, KeySpec] = keys.keys if isinstance(keys, Config) else keys

    def exhausted(self, facts: RequestFacts, snapshot: StateSnapshot) -> bool:
        """Whether the request's key has spent its budget (checked once per request)."""
        key = self._keys.get(facts.key_id) if facts.key_id is not None else None
        if key is None or key.budget is None:
            return False
        return snapshot.spend_usd.get(key.id, 0.0) >= key.budget.usd

    def eligible(self, route: RouteSpec, target: TargetSpec, facts: RequestFacts,
                 snapshot: StateSnapshot) -> str | None:
        if target.priced and self.exhausted(facts, snapshot):
            return BUDGET_EXHAUSTED
        return None


class AllOf:
    """Policies composed: a target is eligible only if every policy says so.

    The first reason given (in the order the policies were passed) is the reason.
    """

    def __init__(self, *policies: RoutingPolicy):
        self.policies = policies

    def eligible(self, route: RouteSpec, target: TargetSpec, facts: RequestFacts,
                 snapshot: StateSnapshot) -> str | None:
        for p in self.policies:
            reason = p.eligible(route, target, facts, snapshot)
            if reason is not None:
                return reason
        return None


def compose(*policies: RoutingPolicy | None) -> RoutingPolicy:
    """One policy that a target must satisfy in full; ``None`` entries are ignored."""
    real = [p for p in policies if p is not None and not isinstance(p, AllowAll)]
    if not real:
        return AllowAll()
    return real[0] if len(real) == 1 else AllOf(*real)


def is_allow_all(policy: RoutingPolicy | None) -> bool:
    """Whether a policy can be skipped entirely (nothing to ask per target)."""
    return policy is None or isinstance(policy, AllowAll)

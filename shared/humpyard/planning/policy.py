"""Routing policies: per request, which of a route's targets are eligible.

The gateway always applies ``BudgetPolicy``; an embedder may pass its own
policy (default ``AllowAll``), and a target must satisfy both. A policy only
removes: the planner takes a target out of every group the route's algorithm
sees (members, tail, tiers) when the policy returns a reason, and never adds
one back. A policy must be pure and fast: it runs for every target of every
request, and must not do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

from humpyard.config.spec import Config, EndpointSpec, KeySpec, RouteSpec, TargetSpec
from humpyard.planning.types import RequestFacts, StateSnapshot

BUDGET_EXHAUSTED = "budget_exhausted"
UNBOUNDED_OUTPUT_TOKENS = 4096
"""The output a budget reservation assumes when neither the request's ``max_tokens``
nor the endpoint's ``max_output_tokens`` bounds it (docs/routing.md, "Budgets")."""


def output_bound(e: EndpointSpec, max_tokens: int | None) -> int:
    """The most output tokens ``e`` can write for a request asking ``max_tokens``."""
    if max_tokens is not None and e.max_output_tokens is not None:
        return min(max_tokens, e.max_output_tokens)
    if max_tokens is not None:
        return max_tokens
    return e.max_output_tokens if e.max_output_tokens is not None \
        else UNBOUNDED_OUTPUT_TOKENS


def worst_cost(endpoints: Iterable[EndpointSpec], facts: RequestFacts) -> float:
    """The most one answer from any of ``endpoints`` can cost (USD): the conservative
    prompt estimate and the output bound at each endpoint's price."""
    prompt = facts.prompt_tokens or 0
    return max((e.cost_usd(prompt, output_bound(e, facts.max_tokens))
                for e in endpoints if e.priced), default=0.0)


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
    """A priced target is eligible only while its worst-case cost fits in what is
    left of the key's budget: ``usd - spend - reserved`` (budget reservations,
    docs/routing.md); a key whose spend has reached its budget may use only free
    targets.

    Spend is ``snapshot.spend_usd[key_id]``, reserved ``snapshot.reserved_usd``;
    a target is priced when any of its endpoints has a price. Keys without a
    budget, and requests without a key, are never limited.
    """

    def __init__(self, keys: Mapping[str, KeySpec] | Config):
        self._keys: Mapping[str, KeySpec] = keys.keys if isinstance(keys, Config) else keys

    def exhausted(self, facts: RequestFacts, snapshot: StateSnapshot) -> bool:
        """Whether the request's key has spent its budget (checked once per request)."""
        key = self._keys.get(facts.key_id) if facts.key_id is not None else None
        if key is None or key.budget is None:
            return False
        return snapshot.spend_usd.get(key.id, 0.0) >= key.budget.usd

    def left(self, facts: RequestFacts, snapshot: StateSnapshot) -> float | None:
        """USD the key may still reserve (None: no budget applies)."""
        key = self._keys.get(facts.key_id) if facts.key_id is not None else None
        if key is None or key.budget is None:
            return None
        return (key.budget.usd - snapshot.spend_usd.get(key.id, 0.0)
                - snapshot.reserved_usd.get(key.id, 0.0))

    def eligible(self, route: RouteSpec, target: TargetSpec, facts: RequestFacts,
                 snapshot: StateSnapshot) -> str | None:
        if not target.priced:
            return None
        left = self.left(facts, snapshot)
        if left is not None and worst_cost(target.endpoints, facts) > left + 1e-12:
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

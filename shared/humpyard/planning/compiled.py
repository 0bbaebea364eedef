"""Per-configuration data the planner needs, computed once per loaded ``Config``.

``compile_config(config)`` builds a ``CompiledConfig`` (compiled selector
rules, per-target capability and price facts, per-route lists, the removals
a strict route always makes, capability tables, ready-made ``PlannedTarget``
objects) and caches it on the ``Config`` object itself, so every later call
with the same configuration returns the same object at the cost of one
attribute lookup. A reload builds a new ``Config`` and therefore a new
``CompiledConfig``; nothing is shared between the two.

The aim is that planning one request costs time in proportion to what it
removes, not to how many targets a route lists.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from humpyard.config.spec import Config, EndpointSpec, RouteSpec, TargetSpec
from humpyard.planning.order import FastestRanking, WeightTable, rank_fastest
from humpyard.planning.policy import BudgetPolicy
from humpyard.planning.select import CompiledRules, compile_rules
from humpyard.planning.types import LatencyFigure, PlannedTarget, Removal, StateSnapshot

_CACHE_ATTR = "_humpyard_planning"
TIERED = frozenset({"stage_router", "llm_classifier"})
CLASS_NOT_ALLOWED = "class_not_allowed"
_ROWS = ((False, False), (False, True), (True, False), (True, True))


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """A target's facts the planner reads per request."""

    spec: TargetSpec
    class_: str | None
    priced: bool
    endpoint_keys: tuple[str, ...]
    providers: frozenset[str]
    fits: tuple[float, float, float, float]
    """Per (tools, images) as ``2 * tools + images``: the largest prompt (low
    estimate) some endpoint can take; -1 when none can, ``inf`` when one
    declares no window."""
    member: PlannedTarget  # ready-made: every endpoint, not cold
    tail: PlannedTarget


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """A route's lists as the planner walks them.

    ``members`` are the targets the algorithm orders (for tiered routes every
    tier target, judge included, in ``all_targets`` order); ``tail`` the
    guarded tail; ``serving`` the targets whose presence means the route can
    still answer (all of them; for tiered routes the efficient and capable
    tiers, since a judge alone cannot answer). ``fits`` holds, per capability
    row, ``(fits, target)`` pairs in ascending order so the targets a request
    cannot fit are a prefix.
    """

    spec: RouteSpec
    members: tuple[str, ...]
    tail: tuple[str, ...]
    tiered: bool
    serving: frozenset[str]
    weights: WeightTable  # over ``members``
    everything: tuple[str, ...]  # members then tail
    index: Mapping[str, int]  # position in ``everything``
    planned: tuple[PlannedTarget, ...]  # members then tail, ready-made
    ready: Mapping[str, PlannedTarget]  # member name → ready-made
    ready_tail: Mapping[str, PlannedTarget]
    class_removals: tuple[Removal, ...]
    priced: tuple[str, ...]
    by_provider: Mapping[str, tuple[str, ...]]
    by_endpoint: Mapping[str, tuple[str, ...]]  # endpoint key → targets that use it
    fits: tuple[tuple[tuple[float, str], ...], ...]
    quality: Mapping[str, float | None]  # declared quality of each member


class SnapshotView:
    """What the planner derives from one ``StateSnapshot``, computed once per snapshot.

    ``cold`` maps each cold endpoint key (probing counts as warm) to its
    reopen time. ``cold_targets(route)`` maps each of a route's targets all of
    whose endpoints are cold to its soonest reopen time, computed on first use
    per route by looking only at targets that have a cold endpoint.
    """

    __slots__ = ("snapshot", "targets", "cold", "_cold_targets")

    def __init__(self, snapshot: StateSnapshot, targets: Mapping[str, TargetInfo]):
        self.snapshot = snapshot
        self.targets = targets
        self.cold: dict[str, float] = {
            k: h.reopens_at for k, h in snapshot.health.items()
            if h.cold and h.state != "probing"}
        self._cold_targets: dict[str, dict[str, float]] = {}

    def cold_of(self, keys: Iterable[str]) -> float | None:
        """The soonest reopen time if every endpoint in ``keys`` is cold, else None."""
        cold = self.cold
        soonest: float | None = None
        for k in keys:
            until = cold.get(k)
            if until is None:
                return None
            soonest = until if soonest is None else min(soonest, until)
        return soonest

    def cold_targets(self, route: RouteInfo) -> dict[str, float]:
        found = self._cold_targets.get(route.spec.name)
        if found is None:
            found = {}
            cold = self.cold
            if len(cold) < len(route.everything):
                by_endpoint = route.by_endpoint
                candidates: Iterable[str] = {t for k in cold for t in by_endpoint.get(k, ())}
            else:
                candidates = route.everything
            for name in candidates:
                keys = self.targets[name].endpoint_keys
                if keys[0] in cold:
                    until = self.cold_of(keys)
                    if until is not None:
                        found[name] = until
            self._cold_targets[route.spec.name] = found
        return found


class CompiledConfig:
    """Everything the planner derives from one ``Config``; read-only once built.

    Two memos live on it, both pure (the same inputs give the same plan):
    the view of the last snapshot planned with, so requests sharing a
    snapshot share its derived data; and each fastest route's ranking with
    the latency figures it was ranked on, reused while the figures are equal
    (cheap when the store hands out the same figure objects) and none can
    have aged out. Build a new ``StateSnapshot`` when state changes; never
    mutate one.
    """

    __slots__ = ("config", "rules", "targets", "routes", "budget", "skip_cold", "_view",
                 "_rankings")

    def __init__(self, config: Config):
        self.config = config
        self.rules: CompiledRules = compile_rules(config)
        self.targets: Mapping[str, TargetInfo] = {
            name: _target(t) for name, t in config.targets.items()}
        self.routes: Mapping[str, RouteInfo] = {
            name: _route(r, self.targets) for name, r in config.routes.items()}
        self.budget = BudgetPolicy(config.keys)
        self.skip_cold: bool = config.health.skip_cold_targets
        self._view: SnapshotView | None = None
        self._rankings: dict[str, tuple[Mapping[str, LatencyFigure], FastestRanking]] = {}

    def view(self, snapshot: StateSnapshot) -> SnapshotView:
        """The derived view of ``snapshot`` (memoized for the last snapshot seen)."""
        view = self._view
        if view is None or view.snapshot is not snapshot:
            view = self._view = SnapshotView(snapshot, self.targets)
        return view

    def fastest(self, route: RouteInfo, latency: Mapping[str, LatencyFigure],
                now: float) -> FastestRanking:
        """The route's full speed ranking on ``latency`` at ``now`` (memoized)."""
        spec = route.spec
        memo = self._rankings.get(spec.name)
        if memo is not None and memo[1].valid_at(now) and (
                memo[0] is latency or memo[0] == latency):
            return memo[1]
        ranking = rank_fastest(spec, spec.targets, latency, route.quality, now)
        self._rankings[spec.name] = (latency, ranking)
        return ranking


def _fits(endpoints: tuple[EndpointSpec, ...]) -> tuple[float, float, float, float]:
    out = []
    for tools, images in _ROWS:
        best = -1.0
        for e in endpoints:
            if (tools and e.tools is False) or (images and e.vision is False):
                continue
            best = max(best, math.inf if e.context_window is None else e.context_window)
        out.append(best)
    return out[0], out[1], out[2], out[3]


def _target(t: TargetSpec) -> TargetInfo:
    return TargetInfo(
        spec=t, class_=t.class_, priced=t.priced,
        endpoint_keys=tuple(e.key for e in t.endpoints),
        providers=frozenset(e.provider for e in t.endpoints),
        fits=_fits(t.endpoints),
        member=PlannedTarget(name=t.name, endpoints=t.endpoints, class_=t.class_),
        tail=PlannedTarget(name=t.name, endpoints=t.endpoints, class_=t.class_, tail=True),
    )


def _route(r: RouteSpec, targets: Mapping[str, TargetInfo]) -> RouteInfo:
    tiered = r.type in TIERED
    if tiered:
        members = tuple(t for t in r.all_targets if t not in r.tail)
        serving = frozenset((*r.efficient, *r.capable))
    else:
        members = r.targets
        serving = frozenset((*r.targets, *r.tail))
    everything = (*members, *r.tail)
    allowed = frozenset(r.allowed_classes) if r.allowed_classes else None
    providers: dict[str, list[str]] = {}
    endpoints: dict[str, list[str]] = {}
    for t in everything:
        for p in sorted(targets[t].providers):
            providers.setdefault(p, []).append(t)
        for k in dict.fromkeys(targets[t].endpoint_keys):
            endpoints.setdefault(k, []).append(t)
    return RouteInfo(
        spec=r, members=members, tail=r.tail, tiered=tiered, serving=serving,
        weights=WeightTable.build(
            members, dict(zip(r.targets, r.weights, strict=False)) if r.weights else {}),
        everything=everything, index={t: i for i, t in enumerate(everything)},
        planned=(*(targets[t].member for t in members), *(targets[t].tail for t in r.tail)),
        ready={t: targets[t].member for t in members},
        ready_tail={t: targets[t].tail for t in r.tail},
        class_removals=tuple(Removal(t, "classes", CLASS_NOT_ALLOWED) for t in everything
                             if allowed is not None and targets[t].class_ not in allowed),
        priced=tuple(t for t in everything if targets[t].priced),
        by_provider={p: tuple(ts) for p, ts in providers.items()},
        by_endpoint={k: tuple(ts) for k, ts in endpoints.items()},
        fits=tuple(tuple(sorted(((targets[t].fits[row], t) for t in everything),
                                key=lambda pair: pair[0]))
                   for row in range(4)),
        quality={t: targets[t].spec.quality for t in members},
    )


def compile_config(config: Config) -> CompiledConfig:
    """The ``CompiledConfig`` of ``config``, built on first use and cached on it."""
    cached = config.__dict__.get(_CACHE_ATTR) if hasattr(config, "__dict__") else None
    if isinstance(cached, CompiledConfig) and cached.config is config:
        return cached
    compiled = CompiledConfig(config)
    try:
        # Config is frozen; the cache is not one of its fields, so equality,
        # hashing and repr are unaffected.
        object.__setattr__(config, _CACHE_ATTR, compiled)
    except (AttributeError, TypeError):  # a slotted stand-in: compile per call
        pass
    return compiled

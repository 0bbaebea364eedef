"""What a request would do, as JSON: the same ``plan()`` real requests run.

``explain()`` never calls a provider and never raises the planner's
refusals: it reports them as ``outcome`` (``ok``, ``forbidden``,
``unknown_model``, ``budget_exhausted``, ``no_eligible_target``,
``no_capable_target``, ``override_no_target``) with the refusal's
``message``. It plans without random draws (no exploration, random routes in
written order) and with every selector rule evaluated, so the route and the
set of targets are exactly those a real request with the same facts gets.
A ``prompt_tokens`` stated without a low estimate is used as both estimates.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from humpyard.config.spec import Config, EndpointSpec, RouteSpec
from humpyard.errors import ForbiddenError, PlanRefused, UnknownModel
from humpyard.planning.compiled import CompiledConfig, compile_config
from humpyard.planning.order import fastest_score
from humpyard.planning.plan import plan, refusal_plan
from humpyard.planning.policy import RoutingPolicy
from humpyard.planning.types import (
    EndpointHealth,
    Plan,
    PlannedTarget,
    Removal,
    RequestFacts,
    StateSnapshot,
)

_NO_VIEWS: Mapping[str, dict] = {}
_REMOVAL_LISTS = (
    ("excluded_targets", ("classes",)),
    ("ineligible_targets", ("policy", "budget")),
    ("incapable_targets", ("capability",)),
    ("overridden_targets", ("override",)),
    ("health_skipped_targets", ("health",)),
    ("paced_targets", ("pacing",)),
)


def explain(facts: RequestFacts, snapshot: StateSnapshot, config: Config | CompiledConfig,
            now: float, *, recent: Mapping[str, dict] = _NO_VIEWS,
            health_views: Mapping[str, dict] = _NO_VIEWS,
            policy: RoutingPolicy | None = None) -> dict[str, Any]:
    """The decision for ``facts`` as a JSON-ready dict (see the module docstring).

    ``recent`` maps a target name to its 24-hour figures (from ``/v1/stats``);
    ``health_views`` maps an endpoint key (``provider/model``) to extra fields
    merged into that endpoint's entry (readiness, for example).
    """
    cc = config if isinstance(config, CompiledConfig) else compile_config(config)
    if facts.prompt_tokens_low is None and facts.prompt_tokens is not None:
        facts = replace(facts, prompt_tokens_low=facts.prompt_tokens)
    outcome, message = "ok", None
    try:
        p = plan(facts, snapshot, cc, now, random.Random(0), policy=policy, explore=False,
                 all_rules=True)
    except (UnknownModel, ForbiddenError, PlanRefused) as e:
        refused = refusal_plan(e)
        assert refused is not None  # plan() attaches one to every refusal
        p, outcome, message = refused, e.code, e.message
    route = cc.config.routes.get(p.route) if outcome != "unknown_model" else None
    out: dict[str, Any] = {
        "model": facts.model,
        "selected": {"route": p.route, "rule": p.rule, "source": p.rule_source},
        "rules": _rules(cc, p),
        "budget": _budget(cc, facts, snapshot),
        "prompt_tokens": facts.prompt_tokens,
        "route": _route(cc, route, p) if route else None,
        "targets": [_target(cc, route, t, snapshot, now, recent, health_views)
                    for t in p.targets] if route else [],
        "ranking": [list(r) for r in p.ranking],
        "tiers": {k: list(v) for k, v in p.tiers.items()} or None,
    }
    for name, steps in _REMOVAL_LISTS:
        out[name] = [_removal(r) for r in p.removals if r.step in steps]
    out["health_fail_open"] = p.health_fail_open
    out["outcome"] = outcome
    if message is not None:
        out["message"] = message
    return out


def _removal(r: Removal) -> dict[str, Any]:
    entry: dict[str, Any] = {"target": r.target, "reason": r.reason}
    if r.step in ("policy", "budget"):
        entry["step"] = r.step
    if r.override_id is not None:
        entry.update(override_id=r.override_id, kind=r.override_kind,
                     subject=r.override_subject)
    return entry


def _rules(cc: CompiledConfig, p: Plan) -> list[dict[str, Any]]:
    select = cc.config.select
    return [{"index": c.index, "name": select[c.index].name, "label": c.label,
             "route": c.route, "matched": c.matched, "mismatches": list(c.mismatches),
             "key_may_use_route": c.key_may_use_route} for c in p.rules]


def _budget(cc: CompiledConfig, facts: RequestFacts,
            snapshot: StateSnapshot) -> dict[str, Any] | None:
    key = cc.config.keys.get(facts.key_id) if facts.key_id is not None else None
    if key is None or key.budget is None:
        return None
    spent = snapshot.spend_usd.get(key.id, 0.0)
    reserved = snapshot.reserved_usd.get(key.id, 0.0)
    return {"usd": key.budget.usd, "spent_usd": round(spent, 8), "period": key.budget.period,
            "exhausted": spent >= key.budget.usd, "reserved_usd": round(reserved, 8),
            "left_usd": round(max(0.0, key.budget.usd - spent - reserved), 8)}


def _can_cross(cc: CompiledConfig, route: RouteSpec, names: list[str]) -> bool | None:
    """Whether falling through could leave the first class (None: a target is unclassed).

    Only targets a request can reach count: with ``fallback_on = []`` just the
    first member, and the tail only when its guard lists a failure class.
    """
    members = [t for t in names if t not in route.tail]
    reachable = members if route.fallback_on else members[:1]
    if route.tail_on or not members:
        reachable += [t for t in names if t in route.tail]
    if len(reachable) < 2:
        return False
    classes = [cc.targets[t].class_ for t in reachable]
    if any(c is None for c in classes):
        return None
    return len(set(classes)) > 1


def _route(cc: CompiledConfig, route: RouteSpec, p: Plan) -> dict[str, Any]:
    removed = {r.target for r in p.removals if r.step == "classes"}
    names = ([t.name for t in p.targets] if p.targets
             else [t for t in route.all_targets if t not in removed])
    classes: list[str | None] = []
    for t in names:
        c = cc.targets[t].class_
        if c not in classes:
            classes.append(c)
    out: dict[str, Any] = {
        "name": route.name, "type": route.type, "implicit": route.implicit,
        "fallback_on": sorted(route.fallback_on),
        "allowed_classes": list(route.allowed_classes) if route.allowed_classes else None,
        "classes": classes,
        "fallback_can_cross_classes": _can_cross(cc, route, names),
        "pool": None, "tail": None,
    }
    if route.pool is not None:
        out["pool"] = {
            "strength": route.pool.strength,
            "min_context_window": route.pool.min_context_window,
            "min_quality": route.pool.min_quality,
            "members": list(route.targets),
            "left_out": [{"target": t, "reason": r} for t, r in route.pool_left_out],
        }
    if route.tail:
        out["tail"] = {"targets": list(route.tail), "on": sorted(route.tail_on)}
    if route.type == "random":
        table = cc.routes[route.name].weights
        weight = dict(zip(table.names, table.weights, strict=True))
        left = [t.name for t in p.targets if not t.tail]
        total = sum(weight[t] for t in left) or 1.0
        out["weights"] = {t: weight[t] / total for t in left}
    if route.type == "fastest":
        out.update(explore=route.explore, min_samples=route.min_samples,
                   max_age_secs=route.max_age_secs, quality_weight=route.quality_weight,
                   latency_target_ms=route.latency_target_ms)
    return out


def _endpoint(e: EndpointSpec, h: EndpointHealth | None,
              views: Mapping[str, dict]) -> dict[str, Any]:
    h = h or EndpointHealth()
    entry: dict[str, Any] = {
        "provider": e.provider, "model": e.model, "context_window": e.context_window,
        "tools": e.tools, "vision": e.vision, "priced": e.priced,
        "state": h.state, "cold": h.cold and h.state != "probing",
        "consecutive_failures": h.consecutive_failures,
        "cooldown_remaining_ms": h.cooldown_remaining_ms,
        "cooldown_source": h.cooldown_source,
    }
    entry.update(views.get(e.key, {}))
    return entry


def _target(cc: CompiledConfig, route: RouteSpec, t: PlannedTarget, snapshot: StateSnapshot,
            now: float, recent: Mapping[str, dict],
            views: Mapping[str, dict]) -> dict[str, Any]:
    spec = cc.targets[t.name].spec
    figure = snapshot.latency.get(t.name)
    score = fastest_score(route, figure, spec.quality, now)
    return {
        "name": t.name, "class": t.class_, "cold": t.cold, "tail": t.tail,
        "endpoints": [_endpoint(e, snapshot.health.get(e.key), views) for e in t.endpoints],
        "recent": recent.get(t.name),
        "quality": spec.quality,
        "speed_score": score.speed if route.type == "fastest" else None,
        "score": score.score if route.type == "fastest" else None,
        "current_latency_ms": figure.ms if figure else None,
        "latency_samples": figure.samples if figure else 0,
    }

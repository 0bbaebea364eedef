"""The planning step: request facts + state snapshot + config + clock → ``Plan``.

``plan()`` runs, in order:

1. select the route (``select.py``); an unknown route is ``UnknownModel``
   (404) and a route the key may not use is ``ForbiddenError`` (403);
2. strict classes (``allowed_classes``);
3. the routing policy: the embedder's, then the budget; nothing left is
   ``BudgetExhausted`` (429) when the budget emptied the route, else
   ``NoEligibleTarget`` (503);
4. capabilities (declared tools/vision/context window); nothing left is
   ``NoCapableTarget`` (400), whose message names the reasons;
5. runtime overrides; nothing left is ``OverrideNoTarget`` (503);
6. health: cold targets skipped where a warm alternative remains, never
   refused (fail open, soonest to reopen first); then pacing: targets whose
   upstream said it has nothing left of its rate limits, skipped the same way;
7. ordering by route type (passthrough, random, fastest); tiered routes get
   their tiers with substitution.

Every refusal is raised before any upstream call and carries ``exc.plan``: a
``Plan`` with no targets and every removal made so far, for the ledger.
Planning only ever removes targets, never adds one.
"""

from __future__ import annotations

import random
from collections.abc import MutableMapping

from humpyard.config.spec import Config, RouteSpec
from humpyard.errors import (
    BudgetExhausted,
    ForbiddenError,
    HumpyardError,
    NoCapableTarget,
    NoEligibleTarget,
    OverrideNoTarget,
    UnknownModel,
)
from humpyard.planning import steps
from humpyard.planning.causes import describe
from humpyard.planning.compiled import CompiledConfig, SnapshotView, compile_config
from humpyard.planning.order import explore_first, order_random
from humpyard.planning.policy import RoutingPolicy, is_allow_all
from humpyard.planning.select import Selection, key_may_use, select_route
from humpyard.planning.types import Plan, PlannedTarget, RequestFacts, StateSnapshot


def plan(facts: RequestFacts, snapshot: StateSnapshot, config: Config | CompiledConfig,
         now: float, rng: random.Random, *, policy: RoutingPolicy | None = None,
         route_rngs: MutableMapping[str, random.Random] | None = None,
         explore: bool = True, all_rules: bool = False) -> Plan:
    """Plan one request. Pure: reads nothing but its arguments.

    ``config`` is the loaded ``Config`` (its ``CompiledConfig`` is built once
    and cached on it) or that ``CompiledConfig``. ``rng`` serves routes
    without a ``seed``; a seeded route draws from ``route_rngs[route]``,
    created there as ``random.Random(seed)`` on first use, so the caller keeps
    the dict for the life of the configuration to make draws reproducible.
    ``explore=False`` makes no random draws (explain): fastest routes do not
    explore and random routes keep the written order.
    ``all_rules`` lists every selector rule in ``Plan.rules`` with all its
    mismatches; otherwise only the rules that matched (skipped ones, winner).
    Raises ``UnknownModel``, ``ForbiddenError`` or a ``PlanRefused``; each
    carries ``exc.plan``.
    """
    cc = config if isinstance(config, CompiledConfig) else compile_config(config)
    sel = select_route(cc.rules, facts, all_rules=all_rules)
    info = cc.routes.get(sel.route)
    if info is None:
        raise _refuse(UnknownModel(f"unknown model {sel.route!r}: no route or target has "
                                   "that name"), sel, None, None, facts)
    route = info.spec
    if not key_may_use(cc.rules.keys, facts.key_id, route.name):
        raise _refuse(ForbiddenError(f"key {facts.key_id!r} may not use route "
                                     f"{route.name!r}"), sel, route, None, facts)
    w = steps.Work(cc, info)
    steps.apply_classes(w)
    if not w.servable():
        raise _refuse(NoEligibleTarget(_no_target(w, facts, snapshot)), sel, route, w, facts)
    _policy_step(w, facts, snapshot, policy, sel)
    steps.apply_capabilities(w, facts)
    if not w.servable():
        raise _refuse(NoCapableTarget(_no_target(w, facts, snapshot, capable=True)),
                      sel, route, w, facts)
    if snapshot.overrides:
        steps.apply_overrides(w, snapshot.overrides, now)
        if not w.servable():
            raise _refuse(OverrideNoTarget(_no_target(w, facts, snapshot)), sel, route, w,
                          facts)
    view = cc.view(snapshot)
    steps.apply_health(w, view, cc.skip_cold)
    if snapshot.paced:
        steps.apply_pacing(w, snapshot.paced, now)
    rng = _route_rng(route, rng, route_rngs)
    return _finish(w, sel, facts, view, now, rng, explore)


def refusal_plan(exc: BaseException) -> Plan | None:
    """The partial plan a planning refusal carries (``exc.plan``), or None."""
    found = getattr(exc, "plan", None)
    return found if isinstance(found, Plan) else None


def _policy_step(w: steps.Work, facts: RequestFacts, snapshot: StateSnapshot,
                 policy: RoutingPolicy | None, sel: Selection) -> None:
    route = w.info.spec
    exhausted = w.cc.budget.exhausted(facts, snapshot)
    left = None if exhausted else w.cc.budget.left(facts, snapshot)
    steps.apply_policy(w, facts, snapshot, None if is_allow_all(policy) else policy, exhausted,
                       left)
    if w.servable():
        return
    refusal = BudgetExhausted if any(r.step == "budget" for r in w.removals) \
        else NoEligibleTarget
    raise _refuse(refusal(_no_target(w, facts, snapshot)), sel, route, w, facts)


def _no_target(w: steps.Work, facts: RequestFacts, snapshot: StateSnapshot, *,
               capable: bool = False) -> str:
    """The refusal's message: every step that removed targets (``causes.py``)."""
    name = w.info.spec.name
    lead = (f"no target of route {name!r} can serve this request" if capable
            else f"route {name!r} has no target left")
    return f"{lead}: " + "; ".join(describe(w.removals, w.cc, name, facts, snapshot))


def _route_rng(route: RouteSpec, rng: random.Random,
               route_rngs: MutableMapping[str, random.Random] | None) -> random.Random:
    if route.seed is None or route_rngs is None:
        return rng
    seeded = route_rngs.get(route.name)
    if seeded is None:
        seeded = route_rngs[route.name] = random.Random(route.seed)
    return seeded


def _refuse(exc: HumpyardError, sel: Selection, route: RouteSpec | None,
            w: steps.Work | None, facts: RequestFacts) -> HumpyardError:
    """Attach the partial plan (no targets, the removals so far) to a refusal."""
    exc.plan = Plan(  # type: ignore[attr-defined]
        route=sel.route, route_type=route.type if route else "", rule=sel.rule,
        rule_source=sel.source, targets=(),
        fallback_on=route.fallback_on if route else frozenset(),
        tail_on=route.tail_on if route else frozenset(),
        removals=tuple(w.removals) if w else (), rules=sel.checks,
        prompt_tokens=facts.prompt_tokens)
    return exc


def _planned(w: steps.Work, name: str, tail: bool) -> PlannedTarget:
    info = w.cc.targets[name]
    cold = name in w.cold
    if name not in w.eps and not cold:
        return info.tail if tail else info.member
    return PlannedTarget(name=name, endpoints=w.endpoints(name), class_=info.class_,
                         tail=tail, cold=cold)


def _soonest(w: steps.Work, names: list[str]) -> list[str]:
    return sorted(names, key=lambda t: w.cold.get(t, 0.0))


def _order(w: steps.Work, view: SnapshotView, now: float, rng: random.Random,
           explore: bool) -> tuple[list[str], list[tuple[str, str]]]:
    route = w.info.spec
    if "members" in w.open_groups:
        return _soonest(w, w.members()), []
    if route.type == "fastest":
        order = w.cc.fastest(w.info, view.snapshot.latency, now).order(w.gone)
        return order, explore_first(order, route, rng, explore)
    members = w.members()
    if route.type == "random" and explore:
        return order_random(members, w.info.weights, rng, w.gone), []
    return members, []


def _tiers(w: steps.Work, members: list[str]) -> dict[str, tuple[str, ...]]:
    """Each tier's remaining targets, an emptied tier served by the other one."""
    rank = {t: i for i, t in enumerate(members)}
    route = w.info.spec

    def tier(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted((t for t in names if t in rank), key=rank.__getitem__))

    efficient, capable = tier(route.efficient), tier(route.capable)
    efficient, capable = efficient or capable, capable or efficient
    out = {"efficient": efficient, "capable": capable}
    if route.judge:
        judge = tier((route.judge,))
        out["judge"] = judge or efficient or capable
    return out


def _targets(w: steps.Work, members: list[str], tail: list[str]) -> tuple[PlannedTarget, ...]:
    if not w.gone and not w.eps and not w.cold and members == list(w.info.members):
        return w.info.planned
    if not w.eps and not w.cold:
        ready, ready_tail = w.info.ready, w.info.ready_tail
        return tuple([ready[t] for t in members] + [ready_tail[t] for t in tail])
    return tuple([_planned(w, t, False) for t in members]
                 + [_planned(w, t, True) for t in tail])


def _finish(w: steps.Work, sel: Selection, facts: RequestFacts, view: SnapshotView,
            now: float, rng: random.Random, explore: bool) -> Plan:
    route = w.info.spec
    tail = w.tail()
    tiers: dict[str, tuple[str, ...]] = {}
    ranking: list[tuple[str, str]] = []
    if w.info.tiered:
        members = w.members()
        if "members" in w.open_groups:
            members = _soonest(w, members)
        tiers = _tiers(w, members)
    else:
        members, ranking = _order(w, view, now, rng, explore)
    if "tail" in w.open_groups:
        tail = _soonest(w, tail)
    first_group = "members" if members else "tail"
    return Plan(
        route=route.name, route_type=route.type, rule=sel.rule, rule_source=sel.source,
        targets=_targets(w, members, tail), fallback_on=route.fallback_on,
        tail_on=route.tail_on, removals=tuple(w.gone.values()), rules=sel.checks,
        ranking=tuple(ranking), health_fail_open=first_group in w.open_groups,
        prompt_tokens=facts.prompt_tokens, tiers=tiers)

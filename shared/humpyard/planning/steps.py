"""The narrowing steps of planning, in the order the planner runs them.

strict classes → routing policy (embedder, then budget) → capabilities →
overrides → health. Each step only removes targets (and, for a drained
provider, endpoints from a target) and records a ``Removal`` for each; none
adds anything back. Deciding whether a step left the route unable to serve,
and refusing, is ``plan.py``'s job.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping

from humpyard.config.spec import EndpointSpec
from humpyard.planning.compiled import CompiledConfig, RouteInfo, SnapshotView
from humpyard.planning.policy import BUDGET_EXHAUSTED, RoutingPolicy, worst_cost
from humpyard.planning.types import Override, Removal, RequestFacts, StateSnapshot

TOOLS = "tools_unsupported"
VISION = "vision_unsupported"
WINDOW = "context_window_exceeded"
COLD = "cold"
PACED = "upstream_rate_limited"


def _first(pair: tuple[float, str]) -> float:
    return pair[0]


class Work:
    """The state of one planning run: what went and why, and what is left.

    ``gone`` maps each removed target to its ``Removal`` in removal order; a
    target is removed at most once. ``eps`` holds the endpoints left to a
    target that lost some to a drained provider; ``cold`` the cold targets
    still in the plan with their soonest reopen time; ``open_groups`` the
    groups (``members``, ``tail``) kept although every target in them is cold.
    """

    __slots__ = ("cc", "info", "gone", "left", "eps", "cold", "open_groups")

    def __init__(self, cc: CompiledConfig, info: RouteInfo):
        self.cc = cc
        self.info = info
        self.gone: dict[str, Removal] = {}
        self.left = len(info.serving)  # serving targets not yet removed
        self.eps: dict[str, tuple[EndpointSpec, ...]] = {}
        self.cold: dict[str, float] = {}
        self.open_groups: set[str] = set()

    def remove(self, removal: Removal) -> None:
        t = removal.target
        if t in self.gone:
            return
        self.gone[t] = removal
        if t in self.info.serving:
            self.left -= 1

    def servable(self) -> bool:
        """Whether anything left can answer (a tiered route needs a non-judge target)."""
        return self.left > 0

    def alive(self) -> list[str]:
        gone = self.gone
        return [t for t in self.info.everything if t not in gone]

    def members(self) -> list[str]:
        gone = self.gone
        return [t for t in self.info.members if t not in gone] if gone else list(
            self.info.members)

    def tail(self) -> list[str]:
        gone = self.gone
        return [t for t in self.info.tail if t not in gone]

    @property
    def removals(self) -> list[Removal]:
        return list(self.gone.values())

    def endpoints(self, target: str) -> tuple[EndpointSpec, ...]:
        eps = self.eps.get(target)
        return eps if eps is not None else self.cc.targets[target].spec.endpoints


def apply_classes(w: Work) -> None:
    """Strict routes: drop every target whose class is not allowed (or that has none)."""
    for r in w.info.class_removals:
        w.remove(r)


def apply_policy(w: Work, facts: RequestFacts, snapshot: StateSnapshot,
                 policy: RoutingPolicy | None, budget_exhausted: bool,
                 budget_left: float | None = None) -> None:
    """The embedder's policy, then the budget: a target must satisfy both. With
    ``budget_left`` (USD the key may still reserve), a priced target whose
    worst-case cost does not fit is removed too (budget reservations)."""
    if policy is not None:
        targets = w.cc.targets
        route = w.info.spec
        for t in w.alive():
            reason = policy.eligible(route, targets[t].spec, facts, snapshot)
            if reason is not None:
                w.remove(Removal(t, "policy", reason))
    if budget_exhausted:
        for t in w.info.priced:
            if t not in w.gone:
                w.remove(Removal(t, "budget", BUDGET_EXHAUSTED))
    elif budget_left is not None:
        targets = w.cc.targets
        for t in w.info.priced:
            if t not in w.gone and worst_cost(targets[t].spec.endpoints,
                                              facts) > budget_left + 1e-12:
                w.remove(Removal(t, "budget", BUDGET_EXHAUSTED))


def _endpoint_refusal(e: EndpointSpec, facts: RequestFacts, low: int | None) -> str | None:
    if facts.tools and e.tools is False:
        return TOOLS
    if facts.images and e.vision is False:
        return VISION
    if low is not None and e.context_window is not None and low > e.context_window:
        return WINDOW
    return None


def capability_reason(endpoints: Iterable[EndpointSpec], facts: RequestFacts) -> str | None:
    """Why no endpoint can serve the request, or None if one can.

    A target-wide reason (every endpoint refuses for it) is preferred, in the
    order tools, vision, window; otherwise the first endpoint's reason.
    """
    low = facts.prompt_tokens_low
    refusals = []
    for e in endpoints:
        why = _endpoint_refusal(e, facts, low)
        if why is None:
            return None
        refusals.append((e, why))
    if not refusals:
        return None
    eps = [e for e, _ in refusals]
    if facts.tools and all(e.tools is False for e in eps):
        return TOOLS
    if facts.images and all(e.vision is False for e in eps):
        return VISION
    if low is not None and all(e.context_window is not None and low > e.context_window
                               for e in eps):
        return WINDOW
    return refusals[0][1]


def apply_capabilities(w: Work, facts: RequestFacts) -> None:
    """Drop targets none of whose endpoints can take the request (declared facts only)."""
    low = facts.prompt_tokens_low
    if not (facts.tools or facts.images or low is not None):
        return
    row = w.info.fits[2 * bool(facts.tools) + bool(facts.images)]
    cut = bisect_left(row, 0.0 if low is None else float(low), key=_first)
    if not cut:
        return
    index = w.info.index
    specs = w.cc.targets
    for t in sorted((t for _, t in row[:cut] if t not in w.gone), key=index.__getitem__):
        reason = capability_reason(specs[t].spec.endpoints, facts) or WINDOW
        w.remove(Removal(t, "capability", reason))


def active_overrides(overrides: Iterable[Override], now: float) -> list[Override]:
    """The overrides that still act: not stale and not expired (``expires_at`` 0 = never)."""
    return [o for o in overrides
            if not o.stale and not (o.expires_at and o.expires_at <= now)]


def apply_overrides(w: Work, overrides: Iterable[Override], now: float) -> None:
    """disable_target, drain_provider and pin_route; stale or expired ones do nothing.

    A pin whose target the route does not list (a reload removed it) is stale.
    Several pins on one route keep every target they name.
    """
    info = w.info
    pins: list[Override] = []
    for o in active_overrides(overrides, now):
        if o.kind == "disable_target":
            if o.subject in info.index and o.subject not in w.gone:
                w.remove(_by_override(o.subject, o))
        elif o.kind == "drain_provider":
            _drain(w, o)
        elif o.kind == "pin_route":
            if o.subject == info.spec.name and o.target in info.index:
                pins.append(o)
    if pins:
        keep = {o.target for o in pins}
        for t in w.alive():
            if t not in keep:
                w.remove(_by_override(t, pins[0]))


def _drain(w: Work, o: Override) -> None:
    for t in w.info.by_provider.get(o.subject, ()):
        if t in w.gone:
            continue
        left = tuple(e for e in w.endpoints(t) if e.provider != o.subject)
        if left:
            w.eps[t] = left
        else:
            w.remove(_by_override(t, o))


def _by_override(target: str, o: Override) -> Removal:
    return Removal(target, "override", o.kind, o.id, override_kind=o.kind,
                   override_subject=o.subject)


def _mark_cold(w: Work, view: SnapshotView) -> None:
    gone, eps = w.gone, w.eps
    for t, until in view.cold_targets(w.info).items():
        if t not in gone and t not in eps:
            w.cold[t] = until
    for t, left in eps.items():  # endpoints left after a drain; drained ones never return
        if t not in gone:
            soonest = view.cold_of(e.key for e in left)
            if soonest is not None:
                w.cold[t] = soonest


def apply_health(w: Work, view: SnapshotView, skip_cold: bool) -> None:
    """Mark cold targets; skip them where a warm alternative remains in their group.

    A target is cold when every endpoint it has left is cold (probing counts
    as warm). Groups are the members and the guarded tail, each on its own: a
    cold member is skipped only for a warm member, so members that are all
    cold are kept (soonest to reopen first) and tried before the tail. For
    tiered routes the group is every tier target, and a warm efficient or
    capable target must remain. A group kept although all cold is recorded in
    ``open_groups``; nothing here can empty a group.
    """
    if not view.cold:
        return
    _mark_cold(w, view)
    if not w.cold or not skip_cold:
        return
    gone: list[str] = []
    serving = w.info.serving
    for group, names in (("members", w.members()), ("tail", w.tail())):
        cold = [t for t in names if t in w.cold]
        if not cold:
            continue
        if w.info.tiered:
            warm = any(t not in w.cold and t in serving for t in names)
        else:
            warm = len(cold) < len(names)
        if warm:
            gone.extend(cold)
        else:
            w.open_groups.add(group)
    for t in gone:
        del w.cold[t]
        w.remove(Removal(t, "health", COLD))


def _paced(w: Work, target: str, paced: Mapping[str, float], now: float) -> bool:
    """Whether every endpoint left to ``target`` is paced (by endpoint or provider)."""
    for e in w.endpoints(target):
        if paced.get(e.key, 0.0) <= now and paced.get(e.provider, 0.0) <= now:
            return False
    return True


def apply_pacing(w: Work, paced: Mapping[str, float], now: float) -> None:
    """Skip targets whose upstreams said they will refuse (``health/pacing.py``) where a
    target of the same group (members, tail) is not paced; never empties a group, and
    a tiered route keeps every tier target (its tiers substitute on their own)."""
    if w.info.tiered:
        return
    gone: list[str] = []
    for names in (w.members(), w.tail()):
        hit = [t for t in names if _paced(w, t, paced, now)]
        if hit and len(hit) < len(names):
            gone.extend(hit)
    for t in gone:
        w.cold.pop(t, None)
        w.remove(Removal(t, "pacing", PACED))

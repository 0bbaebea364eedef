"""The routes of a configuration, checked and resolved: each route's targets
(a list, or a pool chosen by strength, context window and quality, with the
targets left out and why), its tiers, judge and ``then`` tail, its fallback
classes, a strict route's allowed classes, and the ``select`` rules that name
routes. Part of ``resolve`` (``config/resolve.py``): every error names its key
path and the bad value, and an unknown name comes with the closest one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from humpyard.config.models import Pool, RawConfig, Route
from humpyard.config.names import FAILURE_CLASSES
from humpyard.config.problems import Salvage, did_you_mean, path
from humpyard.config.spec import PoolSpec, RouteSpec, TargetSpec

DEFAULT_FALLBACK = frozenset(c for c in FAILURE_CLASSES if c != "unavailable")
"""The failure classes a route fails over on unless it says (``unavailable`` aside)."""


def _unknown_target(where: str, name: str, targets: Mapping[str, TargetSpec],
                    known: Salvage) -> str:
    return f"{where}: unknown target {name!r}" + did_you_mean(
        name, known.names("targets", targets), "target")


def _check_names(where: tuple[str | int, ...], names: list[str],
                 targets: Mapping[str, TargetSpec], errors: list[str], known: Salvage) -> None:
    for i, t in enumerate(names):
        if t not in targets and not known.exists("targets", t):
            errors.append(_unknown_target(path(*where, i), t, targets, known))
    dupes = sorted({t for t in names if names.count(t) > 1})
    if dupes:
        errors.append(f"{path(*where)}: targets repeat: {dupes}")


def _pool_members(name: str, r: Route, targets: Mapping[str, TargetSpec], errors: list[str],
                  known: Salvage) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    assert r.pool is not None
    pool = r.pool
    having = [t for t in sorted(targets) if pool.strength in targets[t].strengths]
    existing = sorted({s for t in targets.values() for s in t.strengths})
    if not having:
        if not known.any_broken("targets"):  # a broken target may have had the strength
            errors.append(f"{path('routes', name, 'pool', 'strength')}: no target has "
                          f"strength {pool.strength!r}; {_strengths_that_exist(existing)}"
                          + _suggestion(pool.strength, existing))
        return (), ()
    members: list[str] = []
    left_out: list[tuple[str, str]] = []
    for t in having:
        spec = targets[t]
        if pool.min_context_window is not None:
            windows = [e.context_window for e in spec.endpoints if e.context_window]
            if not windows:
                left_out.append((t, "context_window_undeclared"))
                continue
            if max(windows) < pool.min_context_window:
                left_out.append((t, "context_window_below"))
                continue
        if pool.min_quality is not None:
            if spec.quality is None:
                left_out.append((t, "quality_undeclared"))
                continue
            if spec.quality < pool.min_quality:
                left_out.append((t, "quality_below"))
                continue
        members.append(t)
    if not members:
        why = "; ".join(f"{t!r} {_left_out_why(targets[t], r, pool)}" for t, r in left_out)
        errors.append(f"{path('routes', name, 'pool')}: no target with strength "
                      f"{pool.strength!r} qualifies: {why}; {_strengths_that_exist(existing)}")
    return tuple(members), tuple(left_out)


def _strengths_that_exist(existing: Sequence[str]) -> str:
    if not existing:
        return "no target declares a strength"
    return "strengths that exist: " + ", ".join(repr(s) for s in existing)


def _suggestion(word: str, existing: Sequence[str]) -> str:
    """``; did you mean 'x'?`` when one strength is close (the list is given anyway)."""
    hint = did_you_mean(word, existing, "strength")
    return hint if hint.startswith(";") else ""


def _left_out_why(t: TargetSpec, reason: str, pool: Pool) -> str:
    """Why target ``t`` with the pool's strength left it, for the error that lists them."""
    if reason == "context_window_undeclared":
        return (f"declares no context_window on any endpoint (min_context_window "
                f"{pool.min_context_window})")
    if reason == "context_window_below":
        best = max((e.context_window or 0 for e in t.endpoints), default=0)
        return f"has context_window {best} < min_context_window {pool.min_context_window}"
    if reason == "quality_undeclared":
        return f"declares no quality (min_quality {pool.min_quality})"
    return f"has quality {t.quality} < min_quality {pool.min_quality}"


def resolve_routes(raw: RawConfig, targets: dict[str, TargetSpec], errors: list[str],
            known: Salvage) -> dict[str, RouteSpec]:
    out: dict[str, RouteSpec] = {}
    for name, r in raw.routes.items():
        where = ("routes", name)
        left_out: tuple[tuple[str, str], ...] = ()
        if r.pool is not None:
            members, left_out = _pool_members(name, r, targets, errors, known)
        else:
            members = tuple(r.targets or ())
            _check_names((*where, "targets"), list(members), targets, errors, known)
        for tier in ("efficient", "capable"):
            _check_names((*where, tier), list(getattr(r, tier) or []), targets, errors, known)
        if r.judge is not None and r.judge not in targets and not known.exists("targets",
                                                                                r.judge):
            errors.append(_unknown_target(path(*where, "judge"), r.judge, targets, known))
        tail = tuple(r.then.targets) if r.then else ()
        _check_names((*where, "then", "targets"), list(tail), targets, errors, known)
        for t in tail:
            if t in members:
                errors.append(f"{path(*where, 'then', 'targets')}: {t!r} is already a pool "
                              "member")
        spec = RouteSpec(
            name=name, type=r.type, targets=members,
            fallback_on=_fallback(r),
            weights=tuple(r.weights) if r.weights is not None else None, seed=r.seed,
            explore=r.explore, min_samples=r.min_samples, max_age_secs=r.max_age_secs,
            quality_weight=r.quality_weight, latency_target_ms=r.latency_target_ms,
            unknown_quality=r.unknown_quality,
            allowed_classes=tuple(r.allowed_classes) if r.allowed_classes else None,
            pool=PoolSpec(r.pool.strength, r.pool.min_context_window, r.pool.min_quality)
            if r.pool else None,
            pool_left_out=left_out, tail=tail,
            tail_on=frozenset(r.then.on) if r.then else frozenset(),
            efficient=tuple(r.efficient or ()), capable=tuple(r.capable or ()),
            judge=r.judge, mode=r.mode, confidence_threshold=r.confidence_threshold,
            confirmations=r.confirmations)
        if spec.allowed_classes and not any(known.exists("targets", t)
                                                for t in spec.all_targets):
            _check_strict(where, spec, targets, errors)
        out[name] = spec
    return out


def _fallback(r: Route) -> frozenset[str]:
    if r.fallback_on is not None:
        return frozenset(r.fallback_on)
    if r.type == "fastest" or r.pool is not None:
        return frozenset(FAILURE_CLASSES)
    return DEFAULT_FALLBACK


def _check_strict(where: tuple[str, ...], r: RouteSpec, targets: Mapping[str, TargetSpec],
                  errors: list[str]) -> None:
    allowed = set(r.allowed_classes or ())
    mentioned = [t for t in r.all_targets if t in targets]
    unclassed = [t for t in mentioned if targets[t].class_ is None]
    if unclassed:
        errors.append(f"{path(*where, 'allowed_classes')}: the route is strict but targets "
                      f"{unclassed} have no class")
    if mentioned and not any(targets[t].class_ in allowed for t in mentioned):
        errors.append(f"{path(*where, 'allowed_classes')}: no target of the route has an "
                      f"allowed class {sorted(allowed)}")
    for t in r.tail:
        if t in targets and targets[t].class_ is not None and targets[t].class_ not in allowed:
            errors.append(f"{path(*where, 'then', 'targets')}: {t!r} has class "
                          f"{targets[t].class_!r}, not one of allowed_classes {sorted(allowed)}")


def route_known(name: str, routes: Mapping[str, RouteSpec], known: Salvage) -> bool:
    return name in routes or known.exists("routes", name) or known.exists("targets", name)


def route_names(routes: Mapping[str, RouteSpec], known: Salvage) -> set[str]:
    return known.names("routes", routes) | known.names("targets", ())


def check_select(raw: RawConfig, routes: Mapping[str, RouteSpec], errors: list[str],
                  known: Salvage) -> None:
    names: set[str] = set()
    catch_all: int | None = None
    for pos, rule in enumerate(raw.select):
        i = known.rule_index(pos)
        named = f" (rule {rule.name!r})" if rule.name else ""
        if catch_all is not None:
            errors.append(f"{path('select', i)}: follows the catch-all rule "
                          f"{path('select', catch_all)} and could never match{named}")
        if not route_known(rule.route, routes, known):
            errors.append(f"{path('select', i, 'route')}: unknown route {rule.route!r}"
                          + did_you_mean(rule.route, route_names(routes, known), "route")
                          + named)
        if rule.name:
            if rule.name in names:
                errors.append(f"{path('select', i, 'name')}: repeats the rule name "
                              f"{rule.name!r}")
            names.add(rule.name)
        pt = rule.when.prompt_tokens
        where = path("select", i, "when", "prompt_tokens")
        if pt is not None:
            if not pt:
                errors.append(f"{where}: give min, max or both{named}")
            elif "min" in pt and "max" in pt and pt["min"] > pt["max"]:
                errors.append(f"{where}: min {pt['min']} > max {pt['max']}{named}")
        if rule.when.is_empty() and catch_all is None and not known.rule_broken(pos):
            catch_all = i

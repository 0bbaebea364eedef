"""Properties of planning over generated configurations, requests and state."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from humpyard.config import Config
from humpyard.errors import OverrideNoTarget, PlanRefused
from humpyard.planning.explain import explain
from humpyard.planning.plan import plan
from humpyard.planning.types import (
    EndpointHealth,
    LatencyFigure,
    Override,
    Plan,
    RequestFacts,
    StateSnapshot,
)

from .helpers import NOW, cfg

PROVIDERS = ("local", "pub", "pub2", "paid")
CLASSES = ("private", "public", "paid")
SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Case:
    config: Config
    route: str
    facts: RequestFacts
    snapshot: StateSnapshot


def _endpoint(draw: st.DrawFn, target: str, i: int) -> str:
    fields = [f'provider = "{draw(st.sampled_from(PROVIDERS))}"', f'model = "{target}-{i}"']
    tools = draw(st.sampled_from([None, True, False]))
    if tools is not None:
        fields.append(f"tools = {str(tools).lower()}")
    vision = draw(st.sampled_from([None, True, False]))
    if vision is not None:
        fields.append(f"vision = {str(vision).lower()}")
    window = draw(st.sampled_from([None, None, 1000, 50_000]))
    if window is not None:
        fields.append(f"context_window = {window}")
    if draw(st.booleans()):
        fields.append("price = { input = 1.0, output = 1.0 }")
    return "{ " + ", ".join(fields) + " }"


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(1, 6))
    tnames = [f"t{i}" for i in range(n)]
    classes = {t: draw(st.sampled_from([*CLASSES, None])) for t in tnames}
    text = []
    for t in tnames:
        eps = [_endpoint(draw, t, i) for i in range(draw(st.integers(1, 2)))]
        cls = f'class = "{classes[t]}"\n' if classes[t] else ""
        text.append(f"[targets.{t}]\n{cls}strengths = [\"s\"]\nendpoints = [{', '.join(eps)}]\n")
    members = draw(st.lists(st.sampled_from(tnames), min_size=1, max_size=n, unique=True))
    rtype = draw(st.sampled_from(["passthrough", "random", "fastest", "stage_router"]))
    route = f'[routes.r]\ntype = "{rtype}"\n'
    if rtype == "stage_router":
        cut = draw(st.integers(0, len(members) - 1)) if len(members) > 1 else 0
        eff, cap = members[:cut] or members[:1], members[cut:] or members[:1]
        route += f"efficient = {eff!r}\ncapable = {cap!r}\n".replace("'", '"')
    else:
        route += f"targets = {members!r}\n".replace("'", '"')
        if rtype == "random":
            weights = draw(st.lists(st.sampled_from([0, 1, 3]), min_size=len(members),
                                    max_size=len(members)))
            weights[0] = weights[0] or 1
            route += f"weights = {weights}\n"
    route_targets = set(members)
    if all(classes[t] for t in route_targets) and draw(st.booleans()):
        present = sorted({classes[t] for t in route_targets})
        allowed = draw(st.lists(st.sampled_from(present), min_size=1, unique=True))
        route += f"allowed_classes = {allowed!r}\n".replace("'", '"')
    text.append(route)
    text.append('[keys.k]\nkey_sha256 = "' + "0" * 64 + '"\nbudget = { usd = 1.0 }\n')
    skip = draw(st.booleans())
    config = cfg(f"[health]\nskip_cold_targets = {str(skip).lower()}\n" + "".join(text))
    return Case(config, "r", draw(request_facts()), draw(snapshots(config, tnames)))


@st.composite
def request_facts(draw: st.DrawFn) -> RequestFacts:
    low = draw(st.sampled_from([None, 500, 5000, 100_000]))
    return RequestFacts(model="r", key_id=draw(st.sampled_from([None, "k"])),
                        tools=draw(st.booleans()), images=draw(st.booleans()),
                        prompt_tokens=None if low is None else low * 2, prompt_tokens_low=low)


@st.composite
def snapshots(draw: st.DrawFn, config: Config, tnames: list[str]) -> StateSnapshot:
    keys = [e.key for t in config.targets.values() for e in t.endpoints]
    health = {}
    for k in keys:
        kind = draw(st.sampled_from(["none", "cold", "cold", "cold", "probing", "healthy"]))
        if kind == "cold":
            health[k] = EndpointHealth(state="cooling_down", cold=True,
                                       reopens_at=NOW + draw(st.integers(1, 100)))
        elif kind == "probing":
            health[k] = EndpointHealth(state="probing")
        elif kind == "healthy":
            health[k] = EndpointHealth()
    overrides = []
    for i in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["disable_target", "drain_provider", "pin_route"]))
        if kind == "disable_target":
            o = Override(id=str(i), kind=kind, subject=draw(st.sampled_from([*tnames, "gone"])))
        elif kind == "drain_provider":
            o = Override(id=str(i), kind=kind, subject=draw(st.sampled_from(PROVIDERS)))
        else:
            o = Override(id=str(i), kind=kind, subject="r",
                         target=draw(st.sampled_from([*tnames, "gone"])))
        overrides.append(replace(o, stale=draw(st.booleans()) and draw(st.booleans())))
    latency = {t: LatencyFigure(ms=draw(st.integers(10, 10_000)), samples=draw(st.integers(0, 9)),
                                updated_at=NOW - draw(st.integers(0, 1000)))
               for t in tnames if draw(st.booleans())}
    return StateSnapshot(health=health, latency=latency, overrides=tuple(overrides),
                         spend_usd={"k": draw(st.sampled_from([0.0, 5.0]))}, taken_at=NOW)


def attempt(c: Case, snapshot: StateSnapshot | None = None, seed: int = 0
            ) -> Plan | PlanRefused:
    try:
        return plan(c.facts, snapshot or c.snapshot, c.config, NOW, random.Random(seed))
    except PlanRefused as e:
        return e


@given(cases(), st.integers(0, 2**16))
@SETTINGS
def test_planning_never_adds_and_records_every_removal(c: Case, seed: int) -> None:
    out = attempt(c, seed=seed)
    p = out if isinstance(out, Plan) else out.plan  # type: ignore[attr-defined]
    route = c.config.routes[c.route]
    planned = [t.name for t in p.targets]
    assert len(planned) == len(set(planned))
    assert set(planned) <= set(route.all_targets)
    for t in p.targets:
        assert set(t.endpoints) <= set(c.config.targets[t.name].endpoints)
        assert t.endpoints
    gone = [r.target for r in p.removals]
    assert len(gone) == len(set(gone)) and not set(gone) & set(planned)
    if isinstance(out, Plan):
        assert planned and set(planned) | set(gone) == set(route.all_targets)
        for tier in p.tiers.values():
            assert set(tier) <= set(planned)


@given(cases())
@SETTINGS
def test_a_strict_route_never_yields_a_target_outside_its_classes(c: Case) -> None:
    out = attempt(c)
    allowed = c.config.routes[c.route].allowed_classes
    if isinstance(out, Plan) and allowed:
        assert all(t.class_ in allowed for t in out.targets)


@given(cases())
@SETTINGS
def test_health_never_empties_a_plan_or_refuses(c: Case) -> None:
    without = attempt(c, replace(c.snapshot, health={}))
    with_health = attempt(c)
    assert type(without) is type(with_health)
    if isinstance(without, Plan):
        assert isinstance(with_health, Plan) and with_health.targets
        skipped = {r.target for r in with_health.removals if r.step == "health"}
        assert {t.name for t in with_health.targets} | skipped == {
            t.name for t in without.targets}


@given(cases())
@SETTINGS
def test_overrides_that_empty_a_plan_always_refuse(c: Case) -> None:
    # Overrides act before health, so compare with the plan before both.
    before = attempt(c, replace(c.snapshot, overrides=(), health={}))
    after = attempt(c)
    if not isinstance(before, Plan):
        return
    route = c.config.routes[c.route]
    survivors = _survivors(c, [t.name for t in before.targets])
    serving = set(route.targets) | set(route.tail) | set(route.efficient) | set(route.capable)
    if not survivors & serving:
        assert isinstance(after, OverrideNoTarget)
        assert "override" in after.message
    else:
        assert isinstance(after, Plan) and after.targets


def _survivors(c: Case, names: list[str]) -> set[str]:
    """A plain model of the overrides: which of ``names`` they leave."""
    live = [o for o in c.snapshot.overrides if not o.stale]
    left = set(names)
    drained = {o.subject for o in live if o.kind == "drain_provider"}
    for o in live:
        if o.kind == "disable_target":
            left.discard(o.subject)
    left = {t for t in left
            if any(e.provider not in drained for e in c.config.targets[t].endpoints)}
    all_targets = set(c.config.routes[c.route].all_targets)
    pins = {o.target for o in live if o.kind == "pin_route" and o.target in all_targets}
    return left & pins if pins else left


@given(cases())
@SETTINGS
def test_explain_and_plan_choose_the_same_route_and_targets(c: Case) -> None:
    out = attempt(c)
    answer = explain(c.facts, c.snapshot, c.config, NOW)
    if isinstance(out, Plan):
        assert answer["outcome"] == "ok"
        assert answer["selected"]["route"] == out.route
        assert {t["name"] for t in answer["targets"]} == {t.name for t in out.targets}
        if out.route_type in ("passthrough", "stage_router"):
            assert [t["name"] for t in answer["targets"]] == [t.name for t in out.targets]
    else:
        assert answer["outcome"] == out.code and answer["message"] == out.message

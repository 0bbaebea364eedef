import random
from collections import Counter

import pytest

from humpyard.config.spec import RouteSpec, TargetSpec
from humpyard.errors import BudgetExhausted, NoEligibleTarget
from humpyard.planning.policy import AllOf, AllowAll, BudgetPolicy, compose
from humpyard.planning.types import RequestFacts, StateSnapshot

from .helpers import cfg, facts, names, removed, route, run, snap, target

PRICE = "price = { input = 1.0, output = 2.0 }"


class Deny:
    """An embedder policy that refuses the targets it names."""

    def __init__(self, *targets: str, reason: str = "denied"):
        self.targets, self.reason = set(targets), reason
        self.calls: list[str] = []

    def eligible(self, route: RouteSpec, target: TargetSpec, facts: RequestFacts,
                 snapshot: StateSnapshot) -> str | None:
        self.calls.append(target.name)
        return self.reason if target.name in self.targets else None


def strict_config() -> str:
    return (target("priv", cls="private", provider="local") + target("pub", cls="public")
            + target("paid", cls="paid", provider="paid", endpoint=PRICE)
            + route("r", ["priv", "pub", "paid"], allowed_classes=["private"])
            + route("two", ["priv", "pub", "paid"], allowed_classes=["private", "paid"]))


def test_strict_route_removes_other_classes_before_anything_else() -> None:
    c = cfg(strict_config())
    p = run(c, facts("r"))
    assert names(p) == ["priv"]
    assert removed(p, "classes") == {"pub": "class_not_allowed", "paid": "class_not_allowed"}
    assert names(run(c, facts("two"))) == ["priv", "paid"]


def test_strict_route_stays_strict_when_its_target_is_cold_or_disabled_by_policy() -> None:
    c = cfg(strict_config())
    p = run(c, facts("r"), snap(cold={"local/priv": 5.0}))
    assert names(p) == ["priv"] and p.health_fail_open
    with pytest.raises(NoEligibleTarget) as e:
        run(c, facts("r"), policy=Deny("priv"))
    assert "'r'" in e.value.message
    assert removed(e.value.plan) == {  # type: ignore[attr-defined]
        "pub": "class_not_allowed", "paid": "class_not_allowed", "priv": "denied"}


def test_policy_sees_only_targets_left_by_classes() -> None:
    deny = Deny()
    run(cfg(strict_config()), facts("r"), policy=deny)
    assert deny.calls == ["priv"]


def test_embedder_policy_removes_and_nothing_left_is_503_naming_route() -> None:
    c = cfg(target("a") + target("b") + route("r", ["a", "b"]))
    p = run(c, facts(), policy=Deny("a", reason="quiet_hours"))
    assert names(p) == ["b"]
    assert [(r.target, r.step, r.reason) for r in p.removals] == [("a", "policy", "quiet_hours")]
    with pytest.raises(NoEligibleTarget) as e:
        run(c, facts(), policy=Deny("a", "b"))
    assert e.value.status == 503 and "'r'" in e.value.message


def budget_config() -> str:
    return (target("free") + target("paid", provider="paid", endpoint=PRICE)
            + target("paid2", provider="paid", model="p2", endpoint=PRICE)
            + route("mixed", ["paid", "free"]) + route("paid-only", ["paid", "paid2"])
            + '[keys.ci]\nkey_sha256 = "' + "0" * 64 + '"\nbudget = { usd = 10.0 }\n'
            + '[keys.free]\nkey_sha256 = "' + "1" * 64 + '"\n')


def test_budget_exhausted_degrades_to_free_targets() -> None:
    c = cfg(budget_config())
    assert names(run(c, facts("mixed", key_id="ci"), snap(spend={"ci": 9.99}))) == ["paid", "free"]
    p = run(c, facts("mixed", key_id="ci"), snap(spend={"ci": 10.0}))
    assert names(p) == ["free"]
    assert [(r.target, r.step, r.reason) for r in p.removals] == [
        ("paid", "budget", "budget_exhausted")]


def test_budget_exhausted_with_nothing_free_is_429() -> None:
    c = cfg(budget_config())
    with pytest.raises(BudgetExhausted) as e:
        run(c, facts("paid-only", key_id="ci"), snap(spend={"ci": 12.5}))
    assert e.value.status == 429 and e.value.code == "budget_exhausted"
    assert "12.50" in e.value.message and "10.00" in e.value.message
    assert set(removed(e.value.plan, "budget")) == {"paid", "paid2"}  # type: ignore[attr-defined]


def test_budget_is_what_emptied_it_even_when_the_embedder_removed_some() -> None:
    c = cfg(budget_config())
    with pytest.raises(BudgetExhausted):
        run(c, facts("mixed", key_id="ci"), snap(spend={"ci": 50}), policy=Deny("free"))
    with pytest.raises(NoEligibleTarget):  # the embedder alone emptied it
        run(c, facts("mixed", key_id="ci"), snap(spend={"ci": 50}), policy=Deny("free", "paid"))


def test_keys_without_budget_and_open_gateway_are_never_limited() -> None:
    c = cfg(budget_config())
    assert names(run(c, facts("paid-only", key_id="free"), snap(spend={"free": 1e9}))) == [
        "paid", "paid2"]
    assert names(run(c, facts("paid-only"), snap(spend={"ci": 1e9}))) == ["paid", "paid2"]


def test_budget_policy_as_a_routing_policy_and_composition() -> None:
    c = cfg(budget_config())
    b = BudgetPolicy(c)
    r, paid, free = c.routes["mixed"], c.targets["paid"], c.targets["free"]
    f, spent = facts("mixed", key_id="ci"), snap(spend={"ci": 10})
    assert b.eligible(r, paid, f, spent) == "budget_exhausted"
    assert b.eligible(r, free, f, spent) is None
    assert b.eligible(r, paid, f, snap(spend={"ci": 1})) is None
    both = compose(b, Deny("free"))
    assert isinstance(both, AllOf)
    assert both.eligible(r, paid, f, spent) == "budget_exhausted"
    assert both.eligible(r, free, f, spent) == "denied"
    assert isinstance(compose(None, AllowAll()), AllowAll)
    assert AllowAll().eligible(r, paid, f, spent) is None


def tiered_config(extra: str = "") -> str:
    return (target("e1") + target("e2", provider="pub2") + target("c1", provider="paid")
            + target("j", provider="local")
            + "[routes.sr]\ntype = \"stage_router\"\nefficient = [\"e1\", \"e2\"]\n"
              "capable = [\"c1\"]\n"
            + "[routes.lc]\ntype = \"llm_classifier\"\nefficient = [\"e1\"]\n"
              "capable = [\"c1\"]\njudge = \"j\"\n" + extra)


def test_tiers_are_reported_for_tiered_routes() -> None:
    p = run(cfg(tiered_config()), facts("sr"))
    assert dict(p.tiers) == {"efficient": ("e1", "e2"), "capable": ("c1",)}
    assert names(p) == ["e1", "e2", "c1"]
    p = run(cfg(tiered_config()), facts("lc"))
    assert dict(p.tiers) == {"efficient": ("e1",), "capable": ("c1",), "judge": ("j",)}


def test_capable_removed_is_served_by_efficient_and_the_reverse() -> None:
    c = cfg(tiered_config())
    p = run(c, facts("sr"), policy=Deny("c1"))
    assert dict(p.tiers) == {"efficient": ("e1", "e2"), "capable": ("e1", "e2")}
    p = run(c, facts("sr"), policy=Deny("e1", "e2"))
    assert dict(p.tiers) == {"efficient": ("c1",), "capable": ("c1",)}


def test_missing_judge_falls_back_to_a_remaining_tier() -> None:
    p = run(cfg(tiered_config()), facts("lc"), policy=Deny("j"))
    assert p.tiers["judge"] == ("e1",)
    p = run(cfg(tiered_config()), facts("lc"), policy=Deny("j", "e1"))
    assert p.tiers["judge"] == ("c1",) and p.tiers["efficient"] == ("c1",)


def test_a_judge_alone_cannot_serve() -> None:
    with pytest.raises(NoEligibleTarget):
        run(cfg(tiered_config()), facts("lc"), policy=Deny("e1", "c1"))


def random_config() -> str:
    return (target("a") + target("b") + target("c") + target("z")
            + route("rnd", ["a", "b", "c", "z"], type="random", weights=[1, 1, 2, 0]))


def firsts(c, n: int = 4000, **kw) -> Counter:  # type: ignore[no-untyped-def]
    rng = random.Random(42)
    return Counter(run(c, facts("rnd"), rng=rng, **kw).targets[0].name for _ in range(n))


def test_random_pick_first_then_written_order_zero_weight_never_first() -> None:
    c = cfg(random_config())
    counts = firsts(c)
    assert counts["z"] == 0
    assert 0.45 < counts["c"] / 4000 < 0.55
    assert 0.2 < counts["a"] / 4000 < 0.3
    p = run(c, facts("rnd"), rng=random.Random(3))
    rest = [t for t in ["a", "b", "c", "z"] if t != p.targets[0].name]
    assert names(p)[1:] == rest


def test_random_weights_realign_to_the_remaining_targets() -> None:
    c = cfg(random_config())
    counts = firsts(c, policy=Deny("c"))
    assert counts["c"] == 0 and counts["z"] == 0
    assert 0.45 < counts["a"] / 4000 < 0.55
    counts = firsts(c, policy=Deny("a", "b", "c"))
    assert counts == Counter({"z": 4000})  # nothing pickable: written order


def test_random_seed_makes_draws_reproducible_across_requests() -> None:
    c = cfg(target("a") + target("b") + target("c")
            + route("rnd", ["a", "b", "c"], type="random", seed=7))
    def draw() -> list[str]:
        kept: dict[str, random.Random] = {}
        return [run(c, facts("rnd"), rng=random.Random(), route_rngs=kept).targets[0].name
                for _ in range(30)]
    first = draw()
    assert first == draw()
    assert len(set(first)) > 1

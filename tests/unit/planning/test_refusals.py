"""Every refusal names what really removed the targets (budget, override, class,
capability, policy), in planning order; explain gives the same outcome and message."""

from __future__ import annotations

import pytest

from humpyard.errors import BudgetExhausted, NoCapableTarget, NoEligibleTarget, OverrideNoTarget
from humpyard.planning.explain import explain
from humpyard.planning.types import Override

from .helpers import NOW, cfg, facts, route, run, snap, target

PRICE = "price = { input = 1.0, output = 2.0 }"
KEY = '[keys.ci]\nkey_sha256 = "' + "0" * 64 + '"\nbudget = { usd = 10.0 }\n'
SPENT = snap(spend={"ci": 12.5})
BUDGET = ("the budget removed 'paid' (key 'ci' has spent $12.50 of $10.00 this day; "
          "the budget resets at 2027-01-16T00:00:00Z)")


def disable(id: str, subject: str) -> Override:
    return Override(id=id, kind="disable_target", subject=subject, expires_at=NOW + 60)


def config(*extra_targets: str, **route_fields: object) -> str:
    names = ["paid", "free", *[t.split("]")[0].split(".")[1] for t in extra_targets]]
    return (target("paid", cls="paid", provider="paid", endpoint=PRICE)
            + target("free", cls="public", endpoint="tools = false")
            + "".join(extra_targets) + route("r", names, **route_fields) + KEY)


def test_budget_then_overrides_names_both_not_only_the_overrides() -> None:
    """The issue's case: the budget removed the priced target, overrides the free ones."""
    c = cfg(config(target("free2", cls="public", model="f2")))
    s = snap(spend={"ci": 12.5}, overrides=(disable("1", "free"), disable("2", "free2")))
    with pytest.raises(OverrideNoTarget) as e:
        run(c, facts(key_id="ci"), s)
    assert e.value.message == (
        "route 'r' has no target left: " + BUDGET + "; runtime override 1 (disable_target "
        "free) removed 'free'; runtime override 2 (disable_target free2) removed 'free2'")
    out = explain(facts(key_id="ci"), s, c, NOW)
    assert (out["outcome"], out["message"]) == (e.value.code, e.value.message)


def test_classes_then_budget() -> None:
    c = cfg(config(allowed_classes=["paid"]))
    with pytest.raises(BudgetExhausted) as e:
        run(c, facts(key_id="ci"), SPENT)
    assert e.value.message == ("route 'r' has no target left: allowed_classes [paid] "
                               "removed 'free'; " + BUDGET)


def test_budget_then_capability() -> None:
    c = cfg(config())
    with pytest.raises(NoCapableTarget) as e:
        run(c, facts(key_id="ci", tools=True), SPENT)
    assert e.value.message == (
        "no target of route 'r' can serve this request: " + BUDGET + "; capabilities "
        "removed 'free' (the request uses tools but its endpoints declare tools = false)")


class DenyFree:
    def eligible(self, route, target, facts, snapshot):  # noqa: ANN001, ANN201
        return "quiet_hours" if target.name == "free" else None


def test_policy_and_budget_together_are_a_budget_refusal_naming_both() -> None:
    c = cfg(config())
    with pytest.raises(BudgetExhausted) as e:
        run(c, facts(key_id="ci"), SPENT, policy=DenyFree())
    assert e.value.message == ("route 'r' has no target left: the routing policy removed "
                               "'free' (quiet_hours); " + BUDGET)


class DenyAll:
    def eligible(self, route, target, facts, snapshot):  # noqa: ANN001, ANN201
        return "off"


def test_classes_then_policy() -> None:
    c = cfg(target("paid", cls="paid", provider="paid") + target("free", cls="public")
            + target("local", cls="private", provider="local")
            + route("r", ["paid", "free", "local"], allowed_classes=["private"]))
    with pytest.raises(NoEligibleTarget) as e:
        run(c, facts(), policy=DenyAll())
    assert e.value.message == ("route 'r' has no target left: allowed_classes [private] "
                               "removed 'paid', 'free'; the routing policy removed 'local' "
                               "(off)")


def test_override_removals_carry_id_kind_and_subject() -> None:
    c = cfg(config(target("free2", cls="public", model="f2")))
    drain = Override(id="7", kind="drain_provider", subject="paid", expires_at=NOW + 60)
    p = run(c, facts(), snap(overrides=(drain, disable("8", "free"))))
    assert [t.name for t in p.targets] == ["free2"]
    assert [(r.target, r.override_id, r.override_kind, r.override_subject)
            for r in p.removed("override")] == [
        ("paid", "7", "drain_provider", "paid"), ("free", "8", "disable_target", "free")]
    pin = Override(id="9", kind="pin_route", subject="r", target="free", expires_at=NOW + 60)
    p = run(c, facts(), snap(overrides=(pin,)))
    assert [(r.target, r.override_id, r.override_kind, r.override_subject)
            for r in p.removed("override")] == [
        ("paid", "9", "pin_route", "r"), ("free2", "9", "pin_route", "r")]
    out = explain(facts(), snap(overrides=(pin,)), c, NOW)
    assert out["overridden_targets"][0] == {"target": "paid", "reason": "pin_route",
                                            "override_id": "9", "kind": "pin_route",
                                            "subject": "r"}

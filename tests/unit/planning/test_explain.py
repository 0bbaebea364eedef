import json

import pytest

from humpyard.planning.explain import explain
from humpyard.planning.types import EndpointHealth, LatencyFigure, Override, StateSnapshot

from .helpers import NOW, cfg, facts, route, snap, target

PRICE = "price = { input = 1.0, output = 2.0 }"
KEY = "0" * 64


def config() -> str:
    return (target("priv", cls="private", provider="local", endpoint="tools = false")
            + target("pub", cls="public", quality=0.7)
            + target("paid", cls="paid", provider="paid", endpoint=PRICE)
            + target("g1", cls="public", provider="pub2", strengths=("general",),
                     endpoint="context_window = 8000")
            + target("g2", cls="public", model="g2", strengths=("general",),
                     endpoint="context_window = 32000")
            + route("mixed", ["priv", "pub", "paid"])
            + route("strict", ["priv", "pub"], allowed_classes=["private"])
            + route("paid-only", ["paid"]) + route("only-priv", ["priv"])
            + "[routes.pool]\ntype = \"fastest\"\n"
              "pool = { strength = \"general\", min_context_window = 4000 }\n"
              "then = { targets = [\"paid\"], on = [\"overflow\", \"rate_limit\"] }\n"
            + '[[select]]\nname = "deep"\nwhen = { profile = "deep" }\nroute = "paid-only"\n'
            + '[[select]]\nwhen = { tools = true, model = "mixed" }\nroute = "strict"\n'
            + f'[keys.k]\nkey_sha256 = "{KEY}"\nbudget = {{ usd = 5.0, period = "month" }}\n'
            + f'[keys.narrow]\nkey_sha256 = "{"1" * 64}"\nallowed_routes = ["mixed"]\n')


def ex(model: str, s: StateSnapshot | None = None, **kw: object) -> dict:
    out = explain(facts(model, **kw), s or StateSnapshot(), cfg(config()), NOW)  # type: ignore
    json.dumps(out)  # JSON-ready
    return out


def test_ok_answer_shape() -> None:
    out = ex("mixed", key_id="k")
    assert out["outcome"] == "ok" and "message" not in out
    assert out["selected"] == {"route": "mixed", "rule": "default", "source": "requested_model"}
    assert [t["name"] for t in out["targets"]] == ["priv", "pub", "paid"]
    assert out["budget"] == {"usd": 5.0, "spent_usd": 0.0, "period": "month",
                             "exhausted": False, "reserved_usd": 0.0, "left_usd": 5.0}
    r = out["route"]
    assert r["type"] == "passthrough" and r["allowed_classes"] is None
    assert r["classes"] == ["private", "public", "paid"]
    assert r["fallback_can_cross_classes"] is True
    assert "unavailable" not in r["fallback_on"]
    t = out["targets"][1]
    assert t["class"] == "public" and t["quality"] == 0.7 and t["cold"] is False
    assert t["endpoints"][0]["provider"] == "pub" and t["endpoints"][0]["state"] == "healthy"
    for key in ("excluded_targets", "ineligible_targets", "incapable_targets",
                "overridden_targets", "health_skipped_targets"):
        assert out[key] == []
    assert out["health_fail_open"] is False


def test_rules_are_all_listed_with_mismatches() -> None:
    out = ex("mixed", headers={"x-humpyard-profile": "light"})
    assert [r["label"] for r in out["rules"]] == ["deep", "select[1]"]
    assert out["rules"][0]["name"] == "deep" and out["rules"][1]["name"] is None
    assert out["rules"][0]["mismatches"] == ["profile: 'deep' != header 'light'"]
    assert out["rules"][1]["mismatches"] == ["tools: true != false"]
    assert out["rules"][0]["matched"] is False


def test_strict_route_reports_excluded_and_cannot_cross() -> None:
    out = ex("strict")
    assert out["route"]["allowed_classes"] == ["private"]
    assert out["route"]["fallback_can_cross_classes"] is False
    assert out["excluded_targets"] == [{"target": "pub", "reason": "class_not_allowed"}]


def test_selected_by_rule_and_key_may_use_route() -> None:
    out = ex("mixed", key_id="narrow", tools=True)
    assert out["selected"]["source"] == "requested_model"
    assert out["rules"][1]["matched"] is True and out["rules"][1]["key_may_use_route"] is False
    out = ex("mixed", tools=True)
    assert out["selected"] == {"route": "strict", "rule": "select[1]", "source": "selector"}


@pytest.mark.parametrize("model,kw,state,outcome", [
    ("nope", {}, None, "unknown_model"),
    ("paid-only", {"key_id": "narrow"}, None, "forbidden"),
    ("paid-only", {"key_id": "k"}, snap(spend={"k": 5.0}), "budget_exhausted"),
    ("only-priv", {"tools": True}, None, "no_capable_target"),
    ("only-priv", {}, snap(overrides=(Override(id="3", kind="disable_target",
                                               subject="priv"),)), "override_no_target"),
])
def test_refusals_are_reported_not_raised(model: str, kw: dict, state: StateSnapshot | None,
                                          outcome: str) -> None:
    out = ex(model, state, **kw)
    assert out["outcome"] == outcome and out["message"]
    assert out["targets"] == []
    if outcome == "unknown_model":
        assert out["route"] is None and out["selected"]["route"] == "nope"


def test_no_eligible_target_outcome() -> None:
    class DenyAll:
        def eligible(self, route, target, facts, snapshot):  # type: ignore[no-untyped-def]
            return "nope"
    out = explain(facts("mixed"), StateSnapshot(), cfg(config()), NOW, policy=DenyAll())
    assert out["outcome"] == "no_eligible_target"
    assert {e["target"] for e in out["ineligible_targets"]} == {"priv", "pub", "paid"}


def test_budget_degrades_and_is_listed() -> None:
    out = ex("mixed", snap(spend={"k": 6.0}), key_id="k")
    assert out["budget"]["exhausted"] is True
    assert out["ineligible_targets"] == [{"target": "paid", "reason": "budget_exhausted",
                                          "step": "budget"}]
    assert [t["name"] for t in out["targets"]] == ["priv", "pub"]


def test_stated_prompt_tokens_is_used_for_capability() -> None:
    out = ex("pool", prompt_tokens=9000)
    assert out["incapable_targets"] == [{"target": "g1", "reason": "context_window_exceeded"}]
    assert out["prompt_tokens"] == 9000


def test_overrides_health_pool_and_tail() -> None:
    s = StateSnapshot(
        health={"pub2/g1": EndpointHealth(state="cooling_down", cold=True, reopens_at=NOW + 5,
                                          consecutive_failures=3, cooldown_remaining_ms=5000,
                                          cooldown_source="failures")},
        latency={"g2": LatencyFigure(ms=1000, samples=4, updated_at=NOW)},
        overrides=(Override(id="8", kind="drain_provider", subject="nowhere"),))
    out = explain(facts("pool"), s, cfg(config()), NOW,
                  recent={"g2": {"attempts": 3, "failure_rate": 0.0, "p50_latency_ms": 900}},
                  health_views={"pub/g2": {"readiness": "ready"}})
    assert out["health_skipped_targets"] == [{"target": "g1", "reason": "cold"}]
    assert out["route"]["pool"]["members"] == ["g1", "g2"]
    assert out["route"]["pool"]["strength"] == "general"
    assert out["route"]["tail"] == {"targets": ["paid"], "on": ["overflow", "rate_limit"]}
    g2, paid = out["targets"]
    assert g2["recent"] == {"attempts": 3, "failure_rate": 0.0, "p50_latency_ms": 900}
    assert g2["endpoints"][0]["readiness"] == "ready"
    assert g2["current_latency_ms"] == 1000 and g2["latency_samples"] == 4
    assert g2["speed_score"] == 1.0 and g2["score"] == 1.0
    assert paid["tail"] is True and paid["recent"] is None
    assert out["ranking"] == [["g2", "fastest"]]


def test_pool_left_out_and_overridden() -> None:
    c = cfg(config() + target("g3", cls="public", provider="local", model="g3",
                              strengths=("general",), endpoint="context_window = 1000"))
    s = StateSnapshot(overrides=(Override(id="5", kind="disable_target", subject="g2"),))
    out = explain(facts("pool"), s, c, NOW)
    assert out["route"]["pool"]["left_out"] == [{"target": "g3",
                                                  "reason": "context_window_below"}]
    assert out["overridden_targets"] == [{"target": "g2", "reason": "disable_target",
                                          "override_id": "5", "kind": "disable_target",
                                          "subject": "g2"}]


def test_cold_targets_and_fail_open_are_shown() -> None:
    s = snap(cold={"local/priv": NOW + 5})
    out = ex("only-priv", s)
    assert out["health_fail_open"] is True
    t = out["targets"][0]
    assert t["cold"] is True and t["endpoints"][0]["cold"] is True

"""Selector rules with keys, explain without upstream calls, budgets — over HTTP.

The selector tests load the shipped examples/auto-routing.toml itself, with
its provider URLs pointed at local fake upstreams.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.steps import ok

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "auto-routing.toml"
ENV = {"HARNESS_KEY": "harness-secret", "CI_KEY": "ci-secret", "PUBLIC_API_KEY": "pk",
       "PAID_API_KEY": "pd"}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.fixture
def auto():
    with FakeUpstream() as local, FakeUpstream() as public, FakeUpstream() as paid:
        text = EXAMPLE.read_text()
        for port, up in (("8000", local), ("8001", public), ("8002", paid)):
            text = text.replace(f"http://127.0.0.1:{port}/v1", up.url)
        with running_gateway(text, env=ENV, admin_key="harness-secret") as gw:
            yield gw, {"local": local, "public": public, "paid": paid}


def send(gw, key: str, body: dict, **headers: str) -> httpx.Response:
    with gw.client(authorization=f"Bearer {key}", **headers) as c:
        return c.post("/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hi"}], **body})


def explain(gw, key: str, body: dict) -> dict:
    with gw.client(authorization=f"Bearer {key}") as c:
        r = c.post("/v1/route/explain", json=body)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]


def test_rules_choose_the_route_and_name_the_rule(auto):
    gw, ups = auto
    r = send(gw, "harness-secret", {"model": "auto", "tools": TOOLS})
    assert (r.headers["x-humpyard-rule"], r.headers["x-humpyard-route"]) == ("tool-turns",
                                                                              "capable")
    assert r.headers["x-humpyard-target"] == "paid-deep"
    r = send(gw, "harness-secret", {"model": "auto"}, **{"x-humpyard-profile": "private"})
    assert r.headers["x-humpyard-route"] == "private-pool"
    assert ups["local"].requests[-1].json["model"] == "qwen3-coder"
    r = send(gw, "harness-secret", {"model": "auto", "tools": TOOLS},
             **{"x-humpyard-subagent": "true"})
    assert r.headers["x-humpyard-rule"] == "subagent"
    # a direct request for a pool bypasses the rules
    r = send(gw, "harness-secret", {"model": "capable"}, **{"x-humpyard-profile": "private"})
    assert (r.headers["x-humpyard-rule"], r.headers["x-humpyard-route"]) == ("default",
                                                                              "capable")


def test_key_limited_to_auto_is_never_sent_to_a_pool(auto):
    gw, _ = auto
    r = send(gw, "ci-secret", {"model": "auto", "tools": TOOLS})
    assert r.status_code == 200
    assert (r.headers["x-humpyard-rule"], r.headers["x-humpyard-route"]) == ("default", "auto")
    with gw.client(authorization="Bearer ci-secret") as c:  # a key reads its own decisions
        d = c.get("/v1/decisions", params={"limit": 1}).json()["decisions"][0]
    assert [s["rule"] for s in d["skipped_rules"]] == ["tool-turns", "everyday"]
    assert send(gw, "ci-secret", {"model": "capable"}).status_code == 403


def test_explain_matches_real_requests_and_calls_nothing(auto):
    gw, ups = auto
    before = {k: len(u.requests) for k, u in ups.items()}
    e = explain(gw, "harness-secret", {"model": "auto", "tools": True, "subagent": True})
    assert e["selected"]["route"] == "cheap" and e["selected"]["rule"] == "subagent"
    assert e["outcome"] == "ok"
    assert {k: len(u.requests) for k, u in ups.items()} == before
    e = explain(gw, "harness-secret", {"model": "auto", "tools": True})
    real = send(gw, "harness-secret", {"model": "auto", "tools": TOOLS})
    assert e["selected"]["route"] == real.headers["x-humpyard-route"]
    assert e["targets"][0]["name"] == real.headers["x-humpyard-target"]
    # explain answers for the calling key only
    e = explain(gw, "ci-secret", {"model": "capable"})
    assert e["outcome"] == "forbidden"
    e = explain(gw, "ci-secret", {"model": "auto", "tools": True})
    assert e["selected"]["route"] == "auto"
    assert any(not r["key_may_use_route"] for r in e["rules"] if r["matched"])


def test_explain_prompt_tokens_reaches_long_context(auto):
    gw, _ = auto
    e = explain(gw, "harness-secret", {"model": "auto", "prompt_tokens": 40000})
    assert e["selected"]["rule"] == "long-prompt"
    e = explain(gw, "harness-secret", {"model": "auto"})
    assert e["selected"]["rule"] == "everyday"


def test_explain_needs_a_key_when_keys_exist(auto):
    gw, _ = auto
    with gw.client() as c:
        assert c.post("/v1/route/explain", json={"model": "auto"}).status_code == 401


def budget_cfg(free: str, paid: str, only_paid: bool = False) -> str:
    targets = '["paid"]' if only_paid else '["paid", "free"]'
    return f"""
[providers.free]
base_url = "{free}"
[providers.paid]
base_url = "{paid}"
[targets.free]
endpoints = [{{ provider = "free", model = "f" }}]
[targets.paid]
# max_output_tokens bounds the budget reservation (docs/routing.md, "Budgets"): the
# first request's worst case fits in $0.05, its real usage (30 prompt tokens) does not
endpoints = [{{ provider = "paid", model = "p", max_output_tokens = 20,
               price = {{ input = 1000.0, output = 1000.0 }} }}]
[routes.r]
targets = {targets}
[keys.dev]
key_env = "DEV"
budget = {{ usd = 0.05, period = "day" }}
[keys.admin]
key_env = "ADMIN"
admin = true
"""


def test_budget_exhausts_then_degrades_to_free_then_refuses():
    with FakeUpstream() as free, FakeUpstream() as paid:
        # each answer costs (20 + 20) tokens * $1000 / 1M = $0.04
        paid.default = ok("answer", usage={"prompt_tokens": 20, "completion_tokens": 20})
        env = {"DEV": "dev-secret", "ADMIN": "admin-secret"}
        with running_gateway(budget_cfg(free.url, paid.url), env=env,
                             admin_key="admin-secret") as gw:
            assert send(gw, "dev-secret", {"model": "r"}).headers["x-humpyard-target"] == "paid"
            # $0.04 spent of $0.05: the next request's worst case (its prompt and 20 output
            # tokens, about $0.03) does not fit the $0.01 left, so the free target serves
            r = send(gw, "dev-secret", {"model": "r"})
            assert r.headers["x-humpyard-target"] == "free"
            e = explain(gw, "dev-secret", {"model": "r"})
            assert e["budget"]["exhausted"] is False
            assert e["budget"]["left_usd"] == pytest.approx(0.01)
            assert e["ineligible_targets"] == [{"target": "paid", "reason": "budget_exhausted",
                                                "step": "budget"}]
            # another key is unaffected
            r = send(gw, "admin-secret", {"model": "r"})
            assert r.headers["x-humpyard-target"] == "paid"
            d = gw.decisions()
            assert sum(x["cost_usd"] for x in d if x["key_id"] == "dev") == pytest.approx(0.04)
        with running_gateway(budget_cfg(free.url, paid.url, only_paid=True), env=env,
                             admin_key="admin-secret") as gw:
            assert send(gw, "dev-secret", {"model": "r"}).status_code == 200
            r = send(gw, "dev-secret", {"model": "r"})
            assert r.status_code == 429
            assert r.json()["error"]["code"] == "budget_exhausted"
            assert 0 < int(r.headers["retry-after"]) <= 86400  # when the day's budget resets

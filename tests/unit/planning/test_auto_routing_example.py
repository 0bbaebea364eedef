"""The shipped examples/auto-routing.toml, checked against seed 002's recipe table."""

from pathlib import Path

import pytest

from humpyard.config import Config, load_config
from humpyard.errors import NoCapableTarget
from humpyard.planning.explain import explain
from humpyard.planning.types import RequestFacts, StateSnapshot

from .helpers import NOW, names, run

EXAMPLE = Path(__file__).parents[3] / "examples" / "auto-routing.toml"
ENV = {"HARNESS_KEY": "h-secret", "CI_KEY": "c-secret", "PUBLIC_API_KEY": "p",
       "PAID_API_KEY": "q"}
POOLS = ("private-pool", "vision", "long-context", "cheap", "capable")


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config(EXAMPLE, env=ENV)


def auto(key: str = "harness", **kw: object) -> RequestFacts:
    return RequestFacts(model="auto", key_id=key, **kw)  # type: ignore[arg-type]


PRIVATE = {"x-humpyard-profile": "private"}


@pytest.mark.parametrize("kw,rule,route_", [
    ({"headers": PRIVATE}, "private-profile", "private-pool"),
    ({"headers": {"x-humpyard-tag-privacy": "private"}}, "private-tag", "private-pool"),
    ({"images": True}, "images", "vision"),
    ({"prompt_tokens": 30000, "prompt_tokens_low": 15000}, "long-prompt", "long-context"),
    ({"subagent": True}, "subagent", "cheap"),
    ({"tools": True}, "tool-turns", "capable"),
    ({}, "everyday", "cheap"),
    ({"prompt_tokens": 29999}, "everyday", "cheap"),
])
def test_the_recipe_table(config: Config, kw: dict, rule: str, route_: str) -> None:
    p = run(config, auto(**kw))
    assert (p.route, p.rule, p.rule_source) == (route_, rule, "selector")


def test_every_rule_is_scoped_to_auto(config: Config) -> None:
    assert all(r.when.model == "auto" for r in config.select)
    assert [r.name for r in config.select] == [
        "private-profile", "private-tag", "images", "long-prompt", "subagent", "tool-turns",
        "everyday"]


def test_a_direct_request_for_a_pool_bypasses_the_rules(config: Config) -> None:
    for pool in POOLS:
        f = RequestFacts(model=pool, key_id="harness", headers=PRIVATE, tools=True,
                         subagent=True, prompt_tokens=40_000)
        p = run(config, f)
        assert (p.route, p.rule, p.rule_source) == (pool, "default", "requested_model")
        assert p.rules == ()  # no rule even matched: every rule is scoped to "auto"


def test_privacy_first_even_with_images_tools_and_a_huge_prompt(config: Config) -> None:
    f = auto(headers=PRIVATE, images=True, tools=True, prompt_tokens=200_000,
             prompt_tokens_low=100_000)
    with pytest.raises(NoCapableTarget) as e:  # never a silent trip to a public provider
        run(config, f)
    assert e.value.plan.route == "private-pool"  # type: ignore[attr-defined]
    p = run(config, auto(headers=PRIVATE, tools=True))
    assert p.route == "private-pool" and names(p) == ["local-coder"]


def test_subagent_with_tools_stays_cheap(config: Config) -> None:
    p = run(config, auto(tools=True, subagent=True))
    assert (p.route, p.rule) == ("cheap", "subagent")


def test_a_key_limited_to_auto_is_never_sent_to_a_pool(config: Config) -> None:
    for kw in ({"headers": PRIVATE}, {"images": True}, {"tools": True}, {"subagent": True},
               {"prompt_tokens": 50_000}, {}):
        p = run(config, auto(key="ci", **kw))
        assert (p.route, p.rule, p.rule_source) == ("auto", "default", "requested_model")
        assert p.rules and all(not c.key_may_use_route for c in p.rules)


def test_auto_is_safe_for_anything(config: Config) -> None:
    f = auto(key="ci", images=True, tools=True, prompt_tokens=400_000,
             prompt_tokens_low=200_000)
    assert names(run(config, f)) == ["paid-deep"]


def test_the_private_pool_is_strict_and_has_no_public_fallback(config: Config) -> None:
    r = config.routes["private-pool"]
    assert r.targets == ("local-coder",) and r.allowed_classes == ("private",)
    assert config.targets["local-coder"].class_ == "private"


def test_targets_carry_classes(config: Config) -> None:
    assert {t.class_ for t in config.targets.values()} == {"private", "public", "paid"}
    assert all(p.base_url.startswith("http://127.0.0.1:") for p in config.providers.values())


def test_keys_come_from_the_environment(config: Config) -> None:
    assert config.public_view()["keys"]["harness"]["key_env"] == "HARNESS_KEY"
    assert config.public_view()["keys"]["ci"]["key_env"] == "CI_KEY"
    assert config.keys["ci"].allowed_routes == frozenset({"auto"})
    assert set(POOLS) <= (config.keys["harness"].allowed_routes or set())


def test_explain_answers_the_ordering_question(config: Config) -> None:
    out = explain(auto(tools=True, subagent=True), StateSnapshot(), config, NOW)
    assert out["selected"] == {"route": "cheap", "rule": "subagent", "source": "selector"}
    assert out["outcome"] == "ok"
    assert [r["matched"] for r in out["rules"]] == [False, False, False, False, True, True, True]

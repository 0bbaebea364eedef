import pytest

from humpyard.errors import NoCapableTarget

from .helpers import cfg, facts, names, removed, route, run, snap, target


def config() -> str:
    return (target("notools", endpoint="tools = false")
            + target("novision", provider="pub2", endpoint="vision = false")
            + target("small", provider="local", endpoint="context_window = 8000")
            + target("unknown", provider="paid")
            + "[targets.mixed]\nendpoints = [{ provider = \"pub\", model = \"m1\", tools = false },"
              " { provider = \"pub2\", model = \"m2\", context_window = 4000 }]\n"
            + route("r", ["notools", "novision", "small", "unknown", "mixed"])
            + route("only-notools", ["notools"]) + route("only-novision", ["novision"])
            + route("only-small", ["small"]) + route("limited", ["notools", "small"]))


def test_declaring_nothing_changes_nothing() -> None:
    c = cfg(config())
    p = run(c, facts(tools=True, images=True, prompt_tokens=10**7, prompt_tokens_low=10**6))
    assert "unknown" in names(p)
    assert names(run(c, facts())) == ["notools", "novision", "small", "unknown", "mixed"]


def test_tools_unsupported() -> None:
    p = run(cfg(config()), facts(tools=True))
    assert removed(p, "capability") == {"notools": "tools_unsupported"}
    assert "mixed" in names(p)  # its second endpoint may take tools


def test_vision_unsupported() -> None:
    p = run(cfg(config()), facts(images=True))
    assert removed(p, "capability") == {"novision": "vision_unsupported"}


def test_window_uses_the_low_estimate_and_only_declared_windows() -> None:
    c = cfg(config())
    p = run(c, facts(prompt_tokens=20000, prompt_tokens_low=8000))
    assert removed(p, "capability") == {}  # 8000 fits exactly
    p = run(c, facts(prompt_tokens=20000, prompt_tokens_low=8001))
    assert removed(p, "capability") == {"small": "context_window_exceeded"}
    p = run(c, facts(prompt_tokens=20000))  # no low estimate: nothing is certain
    assert removed(p, "capability") == {}


def test_a_target_stays_if_any_endpoint_can_serve() -> None:
    c = cfg(config())
    p = run(c, facts(tools=True, prompt_tokens_low=3000))
    assert removed(p, "capability") == {"notools": "tools_unsupported"}
    p = run(c, facts(tools=True, prompt_tokens_low=9000))
    # mixed: endpoint 1 refuses tools, endpoint 2 is too small: no endpoint can serve.
    assert removed(p, "capability") == {"notools": "tools_unsupported",
                                        "small": "context_window_exceeded",
                                        "mixed": "tools_unsupported"}
    assert names(p) == ["novision", "unknown"]


@pytest.mark.parametrize("model,kw,text", [
    ("only-notools", {"tools": True},
     "the request uses tools but its endpoints declare tools = false"),
    ("only-novision", {"images": True},
     "the request carries images but its endpoints declare vision = false"),
    ("only-small", {"prompt_tokens_low": 9000},
     "the prompt (at least 9000 tokens) is larger than every declared context_window "
     "(largest 8000)"),
])
def test_nothing_capable_is_a_400_naming_the_reason(model: str, kw: dict, text: str) -> None:
    with pytest.raises(NoCapableTarget) as e:
        run(cfg(config()), facts(model, **kw))
    assert e.value.status == 400 and e.value.code == "no_capable_target"
    assert text in e.value.message
    assert e.value.plan.removals and not e.value.plan.targets  # type: ignore[attr-defined]


def test_several_reasons_are_all_named() -> None:
    with pytest.raises(NoCapableTarget) as e:
        run(cfg(config()), facts("limited", tools=True, prompt_tokens_low=9000))
    assert "tools = false" in e.value.message and "context_window" in e.value.message


def test_capability_does_not_fail_open_when_cold() -> None:
    c = cfg(config())
    with pytest.raises(NoCapableTarget):
        run(c, facts("only-notools", tools=True), snap(cold={"pub/notools": 1.0}))


def test_capability_runs_after_policy_and_before_overrides() -> None:
    from humpyard.planning.types import Override
    c = cfg(config())
    o = Override(id="7", kind="disable_target", subject="notools")
    p = run(c, facts(tools=True), snap(overrides=(o,)))
    # Already removed by capability: the override has nothing left to remove.
    assert [(r.target, r.step) for r in p.removals] == [("notools", "capability")]

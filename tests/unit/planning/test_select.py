import pytest

from humpyard.config import Config
from humpyard.errors import ForbiddenError, UnknownModel
from humpyard.planning.select import compile_glob, compile_rules, select_route

from .helpers import cfg, facts, route, run, target

TARGETS = target("a") + target("b") + target("c") + route("r", ["a"]) + route("x", ["b"]) \
    + route("y", ["c"])
KEYS = """
[keys.ci-main]
key_sha256 = "{h}"
[keys.dev]
key_sha256 = "{h2}"
allowed_routes = ["r", "x"]
""".format(h="0" * 64, h2="1" * 64)  # a secret each: one shared by two keys is refused


def rules(*blocks: str, keys: str = "") -> Config:
    return cfg(TARGETS + "".join(blocks) + keys)


def rule(route_: str, when: str = "", name: str | None = None) -> str:
    out = "[[select]]\n"
    if name:
        out += f'name = "{name}"\n'
    if when:
        out += f"when = {{ {when} }}\n"
    return out + f'route = "{route_}"\n'


def sel(config: Config, **kw: object):
    return select_route(config, facts(**kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("pattern,value,ok", [
    ("deep", "deep", True), ("deep", "Deep", False), ("deep", "deeper", False),
    ("ci-*", "ci-main", True), ("ci-*", "ci-", True), ("ci-*", "xci-main", False),
    ("*-bot", "my-bot", True), ("*-bot", "my-bots", False),
    ("*ab*", "xxabyy", True), ("*ab*", "xxa", False),
    ("a*b*c", "abc", True), ("a*b*c", "a-b-c", True), ("a*b*c", "acb", False),
    ("*", "", True), ("a.c", "abc", False), ("a+", "aa", False), ("[x]", "[x]", True),
    ("a*", "a\nb", True),
])
def test_globs_star_only_everything_else_literal_and_case_sensitive(
        pattern: str, value: str, ok: bool) -> None:
    assert compile_glob(pattern)(value) is ok


def test_no_rules_the_requested_model_names_the_route() -> None:
    s = sel(rules(), model="x")
    assert (s.route, s.rule, s.source, s.checks) == ("x", "default", "requested_model", ())


def test_model_condition() -> None:
    c = rules(rule("x", 'model = "au*"'))
    assert sel(c, model="auto").route == "x"
    assert sel(c, model="r").route == "r"


def test_key_condition_and_open_gateway_never_matches() -> None:
    c = rules(rule("x", 'key = "ci-*"'), keys=KEYS)
    assert sel(c, model="r", key_id="ci-main").route == "x"
    assert sel(c, model="r", key_id="dev").route == "r"
    assert sel(c, model="r", key_id=None).route == "r"
    full = select_route(c, facts(model="r"), all_rules=True)
    assert full.checks[0].mismatches == ("key: 'ci-*' != no key (open gateway)",)


def test_profile_condition_and_mismatch_text() -> None:
    c = rules(rule("x", 'profile = "deep"'))
    assert sel(c, model="r", headers={"x-humpyard-profile": "deep"}).route == "x"
    s = select_route(c, facts(model="r", headers={"x-humpyard-profile": "x"}), all_rules=True)
    assert s.route == "r"
    assert s.checks[0].mismatches == ("profile: 'deep' != header 'x'",)
    s = select_route(c, facts(model="r"), all_rules=True)
    assert s.checks[0].mismatches == ("profile: 'deep' != no header",)


def test_tag_condition_reads_x_humpyard_tag_headers() -> None:
    c = rules(rule("x", 'tag = { team = "infra*" }'))
    assert sel(c, model="r", headers={"x-humpyard-tag-team": "infra-eu"}).route == "x"
    assert sel(c, model="r", headers={"x-humpyard-tag-team": "Infra"}).route == "r"
    assert sel(c, model="r", headers={"x-humpyard-team": "infra"}).route == "r"


def test_header_condition_names_are_case_insensitive() -> None:
    c = rules(rule("x", 'header = { "X-Client" = "openclaw" }'))
    assert sel(c, model="r", headers={"x-client": "openclaw"}).route == "x"
    assert sel(c, model="r", headers={"x-client": "OpenClaw"}).route == "r"
    assert sel(c, model="r").route == "r"


def test_header_glob_star_does_not_match_an_absent_header() -> None:
    c = rules(rule("x", 'header = { "x-client" = "*" }'))
    assert sel(c, model="r", headers={"x-client": ""}).route == "x"
    assert sel(c, model="r").route == "r"


def test_credential_headers_never_match_even_when_present() -> None:
    # The loader refuses them; a rule compiled from one anyway never matches.
    from humpyard.config.spec import SelectRuleSpec, WhenSpec
    c = rules()
    forged = SelectRuleSpec(route="x", when=WhenSpec(header={"authorization": "*"}))
    object.__setattr__(c, "select", (forged,))
    compiled = compile_rules(c)
    f = facts(model="r", headers={"authorization": "Bearer k"})
    assert select_route(compiled, f).route == "r"


def test_agent_and_task_conditions() -> None:
    c = rules(rule("x", 'agent = "planner"'), rule("y", 'task = "t-*"'))
    assert sel(c, model="r", headers={"x-switchyard-agent-id": "planner"}).route == "x"
    assert sel(c, model="r", headers={"x-switchyard-task-id": "t-9"}).route == "y"
    assert sel(c, model="r", headers={"x-switchyard-agent-id": "coder"}).route == "r"


@pytest.mark.parametrize("flag", ["subagent", "stream", "tools", "images"])
def test_boolean_conditions(flag: str) -> None:
    c = rules(rule("x", f"{flag} = true"), rule("y", f"{flag} = false"))
    assert sel(c, model="r", **{flag: True}).route == "x"
    assert sel(c, model="r", **{flag: False}).route == "y"
    s = select_route(c, facts(model="r"), all_rules=True)
    assert s.checks[0].mismatches == (f"{flag}: true != false",)


def test_prompt_tokens_inclusive_bounds_and_unknown_never_matches() -> None:
    c = rules(rule("x", "prompt_tokens = { min = 100, max = 200 }"),
              rule("y", "prompt_tokens = { min = 30000 }"))
    assert sel(c, model="r", prompt_tokens=100).route == "x"
    assert sel(c, model="r", prompt_tokens=200).route == "x"
    assert sel(c, model="r", prompt_tokens=99).route == "r"
    assert sel(c, model="r", prompt_tokens=201).route == "r"
    assert sel(c, model="r", prompt_tokens=30000).route == "y"
    assert sel(c, model="r", prompt_tokens=None).route == "r"
    checks = select_route(c, facts(model="r", prompt_tokens=50), all_rules=True).checks
    assert checks[0].mismatches == ("prompt_tokens: 50 < min 100",)
    checks = select_route(c, facts(model="r", prompt_tokens=250), all_rules=True).checks
    assert checks[0].mismatches == ("prompt_tokens: 250 > max 200",)
    checks = select_route(c, facts(model="r"), all_rules=True).checks
    assert checks[1].mismatches == ("prompt_tokens: unknown (no estimate was given)",)


def test_all_conditions_must_hold_and_every_mismatch_is_listed() -> None:
    c = rules(rule("x", 'model = "r", profile = "deep", tools = true'))
    assert sel(c, model="r", headers={"x-humpyard-profile": "deep"}, tools=True).route == "x"
    assert sel(c, model="r", headers={"x-humpyard-profile": "deep"}).route == "r"
    s = select_route(c, facts(model="q"), all_rules=True)
    assert s.checks[0].mismatches == ("model: 'r' != 'q'", "profile: 'deep' != no header",
                                      "tools: true != false")


def test_first_match_wins_and_labels() -> None:
    c = rules(rule("x", "tools = true"), rule("y", "tools = true", name="second"),
              rule("y", "stream = true", name="streams"))
    s = sel(c, model="r", tools=True, stream=True)
    assert (s.route, s.rule, s.source) == ("x", "select[0]", "selector")
    s = sel(c, model="r", stream=True)
    assert (s.route, s.rule) == ("y", "streams")


def test_catch_all_matches_everything() -> None:
    c = rules(rule("x", "tools = true"), rule("y"))
    assert sel(c, model="r").route == "y"
    assert sel(c, model="anything").route == "y"
    assert sel(c, model="r", tools=True).route == "x"


def test_rule_whose_route_the_key_may_not_use_is_skipped_and_recorded() -> None:
    c = rules(rule("y", "tools = true", name="to-y"), rule("x", "tools = true"), keys=KEYS)
    s = sel(c, model="r", key_id="dev", tools=True)
    assert (s.route, s.rule) == ("x", "select[1]")
    assert [(k.label, k.matched, k.key_may_use_route) for k in s.checks] == [
        ("to-y", True, False), ("select[1]", True, True)]
    # Nothing else applies: the requested model serves, skipped rule still recorded.
    c = rules(rule("y", "tools = true", name="to-y"), keys=KEYS)
    s = sel(c, model="r", key_id="dev", tools=True)
    assert (s.route, s.rule, s.source) == ("r", "default", "requested_model")
    assert [k.label for k in s.checks] == ["to-y"]


def test_a_header_cannot_turn_a_working_request_into_a_refusal() -> None:
    c = rules(rule("y", 'profile = "deep"'), keys=KEYS)
    p = run(c, facts(model="r", key_id="dev", headers={"x-humpyard-profile": "deep"}))
    assert p.route == "r"


def test_a_rule_rescues_an_unknown_model() -> None:
    c = rules(rule("x", 'model = "gpt-4o"'))
    p = run(c, facts(model="gpt-4o"))
    assert (p.route, p.rule, p.rule_source) == ("x", "select[0]", "selector")
    with pytest.raises(UnknownModel) as e:
        run(c, facts(model="gpt-5"))
    assert "gpt-5" in e.value.message
    assert e.value.status == 404


def test_key_may_not_use_the_requested_route_is_forbidden() -> None:
    c = rules(keys=KEYS)
    with pytest.raises(ForbiddenError) as e:
        run(c, facts(model="y", key_id="dev"))
    assert "'y'" in e.value.message and e.value.status == 403
    assert e.value.plan.route == "y" and e.value.plan.targets == ()  # type: ignore[attr-defined]


def test_all_rules_lists_every_rule_and_agrees_with_the_fast_path() -> None:
    c = rules(rule("x", "tools = true", name="t"), rule("y", "stream = true"), rule("r"),
              keys=KEYS)
    for kw in ({}, {"tools": True}, {"stream": True}, {"tools": True, "stream": True},
               {"key_id": "dev", "stream": True}, {"key_id": "dev", "tools": True}):
        fast = select_route(c, facts(model="q", **kw))
        full = select_route(c, facts(model="q", **kw), all_rules=True)
        assert (fast.route, fast.rule, fast.source) == (full.route, full.rule, full.source)
        assert [k.index for k in full.checks] == [0, 1, 2]


def test_rules_indexed_by_model_keep_their_order() -> None:
    c = rules(rule("x", 'model = "auto", tools = true'), rule("y", "tools = true"),
              rule("r", 'model = "auto"'))
    assert sel(c, model="auto", tools=True).route == "x"
    assert sel(c, model="other", tools=True).route == "y"
    assert sel(c, model="auto").route == "r"
    assert sel(c, model="other").route == "other"

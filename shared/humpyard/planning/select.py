"""Selector rules: which route a request takes.

``compile_rules(config)`` turns ``config.select`` into matchers once per
configuration; ``select_route`` walks them per request. Rules are tried top to
bottom and the first one that matches wins, except that a matching rule whose
route the key may not use (``allowed_routes``) is skipped and evaluation goes
on. With no applicable rule the requested model names the route (rule label
``default``, source ``requested_model``); whether that route exists or the key
may use it is the planner's question, not this module's.

Text conditions are globs: ``*`` matches any text (including none), every
other character is literal and case-sensitive. A header condition never
matches an absent header, and credential headers (``authorization``,
``x-api-key``, ``cookie``, ``proxy-authorization``) never match at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from humpyard.config.names import CREDENTIAL_HEADERS, PromptRange
from humpyard.config.spec import Config, KeySpec
from humpyard.planning.types import RequestFacts, RuleCheck

if TYPE_CHECKING:
    from humpyard.config.spec import SelectRuleSpec as SelectRule

PROFILE_HEADER = "x-humpyard-profile"
TAG_HEADER_PREFIX = "x-humpyard-tag-"
AGENT_HEADER = "x-switchyard-agent-id"
TASK_HEADER = "x-switchyard-task-id"

Glob = Callable[[str], bool]
Getter = Callable[[RequestFacts], str | None]
Test = Callable[[RequestFacts], bool]


def compile_glob(pattern: str) -> Glob:
    """A predicate for one glob; the common shapes avoid regular expressions."""
    if "*" not in pattern:
        return pattern.__eq__  # type: ignore[return-value]
    if pattern == "*":
        return lambda _value: True
    inner = pattern.strip("*")
    if "*" not in inner:
        if pattern.startswith("*") and pattern.endswith("*"):
            return lambda value: inner in value
        if pattern.endswith("*"):
            return lambda value: value.startswith(inner)
        return lambda value: value.endswith(inner)
    regex = re.compile(".*".join(re.escape(p) for p in pattern.split("*")), re.DOTALL)
    return lambda value: regex.fullmatch(value) is not None


class _Cond:
    """One condition: ``test`` (the hot path, a plain function) and ``why`` (explain)."""

    __slots__ = ("test", "why")

    def __init__(self, test: Test, why: Callable[[RequestFacts], str]):
        self.test, self.why = test, why


def _text(label: str, pattern: str, get: Getter, absent: str, shown: str = "") -> _Cond:
    """A glob against a text fact that may be missing (None never matches)."""
    glob = compile_glob(pattern)

    def test(facts: RequestFacts) -> bool:
        value = get(facts)
        return value is not None and glob(value)

    def why(facts: RequestFacts) -> str:
        value = get(facts)
        got = absent if value is None else f"{shown}{value!r}"
        return f"{label}: {pattern!r} != {got}"

    return _Cond(test, why)


def _header(label: str, pattern: str, name: str) -> _Cond:
    if name in CREDENTIAL_HEADERS:  # refused at load too; never matched here
        return _text(label, pattern, lambda _facts: None, "no header")
    get: Getter = lambda facts: facts.headers.get(name)  # noqa: E731
    cond = _text(label, pattern, get, "no header", "header ")
    if "*" not in pattern:  # the common case, as one comparison
        cond.test = lambda facts: facts.headers.get(name) == pattern
    return cond


def _flag(name: str, want: bool) -> _Cond:
    def why(facts: RequestFacts) -> str:
        got = bool(getattr(facts, name))
        return f"{name}: {str(want).lower()} != {str(got).lower()}"

    if want:
        return _Cond(lambda facts: bool(getattr(facts, name)), why)
    return _Cond(lambda facts: not getattr(facts, name), why)


def _range(bounds: PromptRange) -> _Cond:
    low, high = bounds.get("min"), bounds.get("max")

    def test(facts: RequestFacts) -> bool:
        n = facts.prompt_tokens
        return n is not None and (low is None or n >= low) and (high is None or n <= high)

    def why(facts: RequestFacts) -> str:
        n = facts.prompt_tokens
        if n is None:
            return "prompt_tokens: unknown (no estimate was given)"
        if low is not None and n < low:
            return f"prompt_tokens: {n} < min {low}"
        return f"prompt_tokens: {n} > max {high}"

    return _Cond(test, why)


def _conditions(rule: SelectRule) -> tuple[_Cond, ...]:
    """The rule's conditions, the model condition (if any) first."""
    w = rule.when
    out: list[_Cond] = []
    if w.model is not None:
        out.append(_text("model", w.model, lambda f: f.model, "no model"))
    if w.key is not None:
        out.append(_text("key", w.key, lambda f: f.key_id, "no key (open gateway)"))
    if w.profile is not None:
        out.append(_header("profile", w.profile, PROFILE_HEADER))
    for name, pattern in (w.tag or {}).items():
        out.append(_header(f"tag.{name}", pattern, TAG_HEADER_PREFIX + name.lower()))
    for name, pattern in (w.header or {}).items():
        out.append(_header(f"header.{name}", pattern, name.lower()))
    if w.agent is not None:
        out.append(_header("agent", w.agent, AGENT_HEADER))
    if w.task is not None:
        out.append(_header("task", w.task, TASK_HEADER))
    for flag in ("subagent", "stream", "tools", "images"):
        want = getattr(w, flag)
        if want is not None:
            out.append(_flag(flag, want))
    if w.prompt_tokens is not None:
        out.append(_range(w.prompt_tokens))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class CompiledRule:
    """One rule ready to match; ``label`` is its name or ``select[<index>]``."""

    index: int
    label: str
    route: str
    conditions: tuple[_Cond, ...]
    exact_model: str | None  # the model condition when it is a plain name
    rest: tuple[Test, ...]  # the tests besides an exact model condition

    def mismatches(self, facts: RequestFacts) -> tuple[str, ...]:
        return tuple(c.why(facts) for c in self.conditions if not c.test(facts))


@dataclass(frozen=True, slots=True)
class CompiledRules:
    """``config.select`` as matchers, built once per configuration.

    ``by_model`` lists, per model name that some rule names exactly, the
    rules a request for that model can match, in order; ``other`` those a
    request for any other model can match (no exact model condition).
    """

    rules: tuple[CompiledRule, ...]
    keys: Mapping[str, KeySpec]
    by_model: Mapping[str, tuple[CompiledRule, ...]]
    other: tuple[CompiledRule, ...]
    routes: frozenset[str] = frozenset()

    def candidates(self, model: str) -> tuple[CompiledRule, ...]:
        return self.by_model.get(model, self.other)


def _compile_rule(i: int, rule: SelectRule) -> CompiledRule:
    conditions = _conditions(rule)
    model = rule.when.model
    exact = model if model is not None and "*" not in model else None
    rest = tuple(c.test for c in (conditions[1:] if exact is not None else conditions))
    return CompiledRule(index=i, label=rule.name or f"select[{i}]", route=rule.route,
                        conditions=conditions, exact_model=exact, rest=rest)


def compile_rules(config: Config) -> CompiledRules:
    """Compile every selector rule of ``config``; keep the result as long as the config."""
    rules = tuple(_compile_rule(i, r) for i, r in enumerate(config.select))
    models = {r.exact_model for r in rules if r.exact_model is not None}
    by_model = {m: tuple(r for r in rules if r.exact_model in (None, m)) for m in models}
    other = tuple(r for r in rules if r.exact_model is None)
    return CompiledRules(rules=rules, keys=dict(config.keys), by_model=by_model, other=other,
                         routes=frozenset(config.routes))


PICKER_PREFIX = "anthropic/"
"""``GET /v1/models`` lists a route that ends on Claude models under this prefix too
(``anthropic/auto``), as Claude Code's model picker keeps only ids that contain
``claude`` or ``anthropic``; the id names the route (``requested_route``)."""


def requested_route(model: str, routes: Collection[str]) -> str:
    """The route a requested model names when no rule chose one: the model itself, or
    ``<route>`` for ``anthropic/<route>`` when no route has the whole name."""
    if model.startswith(PICKER_PREFIX) and model not in routes:
        name = model[len(PICKER_PREFIX):]
        if name in routes:
            return name
    return model


@dataclass(frozen=True, slots=True)
class Selection:
    """The chosen route and how it was chosen.

    ``rule`` is the rule's name, ``select[<i>]`` when unnamed, or ``default``
    when the requested model named the route. ``checks`` has one entry per
    rule in order when ``select_route`` was asked for ``all_rules``; otherwise
    (the request path) only the rules that matched: the ones skipped for the
    key, then the winner.
    """

    route: str
    rule: str
    source: str  # selector | requested_model
    checks: tuple[RuleCheck, ...] = ()


def key_may_use(keys: Mapping[str, KeySpec], key_id: str | None, route: str) -> bool:
    """Whether a key may use a route. No key (open gateway) or an unlisted id may use all.

    Authentication is the caller's job: an id that reaches the planner was accepted.
    """
    spec = keys.get(key_id) if key_id is not None else None
    return spec is None or spec.may_use(route)


def select_route(config: Config | CompiledRules, facts: RequestFacts, *,
                 all_rules: bool = False) -> Selection:
    """Choose the route for ``facts`` by the first applicable rule.

    Pass the ``CompiledRules`` from ``compile_rules`` on the request path; a
    ``Config`` is compiled on every call (fine for tools and tests).
    ``all_rules`` evaluates every rule and lists all mismatches (explain).
    """
    compiled = config if isinstance(config, CompiledRules) else compile_rules(config)
    if all_rules:
        return _select_all(compiled, facts)
    keys, key_id = compiled.keys, facts.key_id
    skipped: list[RuleCheck] = []
    for rule in compiled.candidates(facts.model):
        for test in rule.rest:
            if not test(facts):
                break
        else:
            check = RuleCheck(rule.index, rule.label, rule.route, True, (),
                              key_may_use(keys, key_id, rule.route))
            if check.key_may_use_route:
                return Selection(rule.route, rule.label, "selector", (*skipped, check))
            skipped.append(check)
    return Selection(requested_route(facts.model, compiled.routes), "default",
                     "requested_model", tuple(skipped))


def _select_all(compiled: CompiledRules, facts: RequestFacts) -> Selection:
    """Every rule with all its mismatches; the same choice as the request path."""
    checks: list[RuleCheck] = []
    chosen: CompiledRule | None = None
    for rule in compiled.rules:
        missing = rule.mismatches(facts)
        allowed = key_may_use(compiled.keys, facts.key_id, rule.route)
        checks.append(RuleCheck(rule.index, rule.label, rule.route, not missing, missing,
                                allowed))
        if not missing and allowed and chosen is None:
            chosen = rule
    if chosen is None:
        return Selection(requested_route(facts.model, compiled.routes), "default",
                         "requested_model", tuple(checks))
    return Selection(chosen.route, chosen.label, "selector", tuple(checks))

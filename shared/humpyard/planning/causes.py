"""What removed a route's targets, in words: the body of every planning refusal.

A refusal names every step that took a target out of the plan, in planning
order, not just the step that removed the last one: a budget that removed
the priced target and overrides that removed the free ones are both the
cause, and the message (shown to the client, stored on the decision and
returned by explain) says so. One clause per step (per override)::

    allowed_classes [private] removed 'paid-coder'
    the routing policy removed 'a', 'b' (reason)
    the budget removed 'paid' (key 'ci' has spent $0.06 of $0.05 this day)
    capabilities removed 'small' (the request uses tools but ...)
    runtime override 2 (disable_target free) removed 'free'
    health skipped 'x' (cooling down)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from humpyard.ledger.periods import seconds_left
from humpyard.planning import steps
from humpyard.planning.compiled import CompiledConfig
from humpyard.planning.policy import worst_cost
from humpyard.planning.types import Removal, RequestFacts, StateSnapshot

_CAPABILITY_TEXT = {
    steps.TOOLS: "the request uses tools but its endpoints declare tools = false",
    steps.VISION: "the request carries images but its endpoints declare vision = false",
}


def _names(targets: Iterable[str]) -> str:
    return ", ".join(repr(t) for t in targets)


def _grouped(removals: Iterable[Removal], key: Callable[[Removal], str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in removals:
        out.setdefault(key(r), []).append(r.target)
    return out


def capability_text(cc: CompiledConfig, r: Removal, facts: RequestFacts) -> str:
    """Why capabilities removed ``r.target``, as the operator declared it."""
    if r.reason == steps.WINDOW:
        windows = [e.context_window or 0 for e in cc.targets[r.target].spec.endpoints]
        return (f"the prompt (at least {facts.prompt_tokens_low} tokens) is larger than "
                f"every declared context_window (largest {max(windows)})")
    return _CAPABILITY_TEXT.get(r.reason, r.reason)


def budget_text(cc: CompiledConfig, facts: RequestFacts, snapshot: StateSnapshot,
                removed: Iterable[str] = ()) -> str:
    """The key's spend against its budget, as the budget policy saw it."""
    key = cc.config.keys.get(facts.key_id or "")
    if key is None or key.budget is None:
        return "the key's budget is spent"
    spent = snapshot.spend_usd.get(key.id, 0.0)
    text = (f"key {key.id!r} has spent ${spent:.2f} of ${key.budget.usd:.2f} "
            f"this {key.budget.period}")
    if spent < key.budget.usd:  # removed because the worst case does not fit
        reserved = snapshot.reserved_usd.get(key.id, 0.0)
        text += (f", ${reserved:.4f} is reserved by requests in flight, and this request "
                 f"may cost up to ${_worst(cc, facts, removed):.4f}")
    if snapshot.taken_at:
        end = snapshot.taken_at + seconds_left(key.budget.period, snapshot.taken_at)
        text += f"; the budget resets at {datetime.fromtimestamp(end, UTC):%Y-%m-%dT%H:%M:%SZ}"
    return text


def _worst(cc: CompiledConfig, facts: RequestFacts, removed: Iterable[str]) -> float:
    """The smallest worst-case cost among the targets the budget removed."""
    costs = [worst_cost(cc.targets[t].spec.endpoints, facts) for t in removed
             if t in cc.targets]
    return min(costs, default=0.0)


def override_label(r: Removal) -> str:
    """``runtime override 2 (disable_target free)``."""
    what = " ".join(p for p in (r.override_kind or r.reason, r.override_subject) if p)
    return f"runtime override {r.override_id} ({what})"


def describe(removals: Iterable[Removal], cc: CompiledConfig, route: str,
             facts: RequestFacts, snapshot: StateSnapshot) -> list[str]:
    """One clause per step (and per override) that removed targets, in planning order."""
    by_step: dict[str, list[Removal]] = {}
    for r in removals:
        by_step.setdefault(r.step, []).append(r)
    clauses: list[str] = []
    if "classes" in by_step:
        allowed = cc.config.routes[route].allowed_classes or ()
        clauses.append(f"allowed_classes [{', '.join(allowed)}] removed "
                       f"{_names(r.target for r in by_step['classes'])}")
    for reason, targets in _grouped(by_step.get("policy", ()), lambda r: r.reason).items():
        clauses.append(f"the routing policy removed {_names(targets)} ({reason})")
    if "budget" in by_step:
        gone = [r.target for r in by_step["budget"]]
        clauses.append(f"the budget removed {_names(gone)} "
                       f"({budget_text(cc, facts, snapshot, gone)})")
    for text, targets in _grouped(by_step.get("capability", ()),
                                  lambda r: capability_text(cc, r, facts)).items():
        clauses.append(f"capabilities removed {_names(targets)} ({text})")
    for label, targets in _grouped(by_step.get("override", ()), override_label).items():
        clauses.append(f"{label} removed {_names(targets)}")
    if "health" in by_step:
        clauses.append(f"health skipped {_names(r.target for r in by_step['health'])} "
                       "(cooling down)")
    if "pacing" in by_step:
        clauses.append(f"pacing skipped {_names(r.target for r in by_step['pacing'])} "
                       "(its upstream has no rate limit left until its reset)")
    return clauses

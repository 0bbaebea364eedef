"""Building the decision record: what was decided for one request and what happened.

The record is a JSON-ready dict; the store indexes ``request_id``, ``ts``,
``route``, ``rule``, ``outcome``, ``key_id``, ``status``, ``target``,
``provider`` and keeps the rest as JSON. It holds configuration names and
key ids only, never a key or a prompt.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from humpyard.errors import HumpyardError, PlanRefused, UpstreamError
from humpyard.planning.estimate import output_tokens_for
from humpyard.protocols.openai import MAX_MODEL_CHARS
from humpyard.records import Call, Served
from humpyard.sessions import session_id


class Tokens(NamedTuple):
    """An answer's token counts: every prompt token (cached ones included), the
    output, and of the prompt, the tokens read from and written to a cache."""

    input: int
    output: int
    cache_read: int
    cache_write: int


def _count(value: Any) -> int:
    """A token count as an upstream stated it: a positive int, or a finite positive
    number sent as a float (``100.0``, rounded up: a count errs high), else 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value if value > 0 else 0
    if isinstance(value, float) and math.isfinite(value) and value > 0:
        return math.ceil(value)
    return 0


def token_counts(usage: Mapping[str, Any]) -> Tokens:
    """The counts in an OpenAI-shaped ``usage``: ``prompt_tokens``,
    ``completion_tokens``, cache reads from ``cache_read_input_tokens`` (the
    Anthropic upstream's, kept by its decoder) or
    ``prompt_tokens_details.cached_tokens``, cache writes from
    ``cache_creation_input_tokens`` or ``prompt_tokens_details.cache_write_tokens``."""
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    return Tokens(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")),
                  _count(usage.get("cache_read_input_tokens"))
                  or _count(details.get("cached_tokens")),
                  _count(usage.get("cache_creation_input_tokens"))
                  or _count(details.get("cache_write_tokens")))


def stream_usage(usage: Mapping[str, Any], prompt_estimate: int,
                 relayed_bytes: int, max_output: int | None = None) -> dict[str, int]:
    """The usage charged for an answer without its usage (a stream the client left,
    that broke or whose upstream never sent it; a buffered answer without it): the
    upstream's own counts where it gave them (an Anthropic stream states its prompt
    first), else the prompt estimate, and at least the relayed text's tokens as
    output (``planning.estimate.output_tokens_for``), that estimate at most
    ``max_output`` (the output bound the request reserved its worst case with:
    the estimate errs high, never past what the answer could have been)."""
    got = token_counts(usage)
    guess = output_tokens_for(relayed_bytes)
    if max_output is not None:
        guess = min(guess, max_output)
    out: dict[str, int] = {
        "prompt_tokens": got.input or max(0, prompt_estimate),
        "completion_tokens": max(got.output, guess),
    }
    if got.cache_read:
        out["cache_read_input_tokens"] = got.cache_read
    if got.cache_write:
        out["cache_creation_input_tokens"] = got.cache_write
    return out


def _notes(call: Call, served: Served | None) -> list[str]:
    """The notes of the request: what its decoding and fitting changed or dropped.

    An answer relayed natively (the client's own body went through) owes
    nothing to the decoding, so the decoder's notes are left out; the fitting
    notes are those of the attempt that answered, or of every attempt when
    none did. Each attempt keeps its own notes too."""
    notes = [] if served is not None and served.native else list(call.notes)
    made = [a for a in call.attempts if not a.skipped]
    if served is not None:
        made = made[-1:]
    for a in made:
        for n in a.notes or ():
            if n not in notes:
                notes.append(n)
    return notes


def _outcome(status: int, error: HumpyardError | None, stream_error: str | None) -> str:
    if error is None:
        return "stream_broken" if stream_error else "ok"
    if isinstance(error, UpstreamError):
        return "failed"
    if isinstance(error, PlanRefused):
        return error.code
    return error.code or "refused"


def _crossed(call: Call) -> bool | None:
    classes = [a.class_ for a in call.attempts if not a.skipped]
    if not classes:
        return False
    if any(c is None for c in classes):
        return None
    return len(set(classes)) > 1


def _asked_model(body: dict[str, Any]) -> str | None:
    """The model the client asked for, clipped to the intake's limit (a refused
    request may carry any string there)."""
    model = body.get("model")
    if not isinstance(model, str):
        return None
    return model if len(model) <= MAX_MODEL_CHARS else model[:MAX_MODEL_CHARS] + "…"


def build_decision(call: Call, *, status: int, served: Served | None,
                   error: HumpyardError | None, stream_error: str | None,
                   latency_ms: float, cost_usd: float,
                   usage: Mapping[str, Any] | None = None,
                   usage_estimated: bool = False) -> dict[str, Any]:
    """The ledger's record of ``call``.

    ``route`` is a configured route or None (an unknown model is in ``model``
    only), so stats and metrics group by configuration names alone. A request
    refused before planning (a body that did not decode) has no facts: its
    session id comes from the headers and its stream flag from the body as sent.
    ``usage`` is what the answer is charged for (``served.usage`` when not given);
    ``usage_estimated`` says it is the gateway's estimate, not the upstream's count."""
    plan = call.plan
    route = plan.route if plan and plan.route in call.config.routes else None
    facts = call.facts
    removals = plan.removals if plan else ()

    def names(step: str) -> list[dict[str, Any]]:
        return [{"target": r.target, "reason": r.reason} for r in removals if r.step == step]

    if usage is None and served is not None:
        usage = served.usage
    tokens = token_counts(usage) if usage else None
    d: dict[str, Any] = {
        "request_id": call.request_id,
        "ts": call.ts,
        "protocol": call.protocol,
        "model": _asked_model(call.body),
        "key_id": call.key.id if call.key else None,
        "session_id": facts.session_id if facts else session_id(call.headers),
        "stream": bool(facts.stream) if facts else call.body.get("stream") is True,
        "route": route,
        "route_type": plan.route_type if plan else None,
        "rule": plan.rule if plan else None,
        "rule_source": plan.rule_source if plan else None,
        "skipped_rules": [{"rule": c.label, "route": c.route}
                          for c in (plan.rules if plan else ())
                          if c.matched and not c.key_may_use_route],
        "excluded_targets": names("classes"),
        "policy_removed": names("policy") + names("budget"),
        "incapable_targets": names("capability"),
        "overrides": [{"id": r.override_id, "kind": r.override_kind,
                       "subject": r.override_subject, "target": r.target, "reason": r.reason}
                      for r in removals if r.step == "override"],
        "cold_targets": [r.target for r in removals if r.step == "health"],
        "health_fail_open": bool(plan.health_fail_open) if plan else False,
        "ranking": [{"target": t, "reason": why} for t, why in (plan.ranking if plan else ())],
        "attempts": [a.to_dict() for a in call.attempts],
        "outcome": _outcome(status, error, stream_error),
        "status": status,
        "error": error.message if error else stream_error,
        "target": served.target if served else None,
        "provider": served.endpoint.provider if served else None,
        "fallback_crossed_classes": _crossed(call),
        "prompt_tokens": plan.prompt_tokens if plan else (facts.prompt_tokens if facts else None),
        "usage": {"input_tokens": tokens.input, "output_tokens": tokens.output,
                  "cache_read_tokens": tokens.cache_read,
                  "cache_write_tokens": tokens.cache_write} if tokens else None,
        "usage_estimated": usage_estimated,
        "cost_usd": round(cost_usd, 8),
        "latency_ms": round(latency_ms, 2),
        "notes": _notes(call, served),
    }
    limit = getattr(error, "limit", None)
    if limit is not None:  # the per-key limit that refused (errors.RateLimited)
        d["limit"] = limit
    paced = [r.target for r in removals if r.step == "pacing"]
    if paced:  # targets routed away from: their upstream said it would refuse
        d["paced_targets"] = paced
    return d

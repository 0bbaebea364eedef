"""Fitting a chat body to one endpoint, after planning chose it (pure).

The decoders run before the gateway knows which endpoint will serve, so what
depends on the endpoint is adjusted here, per attempt: each function returns
the body to send (a shallow copy when anything changed, else the same
object) and the note for the decision, or None when nothing changed.
"""

from __future__ import annotations

from typing import Any

from humpyard.protocols.fields import Note

TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")


def clamp_max_tokens(body: dict[str, Any], limit: int) -> tuple[dict[str, Any], str | None]:
    """Clamp ``max_tokens``/``max_completion_tokens`` to an endpoint's ``max_output_tokens``.

    Claude Code asks for 32000 or 64000 output tokens; a provider that caps
    lower would refuse the request, so the gateway asks for ``limit`` instead.
    Raises ``ValueError`` for a ``limit`` below 1.
    """
    if limit < 1:
        raise ValueError(f"max_output_tokens must be positive, got {limit}")
    over = {k: v for k in TOKEN_FIELDS
            if isinstance(v := body.get(k), int) and not isinstance(v, bool) and v > limit}
    if not over:
        return body, None
    asked = ", ".join(f"{k} {v}" for k, v in over.items())
    return {**body, **dict.fromkeys(over, limit)}, \
        Note("max_tokens", f"{asked} clamped to {limit}: the endpoint's max_output_tokens")


def drop_reasoning_effort(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Remove ``reasoning_effort`` for an endpoint that does not take it."""
    if "reasoning_effort" not in body:
        return body, None
    effort = body["reasoning_effort"]
    rest = {k: v for k, v in body.items() if k != "reasoning_effort"}
    return rest, Note("reasoning", f"reasoning_effort {effort!r} dropped: the endpoint takes none")


def fit_chat(body: dict[str, Any], *, max_output_tokens: int | None,
             reasoning: bool | None) -> tuple[dict[str, Any], list[str]]:
    """A chat body fitted to an endpoint's ``max_output_tokens`` and ``reasoning``
    (False: it takes no ``reasoning_effort``; None: unknown, passed on), with the notes."""
    notes: list[str] = []
    if max_output_tokens is not None:
        body, note = clamp_max_tokens(body, max_output_tokens)
        if note:
            notes.append(note)
    if reasoning is False:
        body, note = drop_reasoning_effort(body)
        if note:
            notes.append(note)
    return body, notes


MIN_THINKING_BUDGET = 1024
"""Anthropic's smallest ``thinking.budget_tokens``."""


def fit_message(body: dict[str, Any], *, max_output_tokens: int | None,
                reasoning: bool | None) -> tuple[dict[str, Any], list[str]]:
    """An Anthropic Messages body (passed through to an Anthropic upstream) fitted the
    same way: ``max_tokens`` clamped, a thinking budget kept below it (Anthropic
    refuses one that is not: lowered, or dropped under its 1024 minimum), and for
    ``reasoning = false`` no ``thinking`` and no ``output_config.effort``."""
    notes: list[str] = []
    if max_output_tokens is not None:
        body, note = clamp_max_tokens(body, max_output_tokens)
        if note:
            notes.append(note)
    thinking = body.get("thinking")
    if reasoning is False:
        if isinstance(thinking, dict) and thinking.get("type") != "disabled":
            body = {k: v for k, v in body.items() if k != "thinking"}
            notes.append(Note("thinking", f"thinking {thinking.get('type')!r} dropped: the "
                              "endpoint takes no reasoning"))
        config = body.get("output_config")
        if isinstance(config, dict) and "effort" in config:
            rest = {k: v for k, v in config.items() if k != "effort"}
            body = {**body, "output_config": rest} if rest else \
                {k: v for k, v in body.items() if k != "output_config"}
            notes.append(Note("thinking", f"output_config.effort {config['effort']!r} dropped: "
                              "the endpoint takes no reasoning"))
        return body, notes
    limit = body.get("max_tokens")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    if isinstance(limit, int) and isinstance(budget, int) and budget >= limit:
        assert isinstance(thinking, dict)
        if limit - 1 >= MIN_THINKING_BUDGET:
            body = {**body, "thinking": {**thinking, "budget_tokens": limit - 1}}
            notes.append(Note("thinking", f"thinking.budget_tokens {budget} lowered to "
                              f"{limit - 1}: it must stay below max_tokens"))
        else:
            body = {k: v for k, v in body.items() if k != "thinking"}
            notes.append(Note("thinking", f"thinking dropped: max_tokens {limit} leaves no "
                              f"room for Anthropic's {MIN_THINKING_BUDGET}-token minimum budget"))
    return body, notes

"""Fitting a chat body to one endpoint, after planning chose it (pure).

The decoders run before the gateway knows which endpoint will serve, so what
depends on the endpoint is adjusted here, per attempt: each function returns
the body to send (a shallow copy when anything changed, else the same
object) and the note for the decision, or None when nothing changed.
"""

from __future__ import annotations

from typing import Any

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
        f"{asked} clamped to {limit}: the endpoint's max_output_tokens"


def drop_reasoning_effort(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Remove ``reasoning_effort`` for an endpoint that does not take it."""
    if "reasoning_effort" not in body:
        return body, None
    effort = body["reasoning_effort"]
    rest = {k: v for k, v in body.items() if k != "reasoning_effort"}
    return rest, f"reasoning_effort {effort!r} dropped: the endpoint takes none"

"""Reasoning effort across protocols (pure).

OpenAI chat takes ``reasoning_effort`` (``none``, ``minimal``, ``low``,
``medium``, ``high``, ``xhigh``); Anthropic Messages takes ``thinking``
(``enabled`` with a ``budget_tokens``, ``adaptive``, ``disabled``) and
``output_config.effort`` (``low``, ``medium``, ``high``, ``max``). These
functions translate one into the other; the tables are in docs/clients.md
("Reasoning effort").
"""

from __future__ import annotations

ANTHROPIC_EFFORTS = ("low", "medium", "high", "max")

# The Anthropic budget each effort gets upstream, and the budgets each effort
# stands for downstream (a budget below LOW_BELOW is low, below MEDIUM_BELOW medium).
BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768}
LOW_BELOW = 4096
MEDIUM_BELOW = 16384
MIN_BUDGET = 1024  # Anthropic refuses a smaller budget_tokens


def effort_from_anthropic(effort: str | None, thinking_type: str | None,
                          budget_tokens: int | None) -> str | None:
    """The ``reasoning_effort`` an Anthropic request asks for, or None for none.

    An explicit ``output_config.effort`` wins (``max`` becomes ``high``, the
    highest effort OpenAI-compatible servers commonly take); else enabled
    thinking maps by its budget (under 4096 low, under 16384 medium, else
    high); adaptive or disabled thinking alone asks for nothing.
    """
    if effort is not None:
        return "high" if effort == "max" else effort
    if thinking_type == "enabled" and budget_tokens is not None:
        if budget_tokens < LOW_BELOW:
            return "low"
        return "medium" if budget_tokens < MEDIUM_BELOW else "high"
    return None


def thinking_for_effort(effort: str | None, max_tokens: int) -> dict | None:
    """The Anthropic ``thinking`` for an OpenAI ``reasoning_effort``, or None for none.

    ``none`` (and no effort) gives no thinking; otherwise ``enabled`` with the
    effort's budget, capped below ``max_tokens`` (Anthropic requires
    ``budget_tokens < max_tokens``); when that leaves less than Anthropic's
    minimum of 1024 there is no thinking.
    """
    if effort is None or effort == "none":
        return None
    budget = min(BUDGETS.get(effort, BUDGETS["medium"]), max_tokens - 1)
    if budget < MIN_BUDGET:
        return None
    return {"type": "enabled", "budget_tokens": budget}

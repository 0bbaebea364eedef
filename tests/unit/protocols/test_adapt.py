"""Fitting a body to one endpoint (``protocols/adapt.py``): what changes and its note."""

from __future__ import annotations

from humpyard.protocols.adapt import fit_chat, fit_message


def test_fit_chat_leaves_a_fitting_body_alone():
    body = {"model": "m", "max_tokens": 100, "reasoning_effort": "low"}
    out, notes = fit_chat(body, max_output_tokens=1000, reasoning=None)
    assert out is body and notes == []


def test_fit_chat_clamps_and_drops_with_notes():
    body = {"model": "m", "max_tokens": 64000, "max_completion_tokens": 32000,
            "reasoning_effort": "high"}
    out, notes = fit_chat(body, max_output_tokens=8192, reasoning=False)
    assert out == {"model": "m", "max_tokens": 8192, "max_completion_tokens": 8192}
    assert body["max_tokens"] == 64000  # the caller's body is never changed
    assert notes == [
        "max_tokens 64000, max_completion_tokens 32000 clamped to 8192: the endpoint's "
        "max_output_tokens",
        "reasoning_effort 'high' dropped: the endpoint takes none"]


def test_fit_message_keeps_the_thinking_budget_below_max_tokens():
    body = {"max_tokens": 64000, "thinking": {"type": "enabled", "budget_tokens": 32000}}
    out, notes = fit_message(body, max_output_tokens=20000, reasoning=None)
    assert out == {"max_tokens": 20000, "thinking": {"type": "enabled", "budget_tokens": 19999}}
    assert body["thinking"]["budget_tokens"] == 32000
    assert notes[1] == "thinking.budget_tokens 32000 lowered to 19999: it must stay below " \
                       "max_tokens"


def test_fit_message_drops_thinking_that_cannot_fit():
    body = {"max_tokens": 4000, "thinking": {"type": "enabled", "budget_tokens": 2048}}
    out, notes = fit_message(body, max_output_tokens=1000, reasoning=True)
    assert out == {"max_tokens": 1000}
    assert notes[-1] == ("thinking dropped: max_tokens 1000 leaves no room for Anthropic's "
                         "1024-token minimum budget")


def test_fit_message_adaptive_thinking_has_no_budget_to_fit():
    body = {"max_tokens": 64000, "thinking": {"type": "adaptive"}}
    out, notes = fit_message(body, max_output_tokens=8000, reasoning=None)
    assert out == {"max_tokens": 8000, "thinking": {"type": "adaptive"}}
    assert len(notes) == 1


def test_fit_message_without_reasoning_drops_thinking_and_effort():
    body = {"max_tokens": 100, "thinking": {"type": "adaptive"},
            "output_config": {"effort": "high", "format": {"type": "json_schema"}}}
    out, notes = fit_message(body, max_output_tokens=None, reasoning=False)
    assert out == {"max_tokens": 100, "output_config": {"format": {"type": "json_schema"}}}
    assert notes == ["thinking 'adaptive' dropped: the endpoint takes no reasoning",
                     "output_config.effort 'high' dropped: the endpoint takes no reasoning"]
    only_effort = {"max_tokens": 1, "output_config": {"effort": "low"},
                   "thinking": {"type": "disabled"}}
    out, notes = fit_message(only_effort, max_output_tokens=None, reasoning=False)
    assert out == {"max_tokens": 1, "thinking": {"type": "disabled"}}
    assert len(notes) == 1

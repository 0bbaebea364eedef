"""Translation notes map to a fixed vocabulary of label values (``metrics/translation.py``).

The notes are the protocol modules' own wording; these tests feed the real
decoders (the captured agents' requests, and bodies built to produce each
note) and check every note lands on a kind other than ``other``, and that a
name from the request never becomes a label value.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from humpyard.metrics.translation import KINDS, note_kind
from humpyard.protocols.adapt import clamp_max_tokens, drop_reasoning_effort
from humpyard.protocols.anthropic_request import decode_request as decode_messages
from humpyard.protocols.anthropic_upstream import encode_request
from humpyard.protocols.chat_chunks import FRAGMENTS_DROPPED
from humpyard.protocols.responses_request import decode_request as decode_responses

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
HI = [{"role": "user", "content": "hi"}]


def fixture_notes() -> list[str]:
    notes: list[str] = []
    for path in sorted(FIXTURES.glob("claude_code/*.json")):
        notes += decode_messages(json.loads(path.read_text())["body"])[1]
    for path in sorted(FIXTURES.glob("codex/*.json")):
        notes += decode_responses(json.loads(path.read_text())["body"])[1]
    return notes


def test_every_note_of_the_captured_agents_has_a_kind():
    notes = fixture_notes()
    assert len(notes) >= 10
    assert [n for n in notes if note_kind(n) == "other"] == []


@pytest.mark.parametrize("body,kind", [
    ({"top_k": 5}, "sampling"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking"),
    ({"thinking": {"type": "adaptive"}}, "thinking"),
    ({"output_config": {"effort": "low", "format": {}}}, "ignored_field"),
    ({"metadata": {"user_id": "u"}}, "client_id"),
    ({"cache_control": {"type": "ephemeral"}}, "cache_control"),
    ({"system": "x-anthropic-billing-header: cc_version=1;\nrest"}, "billing_header"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]},
     "system_message"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "t", "signature": "s"},
        {"type": "text", "text": "b"}]}, {"role": "user", "content": "c"}]}, "thinking"),
    ({"cache_controlled_weirdness": 1}, "ignored_field"),
])
def test_messages_notes(body, kind):
    _, notes = decode_messages({"model": "m", "max_tokens": 10, "messages": HI, **body})
    assert kind in {note_kind(n) for n in notes}, notes


@pytest.mark.parametrize("body,kind", [
    ({"tools": [{"type": "function", "name": "f", "parameters": {}},
                {"type": "web_search"}]}, "hosted_tool"),
    ({"include": ["reasoning.encrypted_content"]}, "include"),
    ({"user": "u"}, "client_id"),
    ({"safety_identifier": "s"}, "client_id"),
    ({"prompt_cache_key": "k"}, "prompt_cache_key"),
    ({"truncation": "auto"}, "sampling"),
    ({"text": {"verbosity": "low"}}, "ignored_field"),
    ({"reasoning": {"summary": "auto"}}, "reasoning"),
    ({"input": [{"role": "user", "content": "a"},
                {"type": "reasoning", "summary": [], "encrypted_content": "x"}]}, "reasoning"),
    ({"input": [{"role": "user", "content": "a"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": [
                    {"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "tool_output_image"),
    ({"input": [{"role": "user", "content": "a"}, {"role": "developer", "content": "b"}]},
     "system_message"),
    ({"client_metadata": {"x": "y"}}, "ignored_field"),
])
def test_responses_notes(body, kind):
    _, notes = decode_responses({"model": "m", "input": "hi", **body})
    assert kind in {note_kind(n) for n in notes}, notes


def test_per_endpoint_and_upstream_notes():
    assert note_kind(clamp_max_tokens({"max_tokens": 64000}, 8192)[1] or "") == "max_tokens"
    assert note_kind(drop_reasoning_effort({"reasoning_effort": "high"})[1] or "") == \
        "reasoning"
    _, notes = encode_request({"model": "m", "messages": HI, "temperature": 1.5, "seed": 3,
                               "reasoning_effort": "high", "max_tokens": 512,
                               "response_format": {"type": "json_object"}}, model="c")
    kinds = {note_kind(n) for n in notes}
    assert {"sampling", "ignored_field", "reasoning"} <= kinds, notes
    assert "other" not in kinds, notes
    assert note_kind(FRAGMENTS_DROPPED) == "stream_fragment"


def test_kinds_are_a_small_fixed_set_and_requests_never_name_one():
    assert len(KINDS) <= 20 and "other" in KINDS
    _, notes = decode_messages({"model": "m", "max_tokens": 10, "messages": HI,
                                "thinking is what this field is called": 1,
                                "cache_control dropped": 2})
    assert sorted(note_kind(n) for n in notes) == ["ignored_field", "ignored_field"], notes


def test_every_kind_written_in_the_code_is_in_the_vocabulary():
    """A kind is set where a note is written; a typo would count as ``other``."""
    source = Path(__file__).resolve().parents[3] / "shared" / "humpyard"
    written = set()
    for path in source.rglob("*.py"):
        text = path.read_text()
        written |= set(re.findall(r'note\(notes, "([a-z_]+)"', text))
        written |= set(re.findall(r'Note\("([a-z_]+)"', text))
    assert len(written) >= 12
    assert written <= set(KINDS) - {"other"}, written - set(KINDS)


def test_a_plain_string_is_other():
    assert note_kind("cache_control dropped: the upstream takes no prompt-caching marks") \
        == "other"

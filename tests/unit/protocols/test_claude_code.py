"""Claude Code as it ships, through the /v1/messages decoder (and the per-endpoint fits).

The shapes are those in tests/fixtures/claude_code (captured from 2.1.197):
mid-conversation system messages, the billing line, ``metadata.user_id``,
``output_config.effort``/``thinking``, ``cache_control`` everywhere.
"""

from __future__ import annotations

import pytest

from humpyard.errors import RequestError
from humpyard.protocols.adapt import clamp_max_tokens, drop_reasoning_effort
from humpyard.protocols.anthropic import decode_request
from humpyard.protocols.reasoning import effort_from_anthropic, thinking_for_effort
from humpyard.protocols.system_fold import reminder

BILLING = "x-anthropic-billing-header: cc_version=2.1.197.41f; cc_entrypoint=sdk-cli;"
CACHED = {"type": "ephemeral"}


def body(**fields):
    base = {"model": "agent", "max_tokens": 64000,
            "messages": [{"role": "user", "content": "hi"}]}
    base.update(fields)
    return base


def refused(request: dict) -> str:
    with pytest.raises(RequestError) as info:
        decode_request(request)
    return info.value.message


# --- system messages inside messages -------------------------------------------


def test_system_message_after_the_user_turn_is_folded_into_it():
    out, notes = decode_request(body(messages=[
        {"role": "user", "content": [{"type": "text", "text": "Read note.txt"}]},
        {"role": "system", "content": "Available agent types: claude, Explore"},
    ]))
    assert out["messages"] == [{"role": "user", "content": "Read note.txt\n" + reminder(
        "Available agent types: claude, Explore")}]
    assert "1 system message(s) inside messages folded into user turns as " \
           "<system-reminder> text" in notes


def test_system_message_between_tool_use_and_tool_result():
    out, _ = decode_request(body(messages=[
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                           "input": {"file_path": "a"}}]},
        {"role": "system", "content": [{"type": "text", "text": "mode changed",
                                        "cache_control": CACHED}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "42"}, {"type": "text", "text": "go on"}]},
    ]))
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "tool", "user"]
    assert out["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "42"}
    assert out["messages"][3] == {"role": "user",
                                  "content": reminder("mode changed") + "\ngo on"}


def test_leading_system_message_joins_the_system_prompt():
    out, notes = decode_request(body(system="top", messages=[
        {"role": "system", "content": "more"}, {"role": "user", "content": "hi"}]))
    assert out["messages"] == [{"role": "system", "content": "top\n\nmore"},
                               {"role": "user", "content": "hi"}]
    assert not any("folded" in n for n in notes)


# --- the billing line ------------------------------------------------------------


def test_billing_line_is_removed_by_default():
    out, notes = decode_request(body(system=[
        {"type": "text", "text": BILLING},
        {"type": "text", "text": "You are a Claude agent.", "cache_control": CACHED}]))
    assert out["messages"][0] == {"role": "system", "content": "You are a Claude agent."}
    assert "x-anthropic-billing-header line removed from the system prompt" in notes


def test_billing_line_as_the_first_line_of_a_string_system_prompt():
    out, _ = decode_request(body(system=BILLING + "\nBe brief."))
    assert out["messages"][0] == {"role": "system", "content": "Be brief."}
    out, _ = decode_request(body(system=BILLING))
    assert out["messages"][0]["role"] == "user"  # nothing else was in the system prompt


def test_billing_line_is_kept_when_asked():
    out, notes = decode_request(body(system=[{"type": "text", "text": BILLING},
                                             {"type": "text", "text": "Be brief."}]),
                                keep_billing_header=True)
    assert out["messages"][0] == {"role": "system", "content": BILLING + "\nBe brief."}
    assert not any("billing" in n for n in notes)


def test_billing_text_later_in_the_prompt_is_left_alone():
    out, notes = decode_request(body(system=[{"type": "text", "text": "Be brief."},
                                             {"type": "text", "text": BILLING}]))
    assert out["messages"][0]["content"] == "Be brief.\n" + BILLING
    assert not any("billing" in n for n in notes)


# --- client identifiers ------------------------------------------------------------


def test_user_id_is_not_forwarded_unless_asked():
    user_id = '{"device_id":"00","account_uuid":"","session_id":"s"}'
    out, notes = decode_request(body(metadata={"user_id": user_id}))
    assert "user" not in out
    assert "metadata.user_id not forwarded: client identifiers stay at the gateway" in notes
    out, _ = decode_request(body(metadata={"user_id": user_id}), forward_user=True)
    assert out["user"] == user_id


# --- effort and thinking -------------------------------------------------------------


@pytest.mark.parametrize(("fields", "effort"), [
    ({"output_config": {"effort": "low"}}, "low"),
    ({"output_config": {"effort": "medium"}}, "medium"),
    ({"output_config": {"effort": "high"}, "thinking": {"type": "adaptive"}}, "high"),
    ({"output_config": {"effort": "max"}}, "high"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "low"),
    ({"thinking": {"type": "enabled", "budget_tokens": 4096}}, "medium"),
    ({"thinking": {"type": "enabled", "budget_tokens": 16384}}, "high"),
    ({"output_config": {"effort": "low"},
      "thinking": {"type": "enabled", "budget_tokens": 30000}}, "low"),
])
def test_effort_and_thinking_become_reasoning_effort(fields, effort):
    out, notes = decode_request(body(**fields))
    assert out["reasoning_effort"] == effort
    assert f"thinking/effort sent as reasoning_effort {effort!r}" in notes
    assert "thinking" not in out and "output_config" not in out


def test_adaptive_thinking_alone_sets_no_effort():
    out, notes = decode_request(body(thinking={"type": "adaptive"}))
    assert "reasoning_effort" not in out
    assert "thinking dropped: no effort to pass on; the upstream's default applies" in notes
    out, notes = decode_request(body(thinking={"type": "disabled"}))
    assert "reasoning_effort" not in out and notes == []


@pytest.mark.parametrize(("fields", "message"), [
    ({"output_config": {"effort": "extreme"}},
     "output_config.effort: must be one of low, medium, high, max, got 'extreme'"),
    ({"output_config": "high"}, "output_config: must be an object"),
    ({"thinking": {"type": "sometimes"}},
     "thinking.type: must be one of enabled, adaptive, disabled, got 'sometimes'"),
    ({"thinking": {"type": "enabled", "budget_tokens": 0}},
     "thinking.budget_tokens: must be a positive integer"),
])
def test_effort_and_thinking_validation_names_the_field(fields, message):
    assert refused(body(**fields)) == message


def test_effort_tables():
    assert effort_from_anthropic(None, None, None) is None
    assert thinking_for_effort("high", 64000) == {"type": "enabled", "budget_tokens": 24576}
    assert thinking_for_effort("low", 1500) == {"type": "enabled", "budget_tokens": 1499}
    assert thinking_for_effort("medium", 1000) is None  # no room for the 1024 minimum
    assert thinking_for_effort("none", 64000) is None
    assert thinking_for_effort(None, 64000) is None


# --- cache_control ----------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi",
                                                "cache_control": CACHED}]}]},
    {"messages": [{"role": "user", "content": "q"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                                     "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                "content": [{"type": "text", "text": "r",
                                                             "cache_control": CACHED}]}]}]},
    {"tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": CACHED}]},
    {"cache_control": CACHED},
])
def test_cache_control_anywhere_is_dropped_with_one_note(fields):
    out, notes = decode_request(body(**fields))
    assert "cache_control" not in repr(out)
    assert notes.count("cache_control dropped: the upstream takes no prompt-caching marks") == 1


# --- per-endpoint fits --------------------------------------------------------------


def test_max_tokens_clamped_to_the_endpoint_limit():
    chat, _ = decode_request(body())
    clamped, note = clamp_max_tokens(chat, 8192)
    assert clamped["max_tokens"] == 8192 and chat["max_tokens"] == 64000
    assert note == "max_tokens 64000 clamped to 8192: the endpoint's max_output_tokens"
    same, none = clamp_max_tokens(chat, 64000)
    assert same is chat and none is None
    both, note = clamp_max_tokens({"max_tokens": 9, "max_completion_tokens": 20}, 10)
    assert both == {"max_tokens": 9, "max_completion_tokens": 10}
    assert note == "max_completion_tokens 20 clamped to 10: the endpoint's max_output_tokens"
    with pytest.raises(ValueError):
        clamp_max_tokens(chat, 0)


def test_reasoning_effort_dropped_for_an_endpoint_without_it():
    chat, _ = decode_request(body(output_config={"effort": "high"}))
    plain, note = drop_reasoning_effort(chat)
    assert "reasoning_effort" not in plain and chat["reasoning_effort"] == "high"
    assert note == "reasoning_effort 'high' dropped: the endpoint takes none"
    assert drop_reasoning_effort(plain) == (plain, None)

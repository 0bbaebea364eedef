"""``read_chunk``: the parts of one chat-completion stream chunk, each type-checked."""

from __future__ import annotations

from humpyard.protocols.chat_chunks import read_chunk


def test_a_full_chunk():
    part = read_chunk({"choices": [{"delta": {
        "content": "hi", "reasoning_content": "think",
        "tool_calls": [{"index": 0, "id": "c"}, "junk"]}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1}})
    assert part.usage == {"prompt_tokens": 1}
    assert (part.text, part.reasoning, part.finish_reason) == ("hi", "think", "stop")
    assert part.fragments == [{"index": 0, "id": "c"}]


def test_a_usage_only_chunk_has_no_choice():
    part = read_chunk({"choices": [], "usage": {"completion_tokens": 3}})
    assert part.choice is None and part.usage == {"completion_tokens": 3}
    assert (part.text, part.reasoning, part.fragments, part.finish_reason) == ("", "", [], None)


def test_fields_of_the_wrong_type_read_as_absent():
    part = read_chunk({"usage": [1], "choices": [{"delta": {
        "content": 7, "reasoning": {"x": 1}, "tool_calls": {"index": 0}}}]})
    assert part.usage is None and part.choice is not None
    assert (part.text, part.reasoning, part.fragments) == ("", "", [])
    assert read_chunk({"choices": [{"delta": "text"}]}).text == ""
    assert read_chunk({"choices": ["junk"]}).choice is None

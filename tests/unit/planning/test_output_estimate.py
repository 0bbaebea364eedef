"""The estimate of an answer's text from its stream events (what a stream whose usage
never came is charged: docs/operations.md, "Clients that leave")."""

from __future__ import annotations

import json
import time

import pytest

from humpyard.ledger.decision import stream_usage
from humpyard.planning.estimate import output_tokens_for, relayed_text_bytes


def chat(delta: dict) -> str:
    return json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                      ensure_ascii=False)


@pytest.mark.parametrize(("data", "expected"), [
    (chat({"content": "hello"}), 5),
    (chat({"role": "assistant", "content": ""}), 0),
    (chat({"reasoning_content": "think"}), 5),
    (chat({"reasoning": "hmm"}), 3),
    (chat({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                           "function": {"name": "f", "arguments": '{"city": "Paris"}'}}]}),
     len(json.dumps('{"city": "Paris"}')) - 2),  # counted as escaped in the JSON
    (chat({"content": "héllo"}), len("héllo".encode())),  # bytes, not characters
    (json.dumps({"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": "Hi there"}}), 8),
    (json.dumps({"type": "content_block_delta", "index": 0,
                 "delta": {"type": "input_json_delta", "partial_json": '{"a":'}}),
     len(json.dumps('{"a":')) - 2),
    (json.dumps({"type": "content_block_delta", "index": 0,
                 "delta": {"type": "thinking_delta", "thinking": "so"}}), 2),
    (json.dumps({"id": "c", "choices": [], "usage": {"prompt_tokens": 5}}), 0),
    ("[DONE]", 0),
    ("not json at all", 0),
])
def test_relayed_text_bytes(data: str, expected: int) -> None:
    assert relayed_text_bytes(data) == expected


def test_an_unterminated_string_is_scanned_in_linear_time() -> None:
    # A hostile upstream's event: a text field that never closes, full of escapes.
    for data in ('{"content":"' + "a" * 1_000_000, '{"content":"' + '\\"' * 500_000):
        started = time.process_time()
        assert relayed_text_bytes(data) == 0
        assert time.process_time() - started < 1.0


def test_output_tokens_err_high() -> None:
    assert output_tokens_for(0) == 0
    assert output_tokens_for(1) == 1
    assert output_tokens_for(7) == 3  # one token per 3 bytes, rounded up


def test_stream_usage_keeps_the_upstreams_counts_and_estimates_the_rest() -> None:
    # nothing came: the prompt estimate and the relayed text
    assert stream_usage({}, 120, 30) == {"prompt_tokens": 120, "completion_tokens": 10}
    # an Anthropic stream stated its prompt (and cache reads) first, output 1 so far
    got = stream_usage({"prompt_tokens": 900, "completion_tokens": 1,
                        "cache_read_input_tokens": 800}, 120, 300)
    assert got == {"prompt_tokens": 900, "completion_tokens": 100,
                   "cache_read_input_tokens": 800}
    # a stated output above the estimate stands
    assert stream_usage({"prompt_tokens": 9, "completion_tokens": 50}, 120, 3) == \
        {"prompt_tokens": 9, "completion_tokens": 50}

"""Arbitrary Responses API bodies: decoded, or refused naming the field; never a crash."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from humpyard.errors import RequestError
from humpyard.protocols.anthropic_upstream import encode_request
from humpyard.protocols.openai import validate_chat
from humpyard.protocols.responses import encode_response
from humpyard.protocols.responses_request import decode, response_context

FAST = settings(max_examples=200, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=6),
                    st.sampled_from(["message", "function_call", "function_call_output",
                                     "reasoning", "input_text", "input_image", "user",
                                     "developer", "assistant", "function", "namespace",
                                     "web_search", "custom", "auto", "required"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12)


def near(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={
        k: st.one_of(v, json_values) for k, v in fields.items()})


part = near({"type": st.sampled_from(["input_text", "output_text", "input_image",
                                      "input_file"]),
             "text": st.text(max_size=6), "image_url": st.text(max_size=6)})
item = near({"type": st.sampled_from(["message", "function_call", "function_call_output",
                                      "reasoning", "custom_tool_call"]),
             "role": st.sampled_from(["user", "assistant", "developer", "system"]),
             "content": st.one_of(st.text(max_size=6), st.lists(part, max_size=2)),
             "call_id": st.text(max_size=3), "name": st.sampled_from(["f", "g"]),
             "arguments": st.just("{}"), "output": st.text(max_size=4),
             "input": st.text(max_size=4), "namespace": st.just("ns")})
tool = near({"type": st.sampled_from(["function", "namespace", "custom", "web_search"]),
             "name": st.sampled_from(["f", "g", "ns"]),
             "parameters": st.just({"type": "object"}),
             "tools": st.lists(near({"type": st.just("function"),
                                     "name": st.sampled_from(["f", "g"])}), max_size=2)})
optional = {
    "instructions": st.text(max_size=6), "tools": st.lists(tool, max_size=3),
    "tool_choice": st.sampled_from(["auto", "none", "required"]),
    "max_output_tokens": st.integers(-1, 10**8), "temperature": st.floats(0, 2),
    "reasoning": near({"effort": st.sampled_from(["low", "high", "x"])}),
    "text": near({"format": near({"type": st.sampled_from(["text", "json_schema"]),
                                  "name": st.just("n"), "schema": st.just({})})}),
    "store": st.booleans(), "stream": st.booleans(), "include": st.lists(st.text(max_size=4)),
}
inputs = st.one_of(st.text(max_size=6), st.lists(item, max_size=4))
# mostly well-formed bodies (the decoder's paths), some with anything anywhere (its refusals)
bodies = st.one_of(
    st.fixed_dictionaries({"model": st.just("r"), "input": inputs},
                          optional=optional),
    near({"model": st.sampled_from(["r", ""]), "input": inputs, **optional}))


@FAST
@given(body=st.one_of(json_values, bodies))
def test_decode_accepts_or_names_the_field(body):
    try:  # what the intake does: decode, then check what every protocol shares
        chat, notes, context = decode(body)
        validate_chat(chat)
    except RequestError as e:
        assert e.status == 400 and ":" in e.message
        return
    assert isinstance(notes, list)
    json.dumps(chat, allow_nan=False)
    encode_request(chat)  # and it can be sent to an Anthropic upstream
    answer = {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}
    assert context == response_context(body)  # the tool names mapped once, the same
    encode_response(answer, context, response_id="resp_1", created_at=0)

"""The request body's nesting check: right, and linear with no per-item Python work.

``http.body.nests_deeper`` replaced a walk over the parsed body that visited
every container in Python (61% of the loop time of a 30 MB body of 1.1 M content
parts). Its answer is checked against a plain recursive depth on bodies whose
strings hold brackets, quotes and backslashes; its work is counted with
``sys.setprofile`` (Python and C calls) and ``sys.settrace`` (lines run), never
with a clock.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from humpyard.errors import RequestError
from humpyard.http.body import MAX_JSON_DEPTH, nests_deeper, parse_json

FAST = settings(max_examples=300, deadline=None, database=None, derandomize=True)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


tricky = st.text(alphabet='[]{}"\\ax\n\u00e9\U0001f600', max_size=12)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | tricky,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky, inner, max_size=4),
    max_leaves=40)


@FAST
@given(values, st.integers(min_value=0, max_value=12), st.booleans())
def test_it_answers_as_a_recursive_walk_would(value: Any, limit: int, ascii: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii).encode()
    assert nests_deeper(raw, limit) == (depth(value) > limit)


@pytest.mark.parametrize(("text", "deeper"), [
    ("[" * 64 + "]" * 64, False),
    ("[" * 65 + "]" * 65, True),
    ('{"a": "' + "[" * 200 + '"}', False),  # brackets in a string are text
    ('["\\\\", ' + "[" * 64 + "]" * 64 + "]", True),  # an escaped backslash ends no string
    ('["\\"[[[[", ' + "[" * 63 + "]" * 63 + "]", False),  # nor does an escaped quote
    ('[' + '"]", ' * 100 + "[" * 63 + "]" * 63 + "]", False),
    ('[' + '"[", ' * 100 + "[" * 64 + "]" * 64 + "]", True),
])
def test_edges(text: str, deeper: bool) -> None:
    json.loads(text)
    assert nests_deeper(text.encode(), MAX_JSON_DEPTH) is deeper


def test_a_body_deeper_than_the_limit_is_a_400_naming_the_limit() -> None:
    with pytest.raises(RequestError, match="deeper than 64 levels"):
        parse_json(b'{"messages": ' + b"[" * 70 + b"]" * 70 + b"}")


def body(parts: int, text: str = "x") -> bytes:
    content = [{"type": "text", "text": text} for _ in range(parts)]
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}],
                       "max_tokens": 8}).encode()


def calls(fn: Callable[[], object]) -> int:
    """Python and C function calls ``fn`` makes (``sys.setprofile`` events), with the
    garbage collector off (a collection runs other objects' finalizers)."""
    n = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    gc.disable()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return n


def lines(fn: Callable[[], object]) -> int:
    """Lines of Python ``fn`` runs (``sys.settrace`` events)."""
    n = 0

    def trace(frame: Any, event: str, arg: object) -> Any:
        nonlocal n
        if event == "line":
            n += 1
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return n


def test_parsing_a_large_body_makes_no_call_per_part() -> None:
    """The whole check (and the parse around it) is a fixed number of calls, whatever
    the number of content parts: the per-byte work is inside C calls, each linear."""
    small, large = body(1_000), body(100_000)
    assert calls(lambda: parse_json(small)) == calls(lambda: parse_json(large)) < 60


def test_strings_holding_brackets_cost_one_pass_over_them() -> None:
    """Brackets inside strings are told apart in one pass over the quotes and brackets
    only: ten times the parts, at most ten times the lines (plus a constant)."""
    small, large = body(1_000, "a[b]{"), body(10_000, "a[b]{")
    few, many = lines(lambda: nests_deeper(small)), lines(lambda: nests_deeper(large))
    assert few > 1_000  # the pass did run
    assert many <= 10 * few + 50

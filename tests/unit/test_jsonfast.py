"""``humpyard.jsonfast`` against the standard library it stands in for.

Each function must answer what ``json`` answers: the same value read, the same
document written (compared by reading both back: orjson and ``json`` spell
some floats differently, ``1e16`` and ``1e+16``), and, where ``json`` raises,
an exception of the same class. The module's two documented differences are
checked as such. The request's intake (``http/body.py``) reads through
orjson too, and must answer, value or refusal word for word, as its own
standard-library path does.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from humpyard import jsonfast
from humpyard.errors import RequestError
from humpyard.http.body import parse_json, parse_json_std


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values, with NaN equal to itself and ints told from floats."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def outcome(fn: Any, arg: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(arg)
    except Exception as exc:  # noqa: BLE001 - the class is what is compared
        return "raised", type(exc)


def assert_loads_like_json(data: str | bytes) -> None:
    want, got = outcome(json.loads, data), outcome(jsonfast.loads, data)
    assert want[0] == got[0], (data, want, got)
    if want[0] == "ok":
        assert same(want[1], got[1]), (data, want, got)
    else:
        assert got[1] is want[1], (data, want, got)


# -- reading ----------------------------------------------------------------

READ_CORPUS = [
    '{"a":1}', '{"a":1,"a":2}', "[]", "{}", '""', "0", "-0", "-0.0", "1.0", "1E2", "1e-7",
    "0.1", "123.456e10", "[1,2,3]", '  {"a" : [ 1 , 2 ] }\n', '"\\u00e9\\n\\t\\"\\\\"',
    '"\\ud83d\\ude00"', '"é😀"', "true", "false", "null",
    # what orjson refuses and json accepts
    "NaN", "[Infinity]", "-Infinity", "[1e400]", "-1e400", '"\\ud800"', '"a\\udc00b"', '"\ud800"',
    # what orjson would read otherwise: integers past 64 bits
    "18446744073709551615", "18446744073709551616", "-9223372036854775809",
    "[123456789012345678901234567890]", '{"n":99999999999999999999}',
    '{"id":"chatcmpl-12345678901234567890","n":1}',
    # what both refuse
    "", " ", "[1]x", "[1,]", "{'a':1}", "01", "[1]\x00", " \x0c[1]", '"\x01"', "nan",
    "[" * 1100 + "]" * 1100, '{"a":', "\ufeff[1]",
    # a stream's events as the relay reads them
    '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
    '"usage":{"prompt_tokens":5,"completion_tokens":11,"total_tokens":16}}',
    '{"error":{"message":"overloaded","type":"server_error"}}',
]


@pytest.mark.parametrize("text", READ_CORPUS)
def test_loads_reads_text_as_json_does(text: str) -> None:
    assert_loads_like_json(text)


@pytest.mark.parametrize("text", READ_CORPUS)
def test_loads_reads_bytes_as_json_does(text: str) -> None:
    # a lone surrogate character as its (invalid) UTF-8 bytes: both must refuse it
    assert_loads_like_json(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("raw", [b"\xef\xbb\xbf[1]", b'"\xff"', b'"\xc3"', "[1]".encode("utf-16"),
                                 b'{"a":"\xe2\x80\xa8"}'])
def test_loads_reads_odd_bytes_as_json_does(raw: bytes) -> None:
    assert_loads_like_json(raw)


def values(floats: st.SearchStrategy[float]) -> st.SearchStrategy[Any]:
    """JSON-shaped values: lists and string-keyed dicts of scalars."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | floats | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                    max_size=4),
        max_leaves=20)


json_values = values(st.floats())


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_loads_reads_what_json_writes_as_json_does(value: Any) -> None:
    text = json.dumps(value)  # NaN, Infinity, big integers and \u escapes included
    assert_loads_like_json(text)
    assert_loads_like_json(json.dumps(value, ensure_ascii=False))


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="{}[]\":,0123456789.eE+-truefalsnNIiy \\u\n", max_size=40))
def test_loads_agrees_with_json_on_near_json(text: str) -> None:
    assert_loads_like_json(text)


# -- writing ----------------------------------------------------------------

def assert_dumps_like_json(value: Any) -> None:
    for mine, theirs in (
            (jsonfast.dumps_bytes,
             lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()),
            (jsonfast.dumps_text, lambda v: json.dumps(v, separators=(",", ":")))):
        want, got = outcome(theirs, value), outcome(mine, value)
        assert want[0] == got[0], (value, want, got)
        if want[0] == "ok":
            assert same(json.loads(want[1]), json.loads(got[1])), (value, want, got)
            if isinstance(got[1], bytes):
                got[1].decode("utf-8")  # valid UTF-8
        else:
            assert issubclass(got[1], want[1]), (value, want, got)


@dataclasses.dataclass
class Point:
    x: int


class Colour(enum.IntEnum):
    RED = 1


class Name(str):
    pass


WRITE_CORPUS: list[Any] = [
    {"a": 1}, [1, 2.5, "x", None, True], {"é": "😀\u2028\n\x00"}, {"x": 1e16}, {"x": 1e-7},
    {"x": 0.1 + 0.2}, {"x": -0.0}, (1, 2), {"t": (1, [2, (3,)])}, Colour.RED, Name("n"),
    {Name("k"): Name("v")},
    # what orjson refuses and json writes: keys that are not strings, big integers
    {1: 2}, {True: 1, None: 2, 1.5: 3}, [2**64], [-(2**63) - 1], {"n": 10**30},
    # what json refuses: orjson must not accept it either
    {"s": "\ud800"}, {"p": Point(1)}, {"d": datetime.datetime(2026, 1, 1)},
    {"d": datetime.date(2026, 1, 1)}, {"t": datetime.time(1, 2)}, {1, 2}, b"x", object(),
    {(1, 2): 3},
]


@pytest.mark.parametrize("value", WRITE_CORPUS, ids=range(len(WRITE_CORPUS)))
def test_dumps_writes_as_json_does(value: Any) -> None:
    assert_dumps_like_json(value)


finite_values = values(st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=400, deadline=None)
@given(finite_values)
def test_dumps_writes_any_finite_value_as_json_does(value: Any) -> None:
    assert_dumps_like_json(value)


def test_characters_are_written_as_utf8_not_escapes() -> None:
    assert jsonfast.dumps_text({"é": "😀"}) == '{"é":"😀"}'
    assert jsonfast.dumps_bytes({"é": "😀"}) == '{"é":"😀"}'.encode()


def test_the_documented_differences() -> None:
    # a float that is not finite is null, not the NaN json writes (which is not JSON)
    assert jsonfast.dumps_text({"x": math.nan, "y": math.inf}) == '{"x":null,"y":null}'
    # a UUID, and an Enum member whose value is not an int, are written as values
    u = uuid.UUID(int=1)
    assert json.loads(jsonfast.dumps_text({"u": u})) == {"u": str(u)}

    class Kind(enum.Enum):
        A = "a"
    assert json.loads(jsonfast.dumps_text([Kind.A])) == ["a"]
    with pytest.raises(TypeError):
        json.dumps([Kind.A])


# -- the request's intake: parse_json against its standard-library path ---------

def intake_outcome(fn: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", fn(raw)
    except RequestError as exc:
        return "refused", str(exc)


def assert_intake_reads_as_json_does(raw: bytes) -> None:
    want, got = intake_outcome(parse_json_std, raw), intake_outcome(parse_json, raw)
    assert want[0] == got[0], (raw, want, got)
    if want[0] == "ok":
        assert same(want[1], got[1]), (raw, want, got)
    else:
        assert got[1] == want[1], (raw, want, got)  # the same words


INTAKE_CORPUS = [t.encode("utf-8", "surrogatepass") for t in READ_CORPUS if t] + [
    b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}',
    b'{"n":' + b"9" * 5000 + b"}", b'{"a":' + b"[" * 65 + b"]" * 65 + b"}",
    b'{"a":' + b"[" * 64 + b"]" * 63 + b"}", b'{"a":' + b"[" * 63 + b"]" * 63 + b"}",
    b'"\\ud83d\\ude00"', b'"\\udc00\\ud800"', b'"\xed\xa0\x80"', b'"\xc0\xaf"', b'"\xff"',
    b"\xef\xbb\xbf{}", b"null", b"[-Infinity]", b'{"x":1e309}', b'{"x":-1e-400}',
]


@pytest.mark.parametrize("raw", INTAKE_CORPUS, ids=range(len(INTAKE_CORPUS)))
def test_the_intake_reads_a_body_as_its_json_path_does(raw: bytes) -> None:
    assert_intake_reads_as_json_does(raw)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_intake_reads_any_value_as_its_json_path_does(value: Any) -> None:
    assert_intake_reads_as_json_does(json.dumps(value).encode())
    assert_intake_reads_as_json_does(json.dumps(value, ensure_ascii=False).encode(
        "utf-8", "surrogatepass"))

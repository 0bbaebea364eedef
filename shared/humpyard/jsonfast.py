"""JSON on the request path: orjson's speed, the standard library's answers.

A request's body, its upstream request, the events the relay looks into
and the record are JSON; the standard library's encoder and decoder were about a
twelfth of the event loop's time under a thousand paced streams (ADR 0027).
These functions give what ``json`` gives, through orjson wherever orjson
would read or write the same document, and through ``json`` itself where it
would not, so every caller keeps its ``json`` contract:

- ``loads`` reads ``str`` or ``bytes`` as ``json.loads`` does. orjson refuses
  what ``json`` accepts (``NaN``, ``Infinity``, out-of-range numbers, lone
  surrogates): those go to ``json``, which accepts or raises as before.
  orjson reads an integer past 64 bits as a float, where ``json`` keeps it an
  ``int``: a document with nineteen digits in a row anywhere
  (a negative integer past 64 bits may have nineteen) goes to ``json``.
  ``read_plain`` is that first step alone, for a caller with its own
  ``json`` reading (the request's intake and its error messages).
- ``dumps_bytes`` is ``json.dumps(obj, separators=(",", ":"),
  ensure_ascii=False).encode()``; ``dumps_text`` is ``json.dumps(obj,
  separators=(",", ":"))``, but with characters written as UTF-8 rather than
  ``\\u`` escapes (the same document). What orjson refuses (keys that are not
  strings, integers past 64 bits, lone surrogates, any type it does not know)
  goes to ``json``, which writes it or raises as before; the types orjson
  knows and ``json`` does not (dataclasses, dates and times) are passed to
  ``json`` too, so they are still refused.

Two differences are kept: a float that is not finite is written as ``null``,
where ``json`` wrote ``NaN`` or ``Infinity``, which are not JSON and which no
other reader of a stored decision (SQL, a browser) accepts; and a
``uuid.UUID`` or an ``enum.Enum`` member whose value is not an ``int`` is
written as its string or value, where ``json`` refused it (no value the
gateway writes is either).
``tests/unit/test_jsonfast.py`` checks all of this against ``json``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
# Nineteen digits in a row, found as nineteen zeros once every digit is a zero: a
# C-speed search, where a regular expression took longer than orjson's whole read.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def _refuse(obj: Any) -> Any:
    raise TypeError  # a type orjson would pass through: json decides


def read_plain(raw: bytes) -> Any:
    """orjson's reading of ``raw`` where it is ``json.loads``'s, else None.

    A value comes back for UTF-8 JSON with finite numbers, integers within 64
    bits, no lone surrogate and no more than 1,024 levels: then ``json.loads``,
    with or without ``parse_float``/``parse_int``/``parse_constant`` hooks that
    refuse the rest, reads the same. None for anything else, and for ``null``:
    the caller's own ``json`` reading decides (for the request's intake, with
    its error messages)."""
    if _LONG_DIGITS in raw.translate(_DIGITS_AS_ZERO):
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def loads(data: str | bytes) -> Any:
    """``json.loads(data)``."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    value = read_plain(raw)
    return value if value is not None else json.loads(data)


def dumps_bytes(obj: Any) -> bytes:
    """``json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()``."""
    try:
        return orjson.dumps(obj, _refuse, _OPTIONS)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def dumps_text(obj: Any) -> str:
    """``json.dumps(obj, separators=(",", ":"))``, characters unescaped."""
    try:
        return orjson.dumps(obj, _refuse, _OPTIONS).decode()
    except TypeError:
        return json.dumps(obj, separators=(",", ":"))

"""Reading request bodies within limits, query numbers, and header hygiene."""

from __future__ import annotations

import json
import math
import re
import sys
import zlib
from collections.abc import Mapping
from itertools import accumulate
from typing import Any, NoReturn

from starlette.requests import Request
from starlette.types import Receive

from humpyard import jsonfast
from humpyard.errors import (
    PayloadTooLarge,
    RequestError,
    UnsupportedEncoding,
    UnsupportedTransferCoding,
)
from humpyard.upstream.encoding import Decoder, TooManyMembers, decoder_for

MAX_JSON_DEPTH = 64
MAX_HEADER_COUNT = 100
MAX_HEADER_BYTES = 32 * 1024
# List-valued headers the gateway reads: several lines of one are one list, in order
# (RFC 9110, 5.3); any other repeated header keeps its last line.
LISTED_HEADERS = frozenset({"content-encoding", "transfer-encoding", "anthropic-beta"})


def lower_headers(request: Request) -> dict[str, str]:
    """Request headers with lowercased names; refuses absurd header sets."""
    return header_dict(request.scope["headers"])


def header_dict(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """ASGI headers as a dict with lowercased names, the lines of a list-valued one
    (``LISTED_HEADERS``) joined in order; refuses absurd header sets."""
    if len(raw) > MAX_HEADER_COUNT:
        raise RequestError(f"headers: at most {MAX_HEADER_COUNT} headers, got {len(raw)}",
                           status=431, code="headers_too_large")
    out: dict[str, str] = {}
    size = 0
    for k, v in raw:
        size += len(k) + len(v)
        name = k.decode("latin-1").lower()
        if name in out and name in LISTED_HEADERS:
            out[name] += ", " + v.decode("latin-1")
        else:
            out[name] = v.decode("latin-1")
    if size > MAX_HEADER_BYTES:
        raise RequestError(f"headers: {size} bytes in all, the limit is {MAX_HEADER_BYTES}",
                           status=431, code="headers_too_large")
    return out


async def read_json(request: Request, limit: int) -> Any:
    """The body parsed as JSON; 413 past ``limit`` bytes, 400 naming what is wrong."""
    headers = header_dict(request.scope["headers"])
    return await receive_json(request.receive, headers.get("content-length"), limit,
                              body_coding(headers.get("content-encoding"),
                                          headers.get("transfer-encoding")))


async def receive_json(receive: Receive, length: str | None, limit: int,
                       coding: str | None = None) -> Any:
    """The body from ASGI ``receive`` parsed as JSON (``length``: the Content-Length
    header, if any; ``coding``: the Content-Encoding header, if any); 413 past
    ``limit`` bytes (decoded), 415 for a coding not undone, 400 naming what is wrong."""
    if length is not None:
        try:
            n = int(length)
        except ValueError:
            raise RequestError("content-length: not a number") from None
        if n > limit:
            raise PayloadTooLarge(f"request body is {n} bytes; the limit is {limit}")
    if coding:
        decoder = body_decoder(coding)
        if decoder is not None:
            return parse_json(await _receive_decoded(receive, decoder, limit))
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            _left(receive)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return parse_json(chunks[0] if len(chunks) == 1 else b"".join(chunks))


_UNDONE = ("gzip", "x-gzip", "deflate", "identity", "")


def body_coding(content_encoding: str | None, transfer_encoding: str | None) -> str | None:
    """The codings a request body still has once the server has read it, in the order
    they were applied: its ``Content-Encoding``, then the transfer codings before the
    final ``chunked`` (the server undoes the chunking alone; a ``Transfer-Encoding``
    whose last coding is not ``chunked`` never reaches here: the parser refuses it).
    A transfer coding the gateway does not undo is a 501 naming it (RFC 9112, 6.1)."""
    if not transfer_encoding or "," not in transfer_encoding:
        return content_encoding  # absent or plain "chunked": the hot path
    codings = [c.strip() for c in transfer_encoding.lower().split(",")][:-1]
    for name in codings:
        if name not in _UNDONE:
            raise UnsupportedTransferCoding(
                f"transfer-encoding: {name[:32]} is not undone here; a request body may "
                "come chunked, and before that in gzip or deflate")
    return ", ".join(c for c in (content_encoding, *codings) if c) or None


def body_decoder(coding: str) -> Decoder | None:
    """A decoder for a request's ``Content-Encoding`` (None: identity), or a 415 for
    a coding the gateway does not undo (``upstream/encoding.py`` leaves br and zstd
    as they are, which for a request body would be a JSON error further on)."""
    for name in coding.lower().split(","):
        if name.strip() not in _UNDONE:
            raise UnsupportedEncoding(
                "content-encoding: the request body may be sent as it is, or in gzip "
                "or deflate")
    return decoder_for(coding)


async def _receive_decoded(receive: Receive, decoder: Decoder, limit: int) -> bytes:
    """The body undone from its coding a bounded step at a time, 413 as soon as what it
    decodes to is over ``limit`` (a small body that inflates far is never held)."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            _left(receive)
        more = message.get("more_body", False)
        decoder.push(message.get("body", b""))
        if not more:
            decoder.finish()
        try:
            while out := decoder.pull():
                size += len(out)
                if size > limit:
                    chunks.clear()
                    raise PayloadTooLarge(
                        f"request body is over the limit of {limit} bytes (decoded)")
                chunks.append(out)
        except TooManyMembers as e:
            raise RequestError(f"request body: {e} (content-encoding)") from None
        except zlib.error:
            raise RequestError("request body: it does not decode as its "
                               "content-encoding (or transfer-encoding) says") from None
    return b"".join(chunks)


def _left(receive: Receive) -> NoReturn:
    """The request's ``receive()`` said ``http.disconnect`` before the whole body."""
    cut = body_cut(receive)
    if cut is not None:
        raise type(cut)(cut.message)  # a copy: the transport's holds no frames
    raise RequestError("the client went away before sending the whole body",
                       status=499, code="client_closed")


def body_cut(receive: Receive) -> RequestError | None:
    """The error ``humpyard serve``'s connection guard ended this request's body with,
    having answered it (``guarded.py``: a body timeout, a framing the parser
    refused; it marks the connection's transport, then ends the request's
    ``receive()`` with ``http.disconnect``), or None: the client left, or another
    server runs the app."""
    cycle: Any = getattr(receive, "__self__", None)  # uvicorn's request cycle
    cut = getattr(getattr(cycle, "transport", None), "body_cut", None)
    return cut if isinstance(cut, RequestError) else None


def parse_json(raw: bytes) -> Any:
    """A request body as JSON: 400 naming what is wrong (encoding, syntax, nesting,
    non-finite numbers, unpaired surrogates)."""
    if not raw:
        raise RequestError("request body is empty; expected a JSON object")
    data = jsonfast.read_plain(raw)  # what it reads, json reads the same
    if data is None:
        return parse_json_std(raw)
    if nests_deeper(raw, MAX_JSON_DEPTH):
        raise _too_deep()
    return data


def parse_json_std(raw: bytes) -> Any:
    """``parse_json`` with the standard library alone: the answer for whatever
    orjson does not read as ``json`` does, and each refusal's words."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"request body is not valid UTF-8 (byte {e.start})") from None
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite,
                          parse_int=_integer)
    except RecursionError:
        raise _too_deep() from None
    except ValueError as e:
        raise RequestError(f"request body is not valid JSON: {e}") from None
    if nests_deeper(raw, MAX_JSON_DEPTH):
        raise _too_deep()
    if _SURROGATE_ESCAPE.search(text):
        try:  # a \uD800-\uDFFF escape that is not half of a pair is not a character
            json.dumps(data, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise RequestError("request body has a \\u escape that is not a character "
                               "(an unpaired surrogate)") from None
    return data


def _too_deep() -> RequestError:
    return RequestError(f"request body nests deeper than {MAX_JSON_DEPTH} levels")


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _no_constant(name: str) -> Any:
    raise RequestError(f"request body has {name}, which is not JSON (numbers must be finite)")


def _integer(literal: str) -> int:
    """An integer literal. The JSON scanner has matched its digits, so the only
    ``ValueError`` ``int`` can raise is for more digits than Python converts
    (``sys.get_int_max_str_digits()``, 4,300 by default)."""
    try:
        return int(literal)
    except ValueError:
        raise RequestError("request body has an integer with more than "
                           f"{sys.get_int_max_str_digits()} digits") from None


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise RequestError(f"request body has a number out of range: {literal[:40]}")
    return value


def finite(text: str, name: str) -> float:
    """A query parameter as a finite number: ``ValueError`` if it is not a number,
    ``RequestError`` naming ``name`` for an infinity or NaN."""
    value = float(text)
    if not math.isfinite(value):
        raise RequestError(f"{name}: must be a finite number, got {text[:40]!r}")
    return value


def query_number(query: Mapping[str, str], name: str) -> float | None:
    """Query parameter ``name`` as a finite number (None when absent); a 400 naming
    it when it is not one."""
    text = query.get(name)
    if text is None:
        return None
    try:
        return finite(text, name)
    except ValueError:
        raise RequestError(f"{name}: must be a number, got {text[:40]!r}") from None


def query_count(query: Mapping[str, str], name: str, default: int, most: int) -> int:
    """Query parameter ``name``, a whole number from 1 to ``most`` (``default`` when
    absent); a 400 naming it and the range otherwise. Out-of-range values were
    brought within it, so ``limit=0`` gave one row and ``limit=5000`` a thousand."""
    text = query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= most:
        raise RequestError(f"{name}: must be a whole number from 1 to {most}, "
                           f"got {text[:40]!r}")
    return value


_QUOTE, _OPEN_ARRAY, _OPEN_OBJECT = ord('"'), ord("["), ord("{")
# Everything but the quote and the four brackets, deleted by ``bytes.translate``.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
# A bracket as a signed step: an opening one +1, a closing one -1 (0xff as a signed byte).
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def nests_deeper(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the arrays and objects of the JSON text ``raw`` nest deeper than
    ``limit`` (valid JSON: call it after ``json.loads`` accepted ``raw``).

    Linear in ``len(raw)``, and nearly all of it in C: every byte but quotes and
    brackets is dropped (``bytes.translate``); escaped backslashes and quotes are
    blanked first (``bytes.replace``), so each quote left opens or closes a string;
    adjacent quotes (a string without brackets, and the quotes between two such
    strings) are dropped in pairs, which changes no bracket's place inside or
    outside a string. When no quote is left, the depth is the largest running sum
    of the brackets (``itertools.accumulate``); otherwise one pass over what is left
    (the brackets and the strings holding brackets) tells them apart.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # cannot nest deeper than it has brackets
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    shape = raw.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if _QUOTE not in shape:
        steps = memoryview(shape.translate(_STEPS)).cast("b")
        return max(accumulate(steps), default=0) > limit
    depth = 0
    inside = False
    for c in shape:
        if c == _QUOTE:
            inside = not inside
        elif inside:
            continue
        elif c == _OPEN_ARRAY or c == _OPEN_OBJECT:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False

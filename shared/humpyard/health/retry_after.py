"""Reading a stated retry time from a 429 or 503.

Pure. ``parse_retry_after`` returns the number of seconds the upstream said
to wait, or None when it said nothing readable. It does not clamp: the
breaker clamps to ``[1, max_retry_after_secs]``.

Where the time is read, first hit wins:

1. the ``Retry-After`` header, as delta-seconds or an HTTP-date (relative to
   ``now``; a date in the past reads as 0); OpenAI's ``retry-after-ms``
   header (milliseconds) is read too, before ``Retry-After``;
2. the JSON body (first 4 KiB): ``retryDelay`` (Google's duration string
   such as ``"7s"``, at the top level, under ``error`` or in an
   ``error.details[]`` entry), then ``retry_after_ms`` and ``retry_after``
   (numbers, or strings such as ``"12"`` or ``"1.5s"``) at the top level or
   under ``error``;
3. the body's text: "try again in 7.66s", "try again in 20ms",
   "try again in 1m30s", "retry after 12 seconds", "retry in 2 minutes".

A header that is present but unreadable does not hide a readable body.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

BODY_HEAD_BYTES = 4096
RETRY_AFTER_STATUSES = frozenset({429, 503})

_UNIT_SECONDS = {
    "ms": 0.001, "msec": 0.001, "msecs": 0.001,
    "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
}
# Longest spellings first so "ms" is not read as "m" followed by "s".
_UNIT = "|".join(sorted(_UNIT_SECONDS, key=len, reverse=True))
_PART = rf"(\d+(?:\.\d+)?)\s*({_UNIT})(?![a-z])"
_PART_RE = re.compile(_PART, re.IGNORECASE)
_DURATION = rf"{_PART}(?:\s*(?:,|and)?\s*{_PART})*"
_DURATION_RE = re.compile(rf"\s*({_DURATION})\s*", re.IGNORECASE)
_PHRASE_RE = re.compile(
    rf"\b(?:try\s+again|retry)\s+(?:in|after)\s+(?:about\s+)?({_DURATION})", re.IGNORECASE
)
_NUMBER_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*")
# Fallback for a body that is not JSON or was cut off at 4 KiB.
_FIELD_RE = re.compile(
    r'"(retryDelay|retry_after_ms|retry_after)"\s*:\s*("(?:[^"\\]{0,40})"|[0-9.eE+-]{1,30})'
)


def parse_retry_after(
    status: int, headers: Mapping[str, str], body_head: bytes, now: float
) -> float | None:
    """Seconds the upstream asked to wait before retrying, or None.

    Only a 429 or 503 is read; any other status returns None. ``headers`` may
    be any mapping (names are matched case-insensitively); ``now`` is epoch
    seconds, used for an HTTP-date. The result is finite and >= 0.
    """
    if status not in RETRY_AFTER_STATUSES:
        return None
    from_header = _from_headers(headers, now)
    if from_header is not None:
        return from_header
    return _from_body(body_head[:BODY_HEAD_BYTES])


def _from_headers(headers: Mapping[str, str], now: float) -> float | None:
    lowered = {name.lower(): value for name, value in headers.items()}
    millis = _number(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    return _http_date(value, now)


def _http_date(value: str, now: float) -> float | None:
    try:
        when: datetime = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" parses as naive; HTTP dates are GMT.
        when = when.replace(tzinfo=UTC)
    return _finite(max(0.0, when.timestamp() - now))


def _from_body(head: bytes) -> float | None:
    text = head.decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    found = _from_fields(doc) if doc is not None else _from_field_text(text)
    if found is not None:
        return found
    match = _PHRASE_RE.search(text)
    return _duration(match.group(1)) if match else None


def _from_fields(doc: Any) -> float | None:
    if isinstance(doc, list) and doc:  # Google sometimes wraps the error in a list.
        doc = doc[0]
    if not isinstance(doc, dict):
        return None
    holders = [doc]
    error = doc.get("error")
    if isinstance(error, dict):
        holders.append(error)
        details = error.get("details")
        if isinstance(details, list):
            holders.extend(d for d in details if isinstance(d, dict))
    for name in ("retryDelay", "retry_after_ms", "retry_after"):
        for holder in holders:
            if name in holder:
                value = _field_value(name, holder[name])
                if value is not None:
                    return value
    return None


def _from_field_text(text: str) -> float | None:
    found: dict[str, str] = {}
    for match in _FIELD_RE.finditer(text):
        found.setdefault(match.group(1), match.group(2).strip('"'))
    for name in ("retryDelay", "retry_after_ms", "retry_after"):
        if name in found:
            value = _field_value(name, found[name])
            if value is not None:
                return value
    return None


def _field_value(name: str, raw: Any) -> float | None:
    """A field's value in seconds: ``retry_after_ms`` is milliseconds unless it has a unit."""
    scale = 0.001 if name == "retry_after_ms" else 1.0
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        try:
            return _finite(float(raw) * scale)
        except OverflowError:  # an integer too large for a float
            return None
    if not isinstance(raw, str):
        return None
    number = _number(raw)
    if number is not None:
        return _finite(number * scale)
    return _duration(raw) if _DURATION_RE.fullmatch(raw) else None


def _duration(text: str) -> float | None:
    total = 0.0
    for amount, unit in _PART_RE.findall(text):
        total += float(amount) * _UNIT_SECONDS[unit.lower()]
    return _finite(total)


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    match = _NUMBER_RE.fullmatch(value)
    return _finite(float(match.group(1))) if match else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) and value >= 0 else None

"""What a failed upstream call means: its failure class, and what to do next.

Pure: no I/O, no httpx. The executor calls ``classify_status`` for an HTTP
answer that is not a success and ``classify_failure`` for a call that got
no answer (a ``TransportFailure``, whose class says what it means), and acts
on the returned ``Classification``:

- ``next_endpoint``: try the next endpoint of the same target (endpoints of a
  target are a rotation). When False the request stops at once, and the
  client sees this answer.
- ``failure_class``: whether the request may move on to the next *target* is
  decided by the route's ``fallback_on`` set, which holds these class names
  (``DEFAULT_FALLBACK`` when the route has no list, ``FALLBACK_WITH_UNAVAILABLE``
  on fastest and pool routes). ``request`` is never in any of those sets.
- ``counts_for_health``: record the failure on the endpoint's breaker.

The statuses (docs/health.md and docs/routing.md, "Failover"; the readings of the
specification behind them are in docs/decisions/0001-readings-of-the-spec.md, with its
amendments)::

    408                                  timeout       next endpoint   counts
    429                                  rate_limit    next endpoint   counts
    5xx (and any status above 599)       server_error  next endpoint   counts
    401 402 404 410                      unavailable   next endpoint   counts
    400/404 naming a gone model          unavailable   next endpoint   counts
    403                                  forbidden     next endpoint   counts
    413                                  overflow      next endpoint   never counts
    400 saying the context is exceeded   overflow      next endpoint   never counts
    any other 400, 422, any other 4xx    request       stop            never counts
    3xx (an API call redirected)         server_error  next endpoint   counts

Only the first ``BODY_HEAD_BYTES`` of a body are read; a body that is not
JSON, or is cut off, is still searched for the well-known codes as text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from humpyard.upstream.errors import TransportFailure

BODY_HEAD_BYTES = 4096
"""How much of an error body is ever read."""


class FailureClass(StrEnum):
    """The failure classes. All but ``request`` may be named in ``fallback_on``."""

    OVERFLOW = "overflow"
    RATE_LIMIT = "rate_limit"
    TIMEOUT = "timeout"
    SERVER_ERROR = "server_error"
    CONNECTION = "connection"
    FORBIDDEN = "forbidden"
    UNAVAILABLE = "unavailable"
    REQUEST = "request"


ALL_CLASSES: frozenset[FailureClass] = frozenset(FailureClass) - {FailureClass.REQUEST}
"""The seven names a route's ``fallback_on`` (and a tail's ``on``) may list."""

DEFAULT_FALLBACK: frozenset[FailureClass] = ALL_CLASSES - {FailureClass.UNAVAILABLE}
"""What falls through to the next target when a route gives no ``fallback_on``."""

FALLBACK_WITH_UNAVAILABLE: frozenset[FailureClass] = ALL_CLASSES
"""The default on fastest routes and pool routes: ``DEFAULT_FALLBACK`` plus ``unavailable``."""

MODEL_GONE_CODES = frozenset({"model_not_found", "model_not_available", "model_decommissioned"})
"""``error.code`` / ``error.type`` values that say the model is gone from the endpoint."""

CONTEXT_EXCEEDED_CODES = frozenset({"context_length_exceeded"})
"""``error.code`` / ``error.type`` values that say the prompt does not fit."""

_CONTEXT_EXCEEDED_TEXT = re.compile(
    r"context_length_exceeded"
    r"|maximum context length"
    r"|context window"
    r"|context length exceeded"
    r"|too many tokens"
    r"|prompt is too long"
    r"|input is too long",
    re.IGNORECASE,
)

_ENDPOINT_STATUSES = {
    401: FailureClass.UNAVAILABLE,
    402: FailureClass.UNAVAILABLE,
    403: FailureClass.FORBIDDEN,
    404: FailureClass.UNAVAILABLE,
    408: FailureClass.TIMEOUT,
    410: FailureClass.UNAVAILABLE,
    429: FailureClass.RATE_LIMIT,
}


@dataclass(frozen=True, slots=True)
class Classification:
    """The verdict on one failed attempt.

    ``is_model_gone`` is True only when the body named a model-gone code
    (``MODEL_GONE_CODES``), whatever the status. ``never_delivered`` is True
    only for transport failures where no byte of the request reached the
    wire, so re-sending it is free (see ``upstream.resend``).
    """

    failure_class: FailureClass
    next_endpoint: bool
    counts_for_health: bool
    is_model_gone: bool = False
    never_delivered: bool = False


def classify_status(status: int, body_head: bytes = b"") -> Classification:
    """Classify an HTTP answer with a status of 300 or more.

    ``body_head`` is the start of the response body; only its first
    ``BODY_HEAD_BYTES`` are looked at. Raises ``ValueError`` for a status
    below 300, which is not a failure.
    """
    if status < 300:
        raise ValueError(f"status {status} is not a failure")
    if status < 400 or status >= 500:
        return Classification(FailureClass.SERVER_ERROR, next_endpoint=True,
                              counts_for_health=True)
    if status in (400, 404) and _names_code(body_head, MODEL_GONE_CODES):
        return Classification(FailureClass.UNAVAILABLE, next_endpoint=True,
                              counts_for_health=True, is_model_gone=True)
    if status == 413 or (status == 400 and _says_context_exceeded(body_head)):
        return Classification(FailureClass.OVERFLOW, next_endpoint=True,
                              counts_for_health=False)
    endpoint_class = _ENDPOINT_STATUSES.get(status)
    if endpoint_class is not None:
        return Classification(endpoint_class, next_endpoint=True, counts_for_health=True)
    return Classification(FailureClass.REQUEST, next_endpoint=False, counts_for_health=False)


def classify_failure(failure: TransportFailure) -> Classification:
    """Classify a call that got no HTTP answer, by the failure's class.

    Total by construction: every ``TransportFailure`` class carries its
    ``failure_class``, ``counts_for_health`` and ``never_delivered``
    (``upstream/errors.py``). Every one moves to the next endpoint.
    """
    return Classification(FailureClass(failure.failure_class), next_endpoint=True,
                          counts_for_health=failure.counts_for_health,
                          never_delivered=failure.never_delivered)


def _names_code(body_head: bytes, codes: frozenset[str]) -> bool:
    """Whether ``error.code``/``error.type`` (or top-level ``code``/``type``) is in ``codes``."""
    head = body_head[:BODY_HEAD_BYTES]
    doc = _load_json(head)
    if doc is not None:
        return any(value in codes for value in _code_values(doc))
    # Not JSON (or cut off at the 4 KiB mark): look for `"code": "<value>"` as text.
    text = head.decode("utf-8", errors="replace")
    for match in re.finditer(r'"(?:code|type)"\s*:\s*"([^"\\]{1,100})"', text):
        if match.group(1) in codes:
            return True
    return False


def _says_context_exceeded(body_head: bytes) -> bool:
    if _names_code(body_head, CONTEXT_EXCEEDED_CODES):
        return True
    text = body_head[:BODY_HEAD_BYTES].decode("utf-8", errors="replace")
    return _CONTEXT_EXCEEDED_TEXT.search(text) is not None


def _load_json(head: bytes) -> Any:
    try:
        return json.loads(head)
    except (ValueError, RecursionError):
        return None


def _code_values(doc: Any) -> list[str]:
    # Some providers wrap the error object in a one-element list.
    if isinstance(doc, list) and doc:
        doc = doc[0]
    if not isinstance(doc, dict):
        return []
    holders = [doc]
    if isinstance(doc.get("error"), dict):
        holders.append(doc["error"])
    return [
        holder[name]
        for holder in holders
        for name in ("code", "type")
        if isinstance(holder.get(name), str)
    ]

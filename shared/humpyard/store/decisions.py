"""Decisions as every store backend sees them: validated, flattened rows and page cursors.

Pure, no I/O. ``decision_row`` checks a decision once and pulls out the
fields the store indexes and aggregates; the backends store ``row.body``
(the whole decision as JSON) and return it unchanged.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from humpyard import jsonfast

MAX_PAGE = 1000

FAILURE_OUTCOMES = frozenset({"failed", "stream_broken"})
"""Decision outcomes that count as failures in stats. Every other outcome (``ok``
and the refusals: ``refused``, ``budget_exhausted``, ``forbidden``, ...) does not."""


class AttemptRow(NamedTuple):
    """What stats need of one attempted endpoint call (skipped ones are left out)."""

    target: str | None
    provider: str | None
    failed: bool
    latency_ms: float | None


class DecisionRow(NamedTuple):
    """A decision flattened into its indexed fields plus the full JSON body.

    ``attempts`` is None when the decision has no ``attempts`` list (stats
    then count the decision itself under its target and provider).

    Rows are named tuples: immutable, and made in half the time of a frozen
    dataclass, once per decision on the request path (ADR 0003).
    """

    request_id: str
    ts: float
    route: str | None
    rule: str | None
    outcome: str | None
    key_id: str | None
    status: int | None
    target: str | None
    provider: str | None
    prompt_tokens: int | None
    latency_ms: float | None
    cost_usd: float | None
    has_usage: bool
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    attempts: tuple[AttemptRow, ...] | None
    body: str

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURE_OUTCOMES


_NUMBERS = (int, float)
_EXACT = 2 ** 53


def _num(value: Any) -> float | None:
    if type(value) is float:  # the usual case first
        return value if math.isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, _NUMBERS):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    if type(value) is int and -_EXACT <= value <= _EXACT:  # int(float(value)) == value
        return value
    n = _num(value)
    return None if n is None else int(n)


def _str(value: Any) -> str | None:
    return value if type(value) is str or value is None else str(value)


def _attempts(raw: Any) -> tuple[AttemptRow, ...] | None:
    """Attempted calls from an ``attempts`` list; an attempt failed unless it got a
    status below 400 and no ``failure_class``. Calls cancelled because the client
    left are left out, as skipped ones are: they say nothing about the target."""
    if not isinstance(raw, list):
        return None
    rows = []
    for a in raw:
        if not isinstance(a, Mapping) or a.get("skipped") or a.get("cancelled"):
            continue
        status = _int(a.get("status"))
        failed = a.get("failure_class") is not None or status is None or status >= 400
        rows.append(AttemptRow(target=_str(a.get("target")), provider=_str(a.get("provider")),
                               failed=failed, latency_ms=_num(a.get("latency_ms"))))
    return tuple(rows)


def decision_row(decision: Mapping[str, Any]) -> DecisionRow:
    """Validate ``decision`` and flatten it. Raises ``ValueError`` when it is unusable.

    ``request_id`` must be a non-empty string and ``ts`` a finite number; the
    whole dict must be JSON-serialisable. Indexed fields of the wrong type are
    indexed as missing but still kept, unchanged, in the body.
    """
    rid = decision.get("request_id")
    if not isinstance(rid, str) or not rid:
        raise ValueError("a decision needs a non-empty string request_id")
    ts = _num(decision.get("ts"))
    if ts is None:
        raise ValueError(f"decision {rid}: ts must be a finite number of epoch seconds")
    try:
        body = jsonfast.dumps_text(decision)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"decision {rid} is not JSON-serialisable: {exc}") from exc
    raw_usage = decision.get("usage")
    usage: Mapping[str, Any] = raw_usage if isinstance(raw_usage, Mapping) else {}
    return DecisionRow(
        request_id=rid, ts=ts,
        route=_str(decision.get("route")), rule=_str(decision.get("rule")),
        outcome=_str(decision.get("outcome")), key_id=_str(decision.get("key_id")),
        status=_int(decision.get("status")), target=_str(decision.get("target")),
        provider=_str(decision.get("provider")),
        prompt_tokens=_int(decision.get("prompt_tokens")),
        latency_ms=_num(decision.get("latency_ms")), cost_usd=_num(decision.get("cost_usd")),
        has_usage=isinstance(raw_usage, Mapping),
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=_int(usage.get("cache_read_tokens")),
        cache_write_tokens=_int(usage.get("cache_write_tokens")),
        attempts=_attempts(decision.get("attempts")),
        body=body,
    )


def batch_rows(decisions: Iterable[Mapping[str, Any]]) -> list[DecisionRow]:
    """``decision_row`` of each decision, in order, without repeated request ids
    (the first one wins). Raises ``ValueError`` naming the first unusable one."""
    rows: dict[str, DecisionRow] = {}
    for decision in decisions:
        row = decision_row(decision)
        rows.setdefault(row.request_id, row)
    return list(rows.values())


def page_limit(limit: int) -> int:
    """``limit`` clamped to ``[1, MAX_PAGE]``."""
    return max(1, min(int(limit), MAX_PAGE))


def encode_cursor(ts: float, request_id: str) -> str:
    """An opaque cursor meaning "decisions strictly older than this one"."""
    raw = json.dumps([ts, request_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """Read ``encode_cursor`` output; ``ValueError`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts, rid = json.loads(raw)
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not isinstance(rid, str):
            raise ValueError
        return float(ts), rid
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"invalid cursor {cursor!r}") from exc

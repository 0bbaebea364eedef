"""Provider pacing: route away from an endpoint that is about to refuse.

Upstreams tell their callers how much is left of their rate limits on every
answer: OpenAI and most compatible servers with ``x-ratelimit-remaining-requests``
/ ``-tokens`` and ``x-ratelimit-reset-requests`` / ``-tokens`` (durations such
as ``1s``, ``6m0s``, ``20ms``), Anthropic with ``anthropic-ratelimit-requests-``
/ ``tokens-`` / ``input-tokens-`` / ``output-tokens-remaining`` and ``-reset``
(RFC 3339 times). When one says **0 remaining**, the endpoint is *paced* until
its reset (``retry-after`` when no reset is given, else ``DEFAULT_PACE_SECS``):
the planner removes a paced target where another target of its group is not
paced (``planning/steps.apply_pacing``), as it does with cold ones, and the
decision lists it under ``paced_targets``. Nothing is refused for pacing.

A provider that sends no such headers can be given ``rpm_limit`` / ``tpm_limit``
(``[providers.<name>]``): this process counts the requests sent to it and the
tokens its answers used in fixed clock minutes, and paces the whole provider
(every endpoint) until the minute ends once a count reaches its limit.

``paced(now)`` is what the state snapshot carries: endpoint key
(``provider/model``) or provider name → until when (epoch seconds). Pure data
in, planning stays pure. Per process (each Lambda instance learns on its own:
an instance that has not yet seen the headers finds out from the first answer).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from datetime import datetime

from humpyard.health.retry_after import _DURATION_RE, _duration, _number

DEFAULT_PACE_SECS = 1.0
MAX_PACE_SECS = 3600.0  # a reset further away than this is read as this
WINDOW_SECS = 60.0

_OPENAI = (("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
           ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"))
_ANTHROPIC = tuple((f"anthropic-ratelimit-{kind}-remaining", f"anthropic-ratelimit-{kind}-reset")
                   for kind in ("requests", "tokens", "input-tokens", "output-tokens"))
_NAMES = _OPENAI + _ANTHROPIC


def exhausted_until(headers: Mapping[str, str], now: float) -> float | None:
    """Until when an answer's rate-limit headers say nothing is left (None: something
    is, or they say nothing). ``headers`` have lower-case names."""
    until: float | None = None
    for remaining, reset in _NAMES:
        left = headers.get(remaining)
        if left is None or left.strip() not in ("0", "0.0"):
            continue
        wait = _reset_in(headers.get(reset), now)
        if wait is None:
            wait = _number(headers.get("retry-after"))
        if wait is None:
            wait = DEFAULT_PACE_SECS
        at = now + min(max(wait, 0.0), MAX_PACE_SECS)
        until = at if until is None else max(until, at)
    return until


def _reset_in(value: str | None, now: float) -> float | None:
    """Seconds until a reset given as a duration (``6m0s``), seconds or an RFC 3339 time."""
    if value is None:
        return None
    value = value.strip()
    number = _number(value)
    if number is not None:
        return number
    if value[:1].isdigit() and ("T" in value or "-" in value[1:]):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            return None
        return max(0.0, when.timestamp() - now)
    return _duration(value) if _DURATION_RE.fullmatch(value) else None


class Pacing:
    """Paced endpoints and providers of one process; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}
        self._minutes: dict[str, tuple[float, int, int]] = {}  # provider → start, reqs, tokens

    def observe(self, endpoint: str, headers: Mapping[str, str], now: float) -> None:
        """Read one answer's headers (any status) from ``endpoint`` (``provider/model``)."""
        until = exhausted_until(headers, now)
        if until is None:
            if endpoint in self._until:  # the upstream has room again
                with self._lock:
                    self._until.pop(endpoint, None)
            return
        with self._lock:
            self._until[endpoint] = max(until, self._until.get(endpoint, 0.0))

    def count(self, provider: str, rpm_limit: int | None, tpm_limit: int | None,
              now: float, *, requests: int = 0, tokens: int = 0) -> None:
        """Count ``requests`` sent to / ``tokens`` used at ``provider`` against its own
        ``rpm_limit``/``tpm_limit``; a count at its limit paces the provider."""
        if rpm_limit is None and tpm_limit is None:
            return
        start = math.floor(now / WINDOW_SECS) * WINDOW_SECS
        with self._lock:
            at, reqs, used = self._minutes.get(provider, (start, 0, 0))
            if at != start:
                reqs, used = 0, 0
            reqs += requests
            used += tokens
            self._minutes[provider] = (start, reqs, used)
            if (rpm_limit is not None and reqs >= rpm_limit) or \
                    (tpm_limit is not None and used >= tpm_limit):
                self._until[provider] = start + WINDOW_SECS

    def paced(self, now: float) -> dict[str, float]:
        """Endpoint key or provider → until when, for what is paced at ``now``."""
        if not self._until:
            return {}
        with self._lock:
            gone = [k for k, until in self._until.items() if until <= now]
            for k in gone:
                del self._until[k]
            return dict(self._until)

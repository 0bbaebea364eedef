"""Where breaker states live: the ``HealthState`` contract and its in-memory book.

``HealthBook`` keeps one ``BreakerState`` per endpoint key
(``"provider/model"``, see ``endpoint_key``) in process memory and applies
the pure transitions of ``health.breaker``. A store-backed implementation
(DynamoDB, with conditional writes on ``BreakerState.version``) provides the
same ``HealthState`` protocol, so the executor and planning never know which
one they hold.

Transitions are logged through the ``humpyard.health`` logger: a warning
"endpoint is failing; skipping it for the cooldown" whenever a cooldown
starts or is extended, and "endpoint recovered" when a success closes a
breaker that had opened.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from humpyard.health.breaker import (
    FRESH,
    BreakerState,
    EndpointView,
    HealthSettings,
    record_failure,
    record_success,
    release_probe,
    try_acquire_probe,
    view,
)

logger = logging.getLogger("humpyard.health")


def endpoint_key(provider: str, model: str) -> str:
    """The key an endpoint's health is kept under: ``"provider/model"``."""
    return f"{provider}/{model}"


def log_transition(key: str, old: BreakerState, new: BreakerState, now: float) -> None:
    """Log a trip or longer cooldown, and a recovery; quiet for anything else."""
    if new.open_until > old.open_until:
        cooldown = new.open_until - now
        logger.warning(
            "endpoint is failing; skipping it for the cooldown "
            "endpoint=%s cooldown_secs=%.3f source=%s consecutive_failures=%d",
            key, cooldown, new.cooldown_source, new.consecutive_failures,
            extra={"endpoint": key, "cooldown_secs": cooldown,
                   "cooldown_source": new.cooldown_source},
        )
    elif old.open_until != 0 and new.open_until == 0:
        logger.info("endpoint recovered endpoint=%s", key, extra={"endpoint": key})


class HealthState(Protocol):
    """Endpoint health as the executor and planning use it. Times are epoch seconds.

    ``settings`` are the current ``[health]`` knobs (replaced on a reload).
    ``view`` is ``breaker.view`` of ``get`` under the current settings.
    ``try_acquire_probe`` returns True to exactly one caller per half-open
    endpoint (across every instance sharing the state) and True for a closed
    one; the winner reports back with ``record_success``, ``record_failure``
    or ``release_probe``. ``snapshot`` lists every endpoint with recorded
    state; an endpoint that is absent is healthy.
    """

    settings: HealthSettings

    def get(self, key: str) -> BreakerState: ...

    def view(self, key: str, now: float) -> EndpointView: ...

    def record_failure(
        self, key: str, now: float, retry_after: float | None = None
    ) -> BreakerState: ...

    def record_success(self, key: str, now: float) -> BreakerState: ...

    def try_acquire_probe(self, key: str, now: float) -> bool: ...

    def release_probe(self, key: str, now: float) -> BreakerState: ...

    def snapshot(self, now: float) -> dict[str, EndpointView]: ...


class HealthBook:
    """In-memory ``HealthState`` for one process.

    Safe to share between threads and tasks: each operation is atomic.
    ``settings`` may be replaced on a configuration reload; the states carry
    over.
    """

    def __init__(self, settings: HealthSettings | None = None) -> None:
        self.settings = settings if settings is not None else HealthSettings()
        self._states: dict[str, BreakerState] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> BreakerState:
        """The endpoint's state; a never-seen endpoint is ``BreakerState()``."""
        return self._states.get(key, FRESH)

    def view(self, key: str, now: float) -> EndpointView:
        """The endpoint as ``snapshot`` would show it."""
        return view(self.get(key), self.settings, now)

    def record_failure(
        self, key: str, now: float, retry_after: float | None = None
    ) -> BreakerState:
        """Record a counted failure; ``retry_after`` is a stated time in seconds, unclamped."""
        with self._lock:
            old = self.get(key)
            new = self._store(key, old, record_failure(old, self.settings, now, retry_after))
        log_transition(key, old, new, now)
        return new

    def record_success(self, key: str, now: float) -> BreakerState:
        """Record an answered call; closes the breaker."""
        with self._lock:
            old = self.get(key)
            new = self._store(key, old, record_success(old, self.settings, now))
        log_transition(key, old, new, now)
        return new

    def try_acquire_probe(self, key: str, now: float) -> bool:
        """True for a closed endpoint, and for exactly one caller of a half-open one."""
        with self._lock:
            old = self.get(key)
            won, new = try_acquire_probe(old, self.settings, now)
            self._store(key, old, new)
        return won

    async def acquire_probe(self, key: str, now: float) -> bool:
        """``try_acquire_probe`` for the event loop (in memory: no wait)."""
        return self.try_acquire_probe(key, now)

    def release_probe(self, key: str, now: float) -> BreakerState:
        """Give a won probe back without a verdict."""
        with self._lock:
            old = self.get(key)
            return self._store(key, old, release_probe(old, self.settings, now))

    def snapshot(self, now: float) -> dict[str, EndpointView]:
        """Every endpoint with recorded state, as it looks at ``now``."""
        with self._lock:
            states = dict(self._states)
        return {key: view(state, self.settings, now) for key, state in states.items()}

    def _store(self, key: str, old: BreakerState, new: BreakerState) -> BreakerState:
        if new is not old:
            self._states[key] = new
        return new

"""The endpoint circuit breaker: pure state and pure transitions.

Every function takes a ``BreakerState`` and the time (epoch seconds, so a
state written by one instance means the same on another) and returns the
next state. A transition that changes nothing returns the very same object,
so a caller (or a store doing conditional writes on ``version``) can skip
the write with ``new is old``.

The states, as ``view`` reports them::

    healthy  ──threshold consecutive failures──▶  cooling_down
       ▲      ──a stated retry time (429/503)──▶        │ open_until passes
       │                                                ▼
       └────────────── a success ────────────────── probing
                                                        │ a failure
                     cooling_down (the next doubling) ◀─┘

- A trip cools for ``cooldown_secs * 2**trips`` capped at
  ``max_cooldown_secs``; ``trips`` counts trips since the last success, so
  each failed probe doubles the next cooldown.
- A stated retry time cools at once for exactly that long, clamped to
  ``[1, max_retry_after_secs]`` (not to ``max_cooldown_secs``). It is not a
  trip: ``trips`` and ``consecutive_failures`` are left alone, so it never
  escalates a later streak.
- Cooldowns are monotonic: ``open_until`` only ever grows until a success.
- After ``open_until`` the endpoint is ``probing``: warm for planning, and
  ``try_acquire_probe`` hands exactly one caller a lease of
  ``probe_lease_secs`` to send the probe. Any failure while probing reopens
  the breaker; a success anywhere closes it and resets everything.
- ``failure_threshold = 0`` turns tracking off: no transition changes the
  state and ``view`` always says healthy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

CooldownSource = Literal["failures", "retry_after"]
EndpointStateName = Literal["healthy", "cooling_down", "probing"]
ENDPOINT_STATES: tuple[EndpointStateName, ...] = ("healthy", "cooling_down", "probing")

_COOLDOWN_SOURCES = ("failures", "retry_after")
_MAX_DOUBLINGS = 64  # 2**64 times any sane cooldown is past every cap.


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """``[health]``: the breaker's knobs. All durations are seconds.

    ``probe_lease_secs`` is how long a won probe blocks other probes; it must
    outlast an upstream call, so a probe still running is never doubled, and
    it ends on its own if the prober dies without reporting.
    """

    failure_threshold: int = 3
    cooldown_secs: float = 30.0
    max_cooldown_secs: float = 300.0
    max_retry_after_secs: float = 300.0
    skip_cold_targets: bool = True
    probe_lease_secs: float = 660.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 0:
            raise ValueError("failure_threshold must be >= 0")
        for name in ("cooldown_secs", "max_cooldown_secs", "probe_lease_secs"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0")
        if not (math.isfinite(self.max_retry_after_secs) and self.max_retry_after_secs >= 1):
            raise ValueError("max_retry_after_secs must be a finite number >= 1")

    @property
    def enabled(self) -> bool:
        """Whether health tracking is on (``failure_threshold > 0``)."""
        return self.failure_threshold > 0


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One endpoint's breaker. The zero value is a healthy, never-failed endpoint.

    ``open_until`` is 0 while closed; once set it stays set (in the past,
    meaning half-open) until a success. ``probe_until`` is the deadline of the
    live probe lease, 0 if none; ``probe_owner`` names the process that holds it
    (a worker of ``serve --workers``, whose parent gives it back if the worker
    dies: ``release_owned_probe``), "" when unnamed. ``version`` grows by one on
    every change.
    """

    consecutive_failures: int = 0
    trips: int = 0
    open_until: float = 0.0
    cooldown_source: CooldownSource | None = None
    probe_until: float = 0.0
    version: int = 0
    probe_owner: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; ``from_dict`` reads it back (``probe_owner`` only
        when named: a stored state of one process is as it always was)."""
        out: dict[str, Any] = {
            "consecutive_failures": self.consecutive_failures,
            "trips": self.trips,
            "open_until": self.open_until,
            "cooldown_source": self.cooldown_source,
            "probe_until": self.probe_until,
            "version": self.version,
        }
        if self.probe_owner:
            out["probe_owner"] = self.probe_owner
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BreakerState:
        """Read ``to_dict`` output; missing keys take the healthy defaults.

        Numbers may be any real type (DynamoDB hands back ``Decimal``).
        Unknown keys are ignored. Raises ``ValueError`` for a bad source.
        """
        source = data.get("cooldown_source")
        if source is not None and source not in _COOLDOWN_SOURCES:
            raise ValueError(f"unknown cooldown_source {source!r}")
        return cls(
            consecutive_failures=int(data.get("consecutive_failures", 0)),
            trips=int(data.get("trips", 0)),
            open_until=float(data.get("open_until", 0.0)),
            cooldown_source=source,
            probe_until=float(data.get("probe_until", 0.0)),
            version=int(data.get("version", 0)),
            probe_owner=str(data.get("probe_owner") or ""),
        )


FRESH = BreakerState()
"""A never-seen endpoint's state (frozen, so one instance serves every lookup)."""


@dataclass(frozen=True, slots=True)
class EndpointView:
    """What planning, explain and ``/v1/health`` see of one endpoint at one moment.

    ``cold`` is True exactly while the cooldown runs (``cooling_down``); a
    ``probing`` endpoint is warm. ``reopens_at`` (epoch seconds) is set only
    while cold. ``probe_in_flight`` says another request holds the probe.
    """

    state: EndpointStateName
    cold: bool
    cooldown_remaining_ms: int
    cooldown_source: CooldownSource | None
    consecutive_failures: int
    reopens_at: float | None
    probe_in_flight: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape ``/v1/health`` uses for these fields."""
        return {
            "state": self.state,
            "cold": self.cold,
            "cooldown_remaining_ms": self.cooldown_remaining_ms,
            "cooldown_source": self.cooldown_source,
            "consecutive_failures": self.consecutive_failures,
            "reopens_at": self.reopens_at,
            "probe_in_flight": self.probe_in_flight,
        }


HEALTHY_VIEW = EndpointView("healthy", False, 0, None, 0, None)


def is_half_open(state: BreakerState, now: float) -> bool:
    """Whether the cooldown has ended and no success has closed the breaker yet."""
    return state.open_until != 0 and now >= state.open_until


def trip_cooldown_secs(trips: int, settings: HealthSettings) -> float:
    """The cooldown of a trip made after ``trips`` earlier trips since the last success."""
    doubled = settings.cooldown_secs * 2.0 ** min(trips, _MAX_DOUBLINGS)
    return min(doubled, settings.max_cooldown_secs)


def clamp_retry_after(seconds: float, settings: HealthSettings) -> float:
    """A stated retry time as honoured: clamped to ``[1, max_retry_after_secs]``."""
    if math.isnan(seconds):
        return 1.0
    return min(max(seconds, 1.0), settings.max_retry_after_secs)


def record_failure(
    state: BreakerState,
    settings: HealthSettings,
    now: float,
    retry_after_secs: float | None = None,
) -> BreakerState:
    """Record a failure that counts for health.

    With ``retry_after_secs`` (a stated time, unclamped) the endpoint cools
    for exactly the clamped time, unless it is already cold for longer.
    Without it: closed, the failure counts towards the threshold and trips
    the breaker on reaching it; half-open, it reopens for the next doubling;
    cooling down, it is only counted (a request that started before the trip).
    """
    if not settings.enabled:
        return state
    if retry_after_secs is not None:
        return _cool_for_stated_time(state, settings, now, retry_after_secs)
    failures = state.consecutive_failures + 1
    if is_half_open(state, now) or (state.open_until == 0 and
                                    failures >= settings.failure_threshold):
        deadline = now + trip_cooldown_secs(state.trips, settings)
        return replace(
            state,
            consecutive_failures=failures,
            trips=state.trips + 1,
            open_until=max(state.open_until, deadline),
            cooldown_source="failures",
            probe_until=0.0,
            probe_owner="",
            version=state.version + 1,
        )
    return replace(state, consecutive_failures=failures, version=state.version + 1)


def _cool_for_stated_time(
    state: BreakerState, settings: HealthSettings, now: float, retry_after_secs: float
) -> BreakerState:
    deadline = now + clamp_retry_after(retry_after_secs, settings)
    if deadline <= state.open_until:
        return state  # Already cold for at least that long: monotonic.
    return replace(
        state,
        open_until=deadline,
        cooldown_source="retry_after",
        probe_until=0.0,
        probe_owner="",
        version=state.version + 1,
    )


def record_success(state: BreakerState, settings: HealthSettings, now: float) -> BreakerState:
    """Record an answered call: close the breaker and reset every counter.

    Returns ``state`` itself when it is already closed with nothing to reset.
    """
    if not settings.enabled or (
            state.consecutive_failures == 0 and state.trips == 0 and state.open_until == 0
            and state.cooldown_source is None and state.probe_until == 0):
        return state  # checked field by field: this runs on every answered call
    return BreakerState(version=state.version + 1)


def try_acquire_probe(
    state: BreakerState, settings: HealthSettings, now: float, owner: str = ""
) -> tuple[bool, BreakerState]:
    """Ask to send the one probe of a half-open endpoint.

    Returns ``(True, leased_state)`` to exactly one caller once the cooldown
    has ended, recording a lease until ``now + probe_lease_secs``; others get
    ``(False, state)`` while the lease lives, and the next caller wins after
    it lapses. The lease names ``owner`` (``probe_owner``). A closed endpoint
    (or tracking off) needs no probe: ``(True, state)``, unchanged. A
    cooling-down endpoint: ``(False, state)``. The winner must report the
    outcome with ``record_success``, ``record_failure`` or, for an answer
    that says nothing about the endpoint, ``release_probe``.
    """
    if not settings.enabled or state.open_until == 0:
        return True, state
    if now < state.open_until or now < state.probe_until:
        return False, state
    leased = replace(state, probe_until=now + settings.probe_lease_secs,
                     probe_owner=owner, version=state.version + 1)
    return True, leased


def release_probe(state: BreakerState, settings: HealthSettings, now: float) -> BreakerState:
    """Give the probe lease back without a verdict, so the next request probes.

    For a probe whose answer neither counts for health nor proves the endpoint
    well (a ``request``-class 4xx, a 413, a cancelled call). No-op when no
    lease is held.
    """
    if not settings.enabled or state.probe_until == 0:
        return state
    return replace(state, probe_until=0.0, probe_owner="", version=state.version + 1)


def release_owned_probe(state: BreakerState, owner: str) -> BreakerState | None:
    """``state`` with the probe lease ``owner`` holds given back, or None when it holds
    none. For a process that died holding it (``serve --workers``' parent gives back a
    dead worker's: ``worker_state.give_back``): the next request of any process
    probes, rather than none until the lease lapses (``probe_lease_secs``)."""
    if not owner or state.probe_owner != owner or state.probe_until == 0:
        return None
    return replace(state, probe_until=0.0, probe_owner="", version=state.version + 1)


def view(state: BreakerState, settings: HealthSettings, now: float) -> EndpointView:
    """How the endpoint looks at ``now``."""
    if not settings.enabled or state.open_until == 0:
        if not settings.enabled or state.consecutive_failures == 0:
            return HEALTHY_VIEW
        return replace(HEALTHY_VIEW, consecutive_failures=state.consecutive_failures)
    if now < state.open_until:
        return EndpointView(
            state="cooling_down",
            cold=True,
            cooldown_remaining_ms=max(1, round((state.open_until - now) * 1000)),
            cooldown_source=state.cooldown_source,
            consecutive_failures=state.consecutive_failures,
            reopens_at=state.open_until,
        )
    return EndpointView(
        state="probing",
        cold=False,
        cooldown_remaining_ms=0,
        cooldown_source=state.cooldown_source,
        consecutive_failures=state.consecutive_failures,
        reopens_at=None,
        probe_in_flight=now < state.probe_until,
    )

"""Which endpoints of a target a request calls, and in what order (docs/health.md).

``Admission`` answers the executor's health questions for one endpoint at a
time: the order of a target's endpoints (warm first), whether to call a
cooling or probing endpoint now (exactly one probe per cooldown end), and
what a skipped endpoint is recorded as. It reads the health book and the
clock; it sends nothing. The probe lease is the one health question that may
write to a store (``health/shared.py``): ``admit`` answers ``LEASE`` for it,
and the executor awaits ``lease``, which takes it off the event loop.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NamedTuple

from humpyard.clock import Clock
from humpyard.config.spec import EndpointSpec
from humpyard.planning.types import Plan, PlannedTarget
from humpyard.records import Attempt

LEASE: Final = "lease"
"""``admit``'s answer for an endpoint whose probe may be taken: await ``lease``."""


class Place(NamedTuple):
    """Where the walk stands: target ``ti`` of ``plan``, endpoint ``i`` of ``order``;
    ``last_class`` is the failure class of the last failed call, if any."""

    plan: Plan
    ti: int
    order: list[EndpointSpec]
    i: int
    last_class: str | None


def planned_attempt(target: PlannedTarget, ep: EndpointSpec, *,
                    skipped: str | None = None) -> Attempt:
    """The record of a call to ``ep`` of ``target`` (``skipped``: why it was not made)."""
    return Attempt(target=target.name, provider=ep.provider, model=ep.model,
                   class_=target.class_, skipped=skipped)


class Admission:
    """The executor's health questions, answered from ``health`` at ``clock``'s now."""

    def __init__(self, health: Any, clock: Clock) -> None:
        self.health = health
        self.clock = clock

    def endpoint_order(self, target: PlannedTarget,
                       attempts: list[Attempt]) -> list[EndpointSpec]:
        """The endpoints of ``target`` in the order they are tried: the warm ones (cold
        ones are noted in ``attempts`` as skipped), else the cold ones by reopening."""
        now = self.clock.now()
        warm: list[EndpointSpec] = []
        cold: list[tuple[float, EndpointSpec]] = []
        for ep in target.endpoints:
            view = self.health.view(ep.key, now)
            if view.cold:
                cold.append((view.reopens_at or now, ep))
            else:
                warm.append(ep)
        if warm:
            for _, ep in cold:
                attempts.append(planned_attempt(target, ep, skipped="cold"))
            return warm
        return [ep for _, ep in sorted(cold, key=lambda c: c[0])]

    def admit(self, ep: EndpointSpec, target: PlannedTarget,
              place: Place) -> bool | None | Literal["lease"]:
        """Whether to call ``ep`` now: None to skip it, True when this call is the probe,
        ``LEASE`` when that depends on the probe lease (then ``await lease(...)``).

        The rule (docs/health.md "Probes"): when a cooldown ends, exactly one
        request, the one that wins the probe lease, is sent as the probe. A
        request that loses the race skips the endpoint whenever its plan still
        holds another endpoint or target it could use (``usable_left``); so does
        one that finds the endpoint cooling although planning saw it warm (a
        concurrent request tripped it). Only a request with nothing else left
        calls such an endpoint, because health never denies service; that call
        is not the probe and holds no lease. A target planning kept although
        cold (fail open, or ``skip_cold_targets = false``) is called as planned.
        """
        now = self.clock.now()
        state = self.health.view(ep.key, now).state
        if state == "healthy":
            return False
        if state == "probing":
            return LEASE
        if target.cold or not self.health.settings.skip_cold_targets:
            return False
        return None if self.usable_left(place) else False

    async def lease(self, ep: EndpointSpec, target: PlannedTarget, place: Place) -> bool | None:
        """``admit`` for a probing endpoint: True when this request won the probe lease
        (taken before the probe is sent; off the event loop when the store is shared),
        else None to skip the endpoint, or False when nothing else is left to call."""
        now = self.clock.now()
        acquire = getattr(self.health, "acquire_probe", None)
        won = (await acquire(ep.key, now) if acquire is not None
               else self.health.try_acquire_probe(ep.key, now))
        if won:
            return True
        return None if self.usable_left(place) else False

    def skip_reason(self, ep: EndpointSpec) -> str:
        """What a skipped ``ep`` is recorded as: ``cold`` or ``probe_in_flight``."""
        view = self.health.view(ep.key, self.clock.now())
        return "cold" if view.cold else "probe_in_flight"

    def usable_left(self, place: Place) -> bool:
        """Whether skipping now still leaves an endpoint this request could use: a later
        endpoint of the target, or one of a later target of the same group (members or
        guarded tail) that the last failure may fall through to. Cold endpoints and
        endpoints whose probe another request holds do not count."""
        plan, ti, order, i, last_class = place
        now = self.clock.now()

        def usable(ep: EndpointSpec) -> bool:
            view = self.health.view(ep.key, now)
            return not view.cold and not view.probe_in_flight

        if any(usable(ep) for ep in order[i + 1:]):
            return True
        if last_class is not None and last_class not in plan.fallback_on:
            return False
        group = plan.targets[ti].tail
        return any(usable(ep) for t in plan.targets[ti + 1:] if t.tail == group
                   for ep in t.endpoints)

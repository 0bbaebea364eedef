"""``RequestServices``: the parts of the gateway one request may use, and no others.

The request path (``http/intake.take``, ``flow``, ``recording``, the
Anthropic token count) receives this object, never the ``Gateway``: the
configuration the request starts with, the clock, the state view it plans
on (``state_view.StateView``: the snapshot, and the spend it adds), the
executor and what the Switchyard adapter needs, the allowance (budget
reservations, per-key limits) and provider pacing, and the recording side
(the ledger's writer, the refusal sampler, the metrics, the spans, and
whether a record is written before its answer). Everything else a process
holds (the store itself, the quota poller, the readiness prober, the
background work, the reload machinery, the admin reads) is the control
plane's, reached through the ``Gateway`` by the admin API, the console and
the process wiring.

The object is frozen and slotted: a request reads each part with one slot
lookup, and a configuration reload (``Gateway.swap_config``) or a change of
the wiring (spans, ``record_before_reply``) builds a new one, which the next
request takes; a request keeps the one it started with, as it keeps its
``Config``.

``ExecutorEvents`` are the executor's two hooks (a latency figure, an
event to count), also request-side: the latency book and the metrics.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from humpyard.allowance import Allowance
from humpyard.clock import Clock
from humpyard.config.spec import Config
from humpyard.executor.walk import Executor
from humpyard.health.pacing import Pacing
from humpyard.latency import LatencyBook
from humpyard.ledger.sampling import RateSampler
from humpyard.metrics import GatewayMetrics
from humpyard.planning.policy import RoutingPolicy
from humpyard.state_view import StateView

if TYPE_CHECKING:
    from humpyard.switchyard.adapter import TieredRouter


class Tiered:
    """The Switchyard adapter, built (and Switchyard imported) on first use."""

    __slots__ = ("router",)

    def __init__(self) -> None:
        self.router: TieredRouter | None = None

    def get(self) -> TieredRouter:
        if self.router is None:
            from humpyard.switchyard.adapter import TieredRouter
            self.router = TieredRouter()
        return self.router


@dataclass(frozen=True, slots=True)
class RequestServices:
    """What serving and recording one request use; see the module docstring.

    ``route_rngs`` is the seeded routes' draw sources (the planner adds to it);
    ``provider_tpm``: some provider has a ``tpm_limit`` (then every answer's
    tokens are counted for pacing); ``writer`` is the store's
    ``BackgroundWriter`` or ``InlineWriter``; ``spans`` the OpenTelemetry
    ``telemetry.Spans`` when traces are on.
    """

    config: Config
    clock: Clock
    state: StateView
    executor: Executor
    allowance: Allowance
    pacing: Pacing
    metrics: GatewayMetrics
    writer: Any
    refusals: RateSampler
    rng: random.Random
    route_rngs: dict[str, random.Random]
    policy: RoutingPolicy | None
    provider_tpm: bool
    tiers: Tiered
    record_before_reply: bool = False
    spans: Any = None

    @property
    def tiered(self) -> TieredRouter:
        """The Switchyard adapter (for a plan with tiers)."""
        return self.tiers.get()


class ExecutorEvents:
    """The executor's hooks: each answer's latency into the latency book (and its
    gauge), and the events the executor counts."""

    __slots__ = ("metrics", "latency", "clock")

    def __init__(self, metrics: GatewayMetrics, latency: LatencyBook, clock: Clock) -> None:
        self.metrics = metrics
        self.latency = latency
        self.clock = clock

    def on_latency(self, target: str, ms: float) -> None:
        fig = self.latency.record(target, ms, self.clock.now())
        if fig is not None:
            self.metrics.target_latency.set(fig.ms / 1000, target=target)

    def on_event(self, name: str, **kw: Any) -> None:
        if name == "retry_after_honored":
            self.metrics.retry_after_honored.inc()
        elif name == "routability_resend":
            self.metrics.routability_resends.inc(endpoint=kw["endpoint"])
            self.metrics.routability_resend_seconds.observe(kw["ms"] / 1000)

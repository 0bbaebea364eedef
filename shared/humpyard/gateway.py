"""The live gateway: one object holding the configuration and every stateful piece.

``Gateway`` is built once per process (or Lambda instance) and shared by all
requests. It owns the upstream client, endpoint health, readiness probes,
latency figures, the store and its background writer, and the metrics. The
configuration can be swapped atomically (``swap_config``); a request keeps the
``Config`` object it started with.

Three parts have their own modules: ``services`` (``services.RequestServices``),
the narrow parts a request is given instead of the Gateway (rebuilt when the
configuration is swapped); ``state`` (``state_view.StateView``), the
snapshot the planner plans on and the spend a request adds; and
``background`` (``background.Background``), the work between requests.
For a store that shares breakers and latency (``shares_live``: DynamoDB,
the SQLite file of ``serve --workers N``) the Gateway builds
``SharedHealth`` and ``SharedLatency`` on the store's one ``SharedState``
itself; otherwise both live in this process's memory.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from humpyard.allowance import Allowance
from humpyard.background import LATENCY_FLUSH_SECS, Background
from humpyard.clock import Clock, SystemClock
from humpyard.config.spec import Config
from humpyard.executor.walk import Executor
from humpyard.health.book import HealthBook
from humpyard.health.breaker import ENDPOINT_STATES, HealthSettings
from humpyard.health.pacing import Pacing
from humpyard.health.readiness import ReadinessProber
from humpyard.health.shared import SharedHealth
from humpyard.latency import LatencyBook, LocalLatency
from humpyard.latency_shared import SharedLatency
from humpyard.leases import Leases
from humpyard.ledger.sampling import RateSampler
from humpyard.metrics import GatewayMetrics, Metrics
from humpyard.planning.policy import RoutingPolicy
from humpyard.planning.types import LatencyFigure, Override, StateSnapshot
from humpyard.quota.poller import QuotaPoller
from humpyard.services import ExecutorEvents, RequestServices, Tiered
from humpyard.shared_state import state_for
from humpyard.state_view import StateView
from humpyard.store import Store, open_store
from humpyard.store.reads import ReadPool
from humpyard.store.writer import BackgroundWriter, InlineWriter, writer_for
from humpyard.upstream.client import UpstreamClient

if TYPE_CHECKING:
    import httpx

    from humpyard.upstream.transport import FastTransport

log = logging.getLogger("humpyard.gateway")


def health_settings(config: Config) -> HealthSettings:
    h = config.health
    longest = max((p.timeout_secs for p in config.providers.values()), default=600)
    return HealthSettings(failure_threshold=h.failure_threshold, cooldown_secs=h.cooldown_secs,
                          max_cooldown_secs=h.max_cooldown_secs,
                          max_retry_after_secs=h.max_retry_after_secs,
                          skip_cold_targets=h.skip_cold_targets,
                          probe_lease_secs=longest + 60)


class Gateway:
    """Everything one gateway process shares across requests."""

    def __init__(self, config: Config, store: Store | None = None, *,
                 transport: FastTransport | httpx.AsyncBaseTransport | None = None,
                 clock: Clock | None = None, rng: random.Random | None = None,
                 policy: RoutingPolicy | None = None, health: Any = None,
                 latency: LatencyBook | None = None,
                 writer: BackgroundWriter | InlineWriter | None = None,
                 latency_flush_secs: float = LATENCY_FLUSH_SECS,
                 instance: str | None = None):
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self._config = config
        self.store = store if store is not None else open_store(
            config.ledger.path if config.ledger else None, self.clock)
        self.writer = writer or writer_for(self.store)
        self.health = health or self._shared_health(config, instance or "") or HealthBook(
            health_settings(config))
        self.metrics = GatewayMetrics(Metrics())
        self.client = UpstreamClient(transport, metrics=self.metrics)
        self.client.configure(config)
        self.writer.use_metrics(self.metrics)
        self.readiness = ReadinessProber(self._http, self.clock,
                                         config.router.probe_interval_secs,
                                         config.router.probe_timeout_secs)
        self.latency_book: LatencyBook = (
            latency or self._shared_latency(config, latency_flush_secs) or LocalLatency())
        self.quota = QuotaPoller(config, self.store, self.clock, self._http,
                                 metrics=self.metrics, cost_since=self._provider_cost_since)
        self._forbid_secrets(config)
        self._tiers = Tiered()
        self.reloader: Any = None  # set by the Lambda wiring (aws/config_source.py)
        self.reads = ReadPool()  # the admin API's store calls, off the event loop
        # Budget reservations and per-key limits in flight; across instances through
        # leases of the store (leases.py).
        # ``instance`` names this process in the store (a worker's, given by its parent,
        # which gives back what a dead worker held); random when not given.
        self.allowance = Allowance(Leases(self.store, self.clock, instance=instance,
                                          fallback=self.writer.submit_spend))
        events = ExecutorEvents(self.metrics, self.latency_book, self.clock)
        self.executor = Executor(self.client, self.health, self.readiness, self.clock,
                                 self.rng, on_latency=events.on_latency,
                                 on_event=events.on_event)
        self.pacing = self.executor.pacing = Pacing()  # upstreams' rate-limit headers
        # The planner's snapshot (read before serving), and the work between requests.
        self.state = StateView(lambda: self._config, self.store, self.clock,
                               writer=self.writer, health=self.health,
                               latency=self.latency_book, allowance=self.allowance,
                               pacing=self.pacing)
        self.background = Background(lambda: self._config, self.store, self.clock,
                                     self.state, self.quota, self.latency_book)
        # What a request is given (services.py): never the Gateway itself.
        self.services = RequestServices(
            config=config, clock=self.clock, state=self.state, executor=self.executor,
            allowance=self.allowance, pacing=self.pacing, metrics=self.metrics,
            writer=self.writer, refusals=RateSampler(config.refused_per_minute),
            rng=self.rng, route_rngs={}, policy=policy,
            provider_tpm=_provider_tpm(config), tiers=self._tiers)

    def _shared_health(self, config: Config, owner: str) -> SharedHealth | None:
        """Breakers in the store when it shares them (several processes on one file,
        or DynamoDB): a probe lease is a compare-and-set there, naming ``owner`` (a
        worker's instance: its parent gives the lease back if it dies). Its writes run
        on a thread of their own, never on the event loop (``queued``)."""
        if not getattr(self.store, "shares_live", False):
            return None
        refresh = config.state_refresh_ms / 1000
        return SharedHealth(self.store, health_settings(config), self.clock, refresh,
                            state=state_for(self.store, self.clock), queued=True,
                            owner=owner)

    def _shared_latency(self, config: Config, flush_secs: float) -> SharedLatency | None:
        """Latency figures in the store when it shares them, written every ``flush_secs``
        by the background work (``background.py``; in Lambda before a request's last
        byte, ``aws/flush.py``), never while a request is served."""
        if not getattr(self.store, "shares_live", False):
            return None
        refresh = config.state_refresh_ms / 1000
        return SharedLatency(self.store, self.clock, flush_secs=flush_secs,
                             refresh_secs=max(refresh, flush_secs), auto_flush=False,
                             state=state_for(self.store, self.clock))

    def _http(self) -> httpx.AsyncClient:
        return self.client.http  # built on first use: probes and quota polls only

    @property
    def config(self) -> Config:
        return self._config

    # -- the request's parts (services.py): read here, changed by a new RequestServices ----

    def _serve_with(self, **changes: Any) -> None:
        self.services = replace(self.services, **changes)

    @property
    def record_before_reply(self) -> bool:
        """A buffered answer is recorded after it is sent, unless the process may be
        frozen once its answer is complete (Lambda: see aws/flush.py)."""
        return self.services.record_before_reply

    @record_before_reply.setter
    def record_before_reply(self, value: bool) -> None:
        self._serve_with(record_before_reply=value)

    @property
    def spans(self) -> Any:
        """``telemetry.Spans`` when OpenTelemetry traces are on, else None."""
        return self.services.spans

    @spans.setter
    def spans(self, value: Any) -> None:
        self._serve_with(spans=value)

    @property
    def policy(self) -> RoutingPolicy | None:
        return self.services.policy

    @policy.setter
    def policy(self, value: RoutingPolicy | None) -> None:
        self._serve_with(policy=value)

    @property
    def refusals(self) -> RateSampler:
        return self.services.refusals

    @property
    def route_rngs(self) -> dict[str, random.Random]:
        return self.services.route_rngs

    @property
    def provider_tpm(self) -> bool:
        return self.services.provider_tpm

    def swap_config(self, config: Config) -> None:
        """Serve ``config`` from the next request on; health and latency carry over."""
        old, self._config = self._config, config
        if hasattr(self.health, "settings"):  # HealthBook and SharedHealth
            self.health.settings = health_settings(config)
        self.readiness.interval_secs = config.router.probe_interval_secs
        self.readiness.timeout_secs = config.router.probe_timeout_secs
        self.client.configure(config)
        # A seeded route keeps its draw sequence only while its definition is unchanged.
        route_rngs = {k: v for k, v in self.route_rngs.items()
                      if k in config.routes and config.routes[k] == old.routes.get(k)}
        if self._tiers.router is not None:
            self._tiers.router.forget_routes(set(config.routes))
        self.quota.reload(config)
        refusals = self.refusals
        if config.refused_per_minute != old.refused_per_minute:
            refusals = RateSampler(config.refused_per_minute)
        self._forbid_secrets(config)
        self._serve_with(config=config, route_rngs=route_rngs, refusals=refusals,
                         provider_tpm=_provider_tpm(config))
        self.invalidate()

    def _forbid_secrets(self, config: Config) -> None:
        self.metrics.metrics.forbid_label_values(p.api_key for p in config.providers.values())

    def _provider_cost_since(self, provider: str, since: float) -> float:
        now = self.clock.now()
        for g in self.store.stats("provider", since, now):
            if g["key"] == provider:
                return float(g.get("cost_usd") or 0.0)
        return 0.0

    async def run_background(self, stop: asyncio.Event) -> None:
        """The process's background work (``background.py``) until ``stop`` is set."""
        await self.background.run(stop)

    def expire_overrides(self) -> list[Override]:
        """Record the expiry of every override that has run out. Blocking: off the loop."""
        return self.background.expire_overrides()

    def purge_expired(self) -> int:
        """Delete ledger rows past their retention; returns decisions removed. Blocking."""
        return self.background.purge_expired()

    # -- the state view (state_view.py) ------------------------------------------------

    def invalidate(self) -> None:
        """Make the next snapshot re-read overrides and spend from the store."""
        self.state.invalidate()

    def reload_state(self) -> None:
        """Re-read overrides and spend now. Blocking: call off the loop."""
        self.state.reload()

    def snapshot(self, now: float | None = None) -> StateSnapshot:
        """Health, latency, overrides and spend as the planner sees them now."""
        return self.state.snapshot(now)

    def add_spend(self, key_id: str, period: str, usd: float) -> None:
        """Count spend at once here and in the store off the request path."""
        self.state.add_spend(key_id, period, usd)

    @property
    def tiered(self) -> Any:
        """The Switchyard adapter, built (and Switchyard imported) on first use."""
        return self._tiers.get()

    def refresh_gauges(self) -> None:
        """Point-in-time gauges before metrics are read: overrides, each configured
        endpoint's health state, each budgeted key's spend this period. No store
        read when the shared state is fresh; on AWS none at all, whatever its age
        (the next request's plan refreshes it), unless it was invalidated."""
        with self.state.source.no_reads():
            self._refresh_gauges(self.clock.now())

    def _refresh_gauges(self, now: float) -> None:
        m = self.metrics
        shared = self.state.shared(now)
        by_kind: dict[str, int] = {"disable_target": 0, "drain_provider": 0, "pin_route": 0}
        oldest = 0.0
        for ov in shared.overrides:
            by_kind[ov.kind] = by_kind.get(ov.kind, 0) + 1
            oldest = max(oldest, now - ov.created_at)
        for kind, n in by_kind.items():
            m.overrides_active.set(n, kind=kind)
        m.override_oldest_age.set(oldest)
        config = self._config
        m.endpoint_state.clear()  # endpoints a reload removed leave no series behind
        for _, ep in config.endpoint_keys():
            current = self.health.view(ep.key, now).state
            for state in ENDPOINT_STATES:
                m.endpoint_state.set(1 if state == current else 0, endpoint=ep.key, state=state)
        m.budget_spend_usd.clear()
        for key in config.keys.values():
            if key.budget is not None:
                m.budget_spend_usd.set(round(shared.spend.get(key.id, 0.0), 6), key=key.id)
        self.writer.refresh_gauges()

    @property
    def latency(self) -> Mapping[str, LatencyFigure]:
        """The current latency figure per target."""
        return self.latency_book.figures(self.clock.now())

    async def aclose(self) -> None:
        await asyncio.to_thread(self.allowance.close)  # pending spend, leases given back
        self.reads.close()
        close_health = getattr(self.health, "close", None)
        if close_health is not None:  # SharedHealth: queued breaker writes written
            await asyncio.to_thread(close_health)
        self.writer.close()
        self.state.close()
        await self.client.aclose()
        self.store.close()


def _provider_tpm(config: Config) -> bool:
    return any(p.tpm_limit is not None for p in config.providers.values())

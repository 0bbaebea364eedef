"""The live gateway: one object holding the configuration and every stateful piece.

``Gateway`` is built once per process (or Lambda instance) and shared by all
requests. It owns the upstream client, endpoint health, readiness probes,
latency figures, the store and its background writer, and the metrics. The
configuration can be swapped atomically (``swap_config``); a request keeps the
``Config`` object it started with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from humpyard.allowance import Allowance
from humpyard.clock import Clock, SystemClock
from humpyard.config.spec import Config
from humpyard.executor.walk import Executor
from humpyard.health.book import HealthBook
from humpyard.health.breaker import ENDPOINT_STATES, HealthSettings
from humpyard.health.pacing import Pacing
from humpyard.health.readiness import ReadinessProber
from humpyard.latency import LatencyBook, LocalLatency
from humpyard.leases import Leases
from humpyard.ledger.periods import period_key
from humpyard.ledger.sampling import RateSampler
from humpyard.metrics import GatewayMetrics, Metrics
from humpyard.overrides import mark_stale
from humpyard.planning.policy import RoutingPolicy
from humpyard.planning.types import EndpointHealth, LatencyFigure, Override, StateSnapshot
from humpyard.quota.poller import QuotaPoller
from humpyard.shared_state import SharedState, state_for
from humpyard.store import Store, open_store
from humpyard.store.reads import ReadPool
from humpyard.store.writer import BackgroundWriter, InlineWriter, writer_for
from humpyard.upstream.client import UpstreamClient

if TYPE_CHECKING:
    import httpx

    from humpyard.upstream.transport import FastTransport

log = logging.getLogger("humpyard.gateway")
RETENTION_EVERY_SECS = 3600.0
OVERRIDE_SWEEP_SECS = 30.0  # the longest wait between override-expiry sweeps


def health_settings(config: Config) -> HealthSettings:
    h = config.health
    longest = max((p.timeout_secs for p in config.providers.values()), default=600)
    return HealthSettings(failure_threshold=h.failure_threshold, cooldown_secs=h.cooldown_secs,
                          max_cooldown_secs=h.max_cooldown_secs,
                          max_retry_after_secs=h.max_retry_after_secs,
                          skip_cold_targets=h.skip_cold_targets,
                          probe_lease_secs=longest + 60)


@dataclass
class _Cached:
    taken_at: float
    overrides: tuple[Override, ...]
    spend: dict[str, float]  # key id -> spend in ``periods[key id]``
    periods: dict[str, str] = field(default_factory=dict)


class Gateway:
    """Everything one gateway process shares across requests."""

    def __init__(self, config: Config, store: Store | None = None, *,
                 transport: FastTransport | httpx.AsyncBaseTransport | None = None,
                 clock: Clock | None = None, rng: random.Random | None = None,
                 policy: RoutingPolicy | None = None, health: Any = None,
                 latency: LatencyBook | None = None,
                 writer: BackgroundWriter | InlineWriter | None = None):
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self._config = config
        self.store = store if store is not None else open_store(
            config.ledger.path if config.ledger else None, self.clock)
        self.writer = writer or writer_for(self.store)
        self.health = health or HealthBook(health_settings(config))
        self.metrics = GatewayMetrics(Metrics())
        self.client = UpstreamClient(transport, metrics=self.metrics)
        self.client.configure(config)
        self.writer.use_metrics(self.metrics)
        self.readiness = ReadinessProber(self._http, self.clock,
                                         config.router.probe_interval_secs,
                                         config.router.probe_timeout_secs)
        self.policy = policy
        self.latency_book: LatencyBook = latency or LocalLatency()
        self.route_rngs: dict[str, random.Random] = {}
        self._lock = threading.Lock()
        self._cached: _Cached | None = None
        self._wake_sweep: Callable[[], object] | None = None
        self.quota = QuotaPoller(config, self.store, self.clock, self._http,
                                 metrics=self.metrics, cost_since=self._provider_cost_since)
        self._forbid_secrets(config)
        self._tiered: Any = None
        self.reloader: Any = None  # set by the Lambda wiring (aws/config_source.py)
        # A buffered answer is recorded after it is sent, unless the process may be
        # frozen once its answer is complete (Lambda: see aws/flush.py).
        self.record_before_reply = False
        self.refusals = RateSampler(config.refused_per_minute)
        self.spans: Any = None  # telemetry.Spans when OpenTelemetry traces are on
        self.reads = ReadPool()  # the admin API's store calls, off the event loop
        # A store on the disk is read into memory here, before serving, and re-read in a
        # thread afterwards (``_shared_state``); the memory store is read in place.
        self._refreshing = False
        self._state_off_thread = (self._shared_source() is None
                                  and getattr(self.store, "kind", None) != "memory")
        if self._state_off_thread:
            self._load_state(self.clock.now())
        # Budget reservations and per-key limits in flight; across instances through
        # leases of the store (leases.py).
        self.allowance = Allowance(Leases(self.store, self.clock,
                                          fallback=self.writer.submit_spend))
        self.provider_tpm = _provider_tpm(config)  # some provider has a tpm_limit (pacing)
        self.executor = Executor(self.client, self.health, self.readiness, self.clock,
                                 self.rng, on_latency=self._on_latency, on_event=self._on_event)
        self.pacing = self.executor.pacing = Pacing()  # upstreams' rate-limit headers

    def _http(self) -> httpx.AsyncClient:
        return self.client.http  # built on first use: probes and quota polls only

    @property
    def config(self) -> Config:
        return self._config

    def swap_config(self, config: Config) -> None:
        """Serve ``config`` from the next request on; health and latency carry over."""
        old, self._config = self._config, config
        if hasattr(self.health, "settings"):  # HealthBook and SharedHealth
            self.health.settings = health_settings(config)
        self.readiness.interval_secs = config.router.probe_interval_secs
        self.readiness.timeout_secs = config.router.probe_timeout_secs
        self.client.configure(config)
        # A seeded route keeps its draw sequence only while its definition is unchanged.
        self.route_rngs = {k: v for k, v in self.route_rngs.items()
                           if k in config.routes and config.routes[k] == old.routes.get(k)}
        if self._tiered is not None:
            self._tiered.forget_routes(set(config.routes))
        self.quota.reload(config)
        if config.refused_per_minute != old.refused_per_minute:
            self.refusals = RateSampler(config.refused_per_minute)
        self._forbid_secrets(config)
        self.provider_tpm = _provider_tpm(config)
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
        """Background work of a long-lived process: quota polling, retention, and
        recording override expiries as they happen."""
        jobs = [self._retention(stop), self._sweep_overrides(stop)]
        if self.allowance.leases is not None:  # flush, renew and give back leases
            jobs.append(self.allowance.leases.run(stop))
        if self.quota.providers():
            jobs.append(self.quota.run(stop))
        await asyncio.gather(*jobs)

    def expire_overrides(self) -> list[Override]:
        """Record the expiry of every override that has run out (one audit entry each,
        stamped with its ``expires_at``); returns them. Blocking: call off the loop."""
        if not self.store.has_ledger:
            return []
        expired = self.store.expire_due(self.clock.now())
        for ov in expired:
            log.info("override expired id=%s kind=%s subject=%s", ov.id, ov.kind, ov.subject,
                     extra={"override_id": ov.id, "kind": ov.kind, "subject": ov.subject})
        if expired:
            self.invalidate()
            self.reload_state()
        return expired

    def _next_expiry_in(self) -> float:
        """Seconds until the soonest known override expiry, at most OVERRIDE_SWEEP_SECS."""
        now = self.clock.now()
        upcoming = [o.expires_at - now for o in self._shared_state(now).overrides
                    if o.expires_at > now]
        return max(0.01, min([OVERRIDE_SWEEP_SECS, *upcoming]) + 0.001)

    async def _sweep_overrides(self, stop: asyncio.Event) -> None:
        """Sweep at each known expiry, at least every OVERRIDE_SWEEP_SECS, and again
        whenever the overrides change (``invalidate`` wakes it)."""
        if not self.store.has_ledger:
            return
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        self._wake_sweep = lambda: loop.call_soon_threadsafe(wake.set)
        try:
            while not stop.is_set():
                wake.clear()
                try:
                    await asyncio.to_thread(self.expire_overrides)
                    wait = await asyncio.to_thread(self._next_expiry_in)
                except Exception:  # noqa: BLE001 - the sweep must never stop the gateway
                    log.exception("override expiry sweep failed")
                    wait = OVERRIDE_SWEEP_SECS
                await _first_of(stop, wake, timeout=wait)
        finally:
            self._wake_sweep = None

    def purge_expired(self) -> int:
        """Delete ledger rows older than ``decision_retention_days``; returns decisions removed."""
        ledger = self._config.ledger
        if ledger is None or not self.store.has_ledger:
            return 0
        return int(self.store.purge(self.clock.now() - ledger.decision_retention_days * 86400))

    async def _retention(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.purge_expired)
            except Exception:  # noqa: BLE001 - retention must never stop the gateway
                log.exception("retention purge failed")
            try:
                await asyncio.wait_for(stop.wait(), RETENTION_EVERY_SECS)
            except TimeoutError:
                pass

    # -- state snapshot ---------------------------------------------------

    # The store's one-read view of the shared state (DynamoDB), found on first use.
    _state_source: SharedState | None = None
    _state_source_known = False
    _marked: tuple[tuple[Override, ...], Config, tuple[Override, ...]] | None = None

    def _shared_source(self) -> SharedState | None:
        if not self._state_source_known:
            self._state_source = state_for(self.store, self.clock)
            self._state_source_known = True
        return self._state_source

    def invalidate(self) -> None:
        """Make the next snapshot re-read overrides and spend from the store.

        The spend this process counted is kept until the store has it (see
        ``_shared_state``), so a reload never forgets spend.
        """
        cached = self._cached
        if cached is not None:
            cached.taken_at = float("-inf")
        source = self._shared_source()
        if source is not None:
            source.invalidate()
        wake = self._wake_sweep
        if wake is not None:
            try:
                wake()
            except RuntimeError:  # the sweeping loop has closed
                pass

    def _budget_periods(self, now: float) -> dict[str, str]:
        return {k.id: period_key(k.budget.period, now)
                for k in self._config.keys.values() if k.budget}

    def _shared_state(self, now: float) -> _Cached:
        source = self._shared_source()
        if source is not None:
            return self._from_source(source, now)
        cached = self._cached
        refresh = self._config.state_refresh_ms / 1000
        if cached is not None and now - cached.taken_at < refresh:
            return cached
        if cached is None or not self._state_off_thread:
            return self._load_state(now)
        # A store on the disk (SQLite): the request path never reads it. What this
        # process writes (spend, overrides) is in memory already; what others may
        # write to the file is re-read in a thread while the last state is served.
        self._refresh_soon()
        periods = self._budget_periods(now)
        if periods == cached.periods:
            return cached
        # A budget period turned (or a reload changed the keys): what was counted for
        # another period does not count for this one.
        return _Cached(taken_at=cached.taken_at, overrides=cached.overrides,
                       spend={k: v for k, v in cached.spend.items()
                              if cached.periods.get(k) == periods.get(k)},
                       periods=periods)

    def _refresh_soon(self) -> None:
        """Re-read overrides and spend in a thread of its own, one at a time."""
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True

        def refresh() -> None:
            try:
                self._load_state(self.clock.now())
            except Exception:  # noqa: BLE001 - _load_state logs its own failures
                log.exception("shared state refresh failed")
            finally:
                self._refreshing = False

        threading.Thread(target=refresh, name="humpyard-state-refresh", daemon=True).start()

    def reload_state(self) -> None:
        """Re-read overrides and spend from the store now. Blocking: call off the loop
        (the override handlers do, so that the next request sees their change)."""
        if self._shared_source() is None:
            self._load_state(self.clock.now())

    def _load_state(self, now: float) -> _Cached:
        """Read overrides and spend from the store and make them the cached state."""
        overrides: tuple[Override, ...] = ()
        periods = self._budget_periods(now)
        try:
            if self.store.has_ledger:
                overrides = mark_stale(self.store.list_overrides(now), self._config)
            # Every store keeps spend, the memory store of a gateway without a [ledger] too.
            spend = dict(self.store.spend_for(periods)) if periods else {}
        except Exception:  # noqa: BLE001 - a store outage must not stop traffic
            # Serve on what was last read (retried after one refresh interval).
            log.exception("shared state could not be read; serving on the last snapshot")
            with self._lock:
                cached = self._cached
                if cached is None:
                    cached = _Cached(taken_at=now, overrides=(), spend={}, periods=periods)
                else:
                    cached = _Cached(taken_at=now, overrides=cached.overrides,
                                     spend=cached.spend, periods=cached.periods)
                self._cached = cached
            return cached
        with self._lock:
            cached = self._cached
            if cached is not None:
                # Spend only grows within a period, and what this process counted may
                # not be written yet (the background writer): keep the larger of the two.
                for key_id, period in periods.items():
                    if cached.periods.get(key_id) == period and key_id in cached.spend:
                        spend[key_id] = max(spend.get(key_id, 0.0), cached.spend[key_id])
            cached = _Cached(taken_at=now, overrides=overrides, spend=spend, periods=periods)
            self._cached = cached
        return cached

    def _from_source(self, source: SharedState, now: float) -> _Cached:
        """Overrides and spend from the instance's shared view (one read for everything
        shared; ``humpyard.shared_state`` says when it is refreshed)."""
        source.refresh_secs = self._config.state_refresh_ms / 1000
        periods = self._budget_periods(now)
        view = source.current(spend=periods, ahead=True)
        marked = self._marked
        if marked is None or marked[0] is not view.overrides or marked[1] is not self._config:
            marked = (view.overrides, self._config, mark_stale(view.overrides, self._config))
            self._marked = marked
        active = tuple(o for o in marked[2] if o.expires_at > now)
        return _Cached(taken_at=now, overrides=active, spend=source.spend(view, periods),
                       periods=periods)

    def snapshot(self, now: float | None = None) -> StateSnapshot:
        """Health, latency, overrides and spend as the planner sees them now."""
        now = self.clock.now() if now is None else now
        shared = self._shared_state(now)
        health = {
            key: EndpointHealth(state=v.state, cold=v.cold, reopens_at=v.reopens_at or 0.0,
                                consecutive_failures=v.consecutive_failures,
                                cooldown_remaining_ms=v.cooldown_remaining_ms,
                                cooldown_source=v.cooldown_source)
            for key, v in self.health.snapshot(now).items()
        }
        return StateSnapshot(health=health, latency=self.latency_book.figures(now),
                             overrides=shared.overrides, spend_usd=shared.spend, taken_at=now,
                             reserved_usd=self.allowance.reserved(),
                             paced=self.pacing.paced(now))

    def add_spend(self, key_id: str, period: str, usd: float) -> None:
        """Count spend at once locally and in the store off the request path.

        The local count is for ``period``; spend of another period (the day
        turned) is left to the store and read back at the next refresh.
        """
        source = self._shared_source()
        if source is not None:
            source.note_spend(key_id, period, usd)
        with self._lock:
            cached = self._cached
            if cached is not None and cached.periods.get(key_id, period) == period:
                cached.spend[key_id] = cached.spend.get(key_id, 0.0) + usd
                cached.periods.setdefault(key_id, period)
        if not self.allowance.count_spend(key_id, period, usd):  # else: with the lease
            self.writer.submit_spend(key_id, period, usd)

    @property
    def tiered(self) -> Any:
        """The Switchyard adapter, built (and Switchyard imported) on first use."""
        if self._tiered is None:
            from humpyard.switchyard.adapter import TieredRouter
            self._tiered = TieredRouter()
        return self._tiered

    def refresh_gauges(self) -> None:
        """Point-in-time gauges before metrics are read: overrides, each configured
        endpoint's health state, each budgeted key's spend this period. No store
        read when the shared state is fresh; on AWS none at all, whatever its age
        (the next request's plan refreshes it), unless it was invalidated."""
        source = self._shared_source()
        with source.no_reads() if source is not None else contextlib.nullcontext():
            self._refresh_gauges(self.clock.now())

    def _refresh_gauges(self, now: float) -> None:
        m = self.metrics
        shared = self._shared_state(now)
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

    # -- hooks from the executor -------------------------------------------

    @property
    def latency(self) -> Mapping[str, LatencyFigure]:
        """The current latency figure per target."""
        return self.latency_book.figures(self.clock.now())

    def _on_latency(self, target: str, ms: float) -> None:
        fig = self.latency_book.record(target, ms, self.clock.now())
        if fig is not None:
            self.metrics.target_latency.set(fig.ms / 1000, target=target)

    def _on_event(self, name: str, **kw: Any) -> None:
        if name == "retry_after_honored":
            self.metrics.retry_after_honored.inc()
        elif name == "routability_resend":
            self.metrics.routability_resends.inc(endpoint=kw["endpoint"])
            self.metrics.routability_resend_seconds.observe(kw["ms"] / 1000)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.allowance.close)  # pending spend, leases given back
        self.reads.close()
        self.writer.close()
        await self.client.aclose()
        self.store.close()


def _provider_tpm(config: Config) -> bool:
    return any(p.tpm_limit is not None for p in config.providers.values())


async def _first_of(*events: asyncio.Event, timeout: float) -> None:
    """Wait until any of ``events`` is set, or ``timeout`` seconds pass."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

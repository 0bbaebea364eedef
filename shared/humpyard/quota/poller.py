"""Polling provider quota sources off the request path.

``QuotaPoller.poll_once`` reads every provider that names a ``quota_source``,
concurrently, each bounded by a timeout, and writes one snapshot per provider
to the store (see ``humpyard.quota.view`` for its shape). It never raises and
never delays a request: a slow, failing or nonsensical answer leaves the last
good windows in place to age until they count as stale.

History: after a good read, a sample is appended per window whenever its
percent, status or reset time differs from the window's last stored sample,
or when that sample is at least ``HISTORY_EVERY_SECS`` (15 minutes) old.
``cost_usd_since_previous`` is ``cost_since(provider, last_sample_ts)``, and
0.0 for a window's first sample.

The provider key is only handed to the source; it is scrubbed from every
reason, snapshot, view and log line this module produces. Polls go through the
gateway's connection pool and follow the provider's proxy and TLS settings
(docs/upstream.md).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from humpyard.clock import Clock
from humpyard.config.spec import Config, ProviderSpec
from humpyard.metrics.gateway_metrics import GatewayMetrics
from humpyard.quota import SOURCES
from humpyard.quota.base import QuotaReading, QuotaSource, Window
from humpyard.quota.view import empty_snapshot, iso, next_snapshot, provider_view, scrub

if TYPE_CHECKING:
    import httpx

HISTORY_EVERY_SECS = 15 * 60.0
DEFAULT_TIMEOUT_SECS = 10.0

log = logging.getLogger("humpyard.quota")

CostSince = Callable[[str, float], float]


class QuotaStoreLike(Protocol):
    """The part of the store the poller uses."""

    def put_quota_snapshot(self, provider: str, snapshot: dict[str, Any]) -> None: ...

    def get_quota_snapshots(self) -> dict[str, dict[str, Any]]: ...

    def append_quota_history(self, sample: dict[str, Any]) -> None: ...

    def list_quota_history(self, provider: str | None = None, since: float | None = None,
                           limit: int = 500) -> list[dict[str, Any]]: ...

    def last_quota_sample(self, provider: str, window: str) -> dict[str, Any] | None: ...


def _no_cost(provider: str, since_ts: float) -> float:
    return 0.0


class QuotaPoller:
    """Polls quota sources into the store and shapes ``GET /v1/quota``.

    ``timeout`` bounds each provider's read (default: the smaller of 10 s and
    ``quota_poll_secs``). ``sources`` maps ``quota_source`` names to sources
    (default ``humpyard.quota.SOURCES``). With ``metrics``,
    ``humpyard_quota_percent{provider,window}`` has a series for each window of
    fresh data only. ``client`` is an ``httpx.AsyncClient`` or a function returning
    one, called when a poll needs it (the gateway builds its client lazily).

    ``follows``: another process on the same store polls (``serve --workers N``:
    worker 0 polls for all of them); ``run`` then only reads what it stored each
    round, for this process's gauges, and a reload leaves the snapshots to it.
    """

    def __init__(self, config: Config, store: QuotaStoreLike, clock: Clock,
                 client: httpx.AsyncClient | Callable[[], httpx.AsyncClient],
                 metrics: GatewayMetrics | None = None, *,
                 cost_since: CostSince | None = None,
                 sources: Mapping[str, QuotaSource] | None = None,
                 timeout: float | None = None) -> None:
        self._config = config
        self._store = store
        self._clock = clock
        self._client = client
        self._metrics = metrics
        self._cost_since = cost_since or _no_cost
        self._sources = SOURCES if sources is None else sources
        self._timeout = timeout
        self._written: dict[str, dict[str, Any]] = {}  # what this poller last stored
        self._last_error: dict[str, str | None] = {}
        self._gauged: set[tuple[str, str]] = set()
        self.follows = False

    def _http(self) -> httpx.AsyncClient:
        c = self._client
        return c() if callable(c) else c

    @property
    def config(self) -> Config:
        """The configuration in use (the latest ``reload``)."""
        return self._config

    def providers(self, config: Config | None = None) -> list[ProviderSpec]:
        """The providers that name a quota source, in configuration order."""
        cfg = config or self._config
        return [p for p in cfg.providers.values() if p.quota_source]

    def _secrets(self, config: Config) -> list[str]:
        return [p.api_key for p in config.providers.values() if p.api_key]

    def timeout(self) -> float:
        """Seconds each provider's read may take."""
        if self._timeout is not None:
            return self._timeout
        return min(DEFAULT_TIMEOUT_SECS, self._config.quota_poll_secs)

    # -- polling --------------------------------------------------------------

    async def poll_once(self) -> None:
        """Read every quota provider once, concurrently, and store the results. Never raises."""
        config = self._config
        providers = self.providers(config)
        if not providers:
            return
        try:
            # Every store call of a poll runs in a worker thread: never on the event loop.
            stored: dict[str, dict[str, Any]] = await asyncio.to_thread(
                self._store.get_quota_snapshots)
        except Exception as exc:
            log.warning("quota: could not read snapshots (%s); using this poller's own",
                        type(exc).__name__)
            stored = dict(self._written)
        results = await asyncio.gather(
            *(self._poll_provider(config, p, stored.get(p.name)) for p in providers),
            return_exceptions=True)
        snaps = {p.name: r for p, r in zip(providers, results, strict=True)
                 if isinstance(r, dict)}
        try:
            self._update_gauges(config, snaps)
        except Exception as exc:
            log.warning("quota: could not update metrics (%s)", type(exc).__name__)

    async def follow_once(self) -> None:
        """This process's gauges from the snapshots the polling process stored
        (``follows``). Never raises."""
        config = self._config
        if not self.providers(config):
            return
        try:
            stored = await asyncio.to_thread(self._store.get_quota_snapshots)
            self._update_gauges(config, stored)
        except Exception as exc:
            log.warning("quota: could not read snapshots (%s)", type(exc).__name__)

    async def _poll_provider(self, config: Config, provider: ProviderSpec,
                             previous: dict[str, Any] | None) -> dict[str, Any] | None:
        """Read, store and sample one provider; the snapshot written, or None."""
        secrets = self._secrets(config)
        try:
            reading = await self._read(provider)
            now = self._clock.now()
            snap = scrub(next_snapshot(provider, previous, reading, now), secrets)
            self._log_outcome(provider, snap.get("error"))
            await asyncio.to_thread(self._store_reading, provider, snap, reading, now, secrets)
            return snap
        except Exception as exc:
            log.warning("quota: polling provider=%s failed: %s", provider.name,
                        scrub(f"{type(exc).__name__}: {exc}", secrets))
            return None

    def _store_reading(self, provider: ProviderSpec, snap: dict[str, Any],
                       reading: QuotaReading, now: float, secrets: list[str]) -> None:
        """Write one provider's snapshot and history sample (blocking: in a thread)."""
        self._store.put_quota_snapshot(provider.name, snap)
        self._written[provider.name] = snap
        if reading.ok:
            self._sample_history(provider, reading.windows, now, secrets)

    async def _read(self, provider: ProviderSpec) -> QuotaReading:
        source = self._sources.get(provider.quota_source or "")
        if source is None:
            return QuotaReading.failed(f"unknown quota source {provider.quota_source!r}")
        timeout = self.timeout()
        try:
            # The source bounds itself; this is the backstop for one that does not.
            return await asyncio.wait_for(source.fetch(self._http(), provider, timeout),
                                          timeout + 1.0)
        except TimeoutError:
            return QuotaReading.failed(f"no answer within {timeout:g}s")
        except Exception as exc:
            return QuotaReading.failed(f"the quota source failed: {type(exc).__name__}")

    def _log_outcome(self, provider: ProviderSpec, error: str | None) -> None:
        before = self._last_error.get(provider.name, "")
        self._last_error[provider.name] = error
        if error is None:
            if before:
                log.info("quota: provider=%s reads again", provider.name)
            log.debug("quota: polled provider=%s", provider.name)
        elif error != before:
            log.warning("quota: provider=%s source=%s not read: %s", provider.name,
                        provider.quota_source, error)
        else:
            log.debug("quota: provider=%s still not read: %s", provider.name, error)

    def _sample_history(self, provider: ProviderSpec, windows: Mapping[str, Window],
                        now: float, secrets: list[str]) -> None:
        for name, w in windows.items():
            last = self._store.last_quota_sample(provider.name, name)
            if not sample_due(last, w, now):
                continue
            last_ts = last.get("ts") if last else None
            cost = self._cost(provider.name, last_ts, secrets) if last_ts is not None else 0.0
            self._store.append_quota_history(scrub({
                "provider": provider.name, "window": name, "ts": now,
                "percent": w.percent, "status": w.status, "resets_at": w.resets_at,
                "cost_usd_since_previous": cost,
            }, secrets))

    def _cost(self, provider: str, since_ts: float, secrets: list[str]) -> float:
        try:
            cost = float(self._cost_since(provider, since_ts))
        except Exception as exc:
            log.warning("quota: cost since %s for provider=%s failed: %s", iso(since_ts),
                        provider, scrub(f"{type(exc).__name__}: {exc}", secrets))
            return 0.0
        return cost if math.isfinite(cost) and cost >= 0 else 0.0

    def _update_gauges(self, config: Config, snaps: Mapping[str, dict[str, Any]]) -> None:
        if self._metrics is None:
            return
        gauge = self._metrics.quota_percent
        stale = config.quota_stale_secs
        now = self._clock.now()
        live: set[tuple[str, str]] = set()
        for p in self.providers(config):
            entry = provider_view(p, snaps.get(p.name), now, stale)
            if entry["state"] != "fresh":
                continue
            for name, w in entry["windows"].items():
                gauge.set(w["percent"], provider=p.name, window=name)
                live.add((p.name, name))
        for provider, window in self._gauged - live:
            gauge.remove(provider=provider, window=window)
        self._gauged = live

    async def run(self, stop_event: asyncio.Event) -> None:
        """Poll, then wait ``quota_poll_secs`` (read afresh each round) on the clock,
        until ``stop_event`` is set. Cancelling the task also stops it."""
        while not stop_event.is_set():
            await (self.follow_once() if self.follows else self.poll_once())
            if stop_event.is_set():
                return
            sleeper = asyncio.ensure_future(self._clock.sleep(self._config.quota_poll_secs))
            stopper = asyncio.ensure_future(stop_event.wait())
            try:
                _, pending = await asyncio.wait({sleeper, stopper},
                                                return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                stopper.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # -- reading --------------------------------------------------------------

    def view(self, now: float | None = None) -> dict[str, Any]:
        """``GET /v1/quota``: ``{"providers": [entry, ...]}`` in configuration order.

        Each entry is ``{"provider", "source", "windows": {name: {"percent",
        "status", "resets_at" (ISO-8601 or None), "age_secs"}}, "state":
        "fresh"|"stale"|"unknown", "reason"}``; see ``view.provider_view``.
        Reads the store, so every instance shows what the poller wrote.
        """
        now = self._clock.now() if now is None else now
        config = self._config
        try:
            stored: dict[str, dict[str, Any]] | None = self._store.get_quota_snapshots()
            missing = "never polled"
        except Exception as exc:
            log.warning("quota: could not read snapshots (%s)", type(exc).__name__)
            stored, missing = None, "the quota store could not be read"
        entries = [provider_view(p, (stored or {}).get(p.name), now,
                                 config.quota_stale_secs, missing)
                   for p in self.providers(config)]
        return scrub({"providers": entries}, self._secrets(config))

    def history(self, provider: str | None = None, since: float | None = None,
                limit: int = 500) -> dict[str, Any]:
        """``GET /v1/quota/history``: ``{"samples": [...]}`` newest first, as stored
        except ``resets_at``, which is ISO-8601 here as in ``view``."""
        rows = self._store.list_quota_history(provider=provider, since=since, limit=limit)
        samples = [{**r, "resets_at": iso(r.get("resets_at"))} for r in rows]
        return scrub({"samples": samples}, self._secrets(self._config))

    # -- configuration ----------------------------------------------------------

    def reload(self, new_config: Config) -> None:
        """Swap the configuration. A provider keeps its snapshot while its
        ``base_url`` and ``quota_source`` are unchanged; otherwise the snapshot is
        dropped (replaced by a never-polled one) and its metrics series removed."""
        old, self._config = self._config, new_config
        for p in self.providers(old):
            q = new_config.providers.get(p.name)
            if q is not None and (q.base_url, q.quota_source) == (p.base_url, p.quota_source):
                continue
            self._written.pop(p.name, None)
            self._last_error.pop(p.name, None)
            for key in [k for k in self._gauged if k[0] == p.name]:
                self._gauged.discard(key)
                if self._metrics is not None:
                    self._metrics.quota_percent.remove(provider=key[0], window=key[1])
            if q is not None and q.quota_source and not self.follows:
                try:
                    self._store.put_quota_snapshot(p.name, empty_snapshot(q))
                except Exception as exc:
                    log.warning("quota: could not reset the snapshot of provider=%s (%s)",
                                p.name, type(exc).__name__)


def sample_due(last: dict[str, Any] | None, window: Window, now: float) -> bool:
    """Whether a window's reading should be stored as a history sample."""
    if last is None:
        return True
    if (last.get("percent") != window.percent or last.get("status") != window.status
            or last.get("resets_at") != window.resets_at):
        return True
    ts = last.get("ts")
    return not isinstance(ts, int | float) or now - ts >= HISTORY_EVERY_SECS

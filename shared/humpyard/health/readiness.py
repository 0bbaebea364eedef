"""Runtime readiness: is a provider's serve up right now? (docs/health.md, "Readiness")

A provider with a ``health_path`` is asked ``GET <origin><health_path>``
before it is used, where the origin is the scheme, host and port of its
``base_url`` (``http://h:8000/v1`` + ``/health`` → ``http://h:8000/health``).
A 2xx within ``timeout_secs`` means ready; any other status (redirects are
not followed), a timeout or a transport error means not ready. A provider
without a ``health_path`` is always ready and is never asked.

Answers are cached per provider on the clock's monotonic time: a positive
one for ``interval_secs``, a negative one for ``min(interval_secs, 1)`` so a
stopped serve is readmitted within a second of coming back, yet probed at
most once a second while it is down. Concurrent callers for one provider
wait for the same probe, so there is never more than one probe in flight,
nor more than one per cache window, per provider. A cached answer is
dropped when the provider's probe URL changes (a reload).

Readiness only observes: an unready endpoint is skipped without an attempt
and without touching its breaker; the caller decides that. Probes go through
the gateway's own connection pool, so they follow the same proxy and TLS
settings as the provider's calls (docs/upstream.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from humpyard.clock import Clock

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("humpyard.health")

ReadinessStatus = Literal["ready", "not_ready", "unknown", "not_probed"]

NEGATIVE_CACHE_SECS = 1.0


@dataclass(frozen=True, slots=True)
class _Answer:
    url: str
    ready: bool
    at: float  # monotonic time of the answer
    expires: float  # monotonic time after which the answer is re-probed


def probe_url(base_url: str, health_path: str) -> str:
    """``health_path`` resolved against ``base_url``'s origin (path and query dropped).

    The path is always taken from the origin's root, with or without a leading ``/``.
    """
    import httpx  # only providers with a health_path get here

    # One leading slash exactly: "//host/x" would otherwise name another host.
    return str(httpx.URL(base_url).join("/" + health_path.lstrip("/")))


class ReadinessProber:
    """Cached, bounded readiness probes over one shared ``httpx.AsyncClient``.

    ``client`` returns the gateway's httpx client (built on the first probe, so
    a gateway whose providers have no health path never imports httpx; its
    transport is the test seam); no
    credentials or provider headers are sent to the health path.
    """

    def __init__(
        self,
        client: Callable[[], httpx.AsyncClient],
        clock: Clock,
        interval_secs: float = 5.0,
        timeout_secs: float = 2.0,
    ) -> None:
        self._client = client
        self._clock = clock
        self.interval_secs = interval_secs
        self.timeout_secs = timeout_secs
        self._answers: dict[str, _Answer] = {}
        self._no_path: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}

    async def is_ready(self, provider_name: str, base_url: str, health_path: str | None) -> bool:
        """Whether the provider can take a request now; probes only when the cache is stale.

        Never raises for a network failure: that is a not-ready answer.
        """
        if health_path is None:
            self._no_path.add(provider_name)
            return True
        self._no_path.discard(provider_name)
        url = probe_url(base_url, health_path)
        cached = self._fresh(provider_name, url)
        if cached is not None:
            return cached.ready
        lock = self._locks.setdefault(provider_name, asyncio.Lock())
        async with lock:
            # Whoever held the lock may have just probed: its answer serves us too.
            cached = self._fresh(provider_name, url)
            if cached is not None:
                return cached.ready
            ready = await self._probe(provider_name, url)
            self._remember(provider_name, url, ready)
            return ready

    def status(self, provider_name: str) -> ReadinessStatus:
        """Readiness for ``/v1/health``.

        ``not_probed`` once the provider was seen without a ``health_path``;
        ``ready``/``not_ready`` for an answer at most ``interval_secs`` old;
        otherwise ``unknown`` (never probed, or the last answer is older).
        """
        if provider_name in self._no_path:
            return "not_probed"
        answer = self._answers.get(provider_name)
        if answer is None or self._clock.monotonic() - answer.at > self.interval_secs:
            return "unknown"
        return "ready" if answer.ready else "not_ready"

    def _fresh(self, provider_name: str, url: str) -> _Answer | None:
        answer = self._answers.get(provider_name)
        if answer is None or answer.url != url or self._clock.monotonic() >= answer.expires:
            return None
        return answer

    def _remember(self, provider_name: str, url: str, ready: bool) -> None:
        now = self._clock.monotonic()
        ttl = self.interval_secs if ready else min(self.interval_secs, NEGATIVE_CACHE_SECS)
        previous = self._answers.get(provider_name)
        self._answers[provider_name] = _Answer(url=url, ready=ready, at=now, expires=now + ttl)
        if previous is not None and previous.ready != ready:
            logger.info("provider readiness changed provider=%s url=%s ready=%s",
                        provider_name, url, ready,
                        extra={"provider": provider_name, "ready": ready})

    async def _probe(self, provider_name: str, url: str) -> bool:
        import httpx

        try:
            async with asyncio.timeout(self.timeout_secs):
                async with self._client().stream(
                    "GET", url, timeout=self.timeout_secs, follow_redirects=False
                ) as response:
                    status = response.status_code
        except (httpx.HTTPError, httpx.InvalidURL, TimeoutError, OSError) as exc:
            logger.debug("readiness probe failed provider=%s url=%s cause=%s",
                         provider_name, url, type(exc).__name__)
            return False
        if not 200 <= status < 300:
            logger.debug("readiness probe answered provider=%s url=%s status=%d",
                         provider_name, url, status)
            return False
        return True

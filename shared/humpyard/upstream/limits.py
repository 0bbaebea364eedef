"""How many upstream calls may be in flight: per provider and for the whole process.

LLM answers last seconds to minutes, so a gateway runs out of in-flight calls
long before it runs out of requests per second. A call holds a slot from before
it connects until its body is read to the end or closed. ``Slots.acquire`` takes
the provider's slot first (``max_concurrent`` on the provider; none means no
per-provider limit), then one of the process's (``[router] max_concurrent``);
waiting for either is bounded by ``[router] slot_wait_secs``, after which it
raises ``SlotTimeout`` naming the limit (the executor fails over, or answers
503). Waiters are served first come, first served. The counts are metrics:
``humpyard_upstream_in_flight{provider}``, ``humpyard_upstream_waiting{provider}``
and ``humpyard_upstream_slot_timeouts_total{provider}``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from humpyard.upstream.errors import SlotTimeout

DEFAULT_MAX_CONCURRENT = 10_000
DEFAULT_SLOT_WAIT_SECS = 10.0


class _Gate:
    """A resizable counting semaphore with a FIFO of waiters."""

    __slots__ = ("limit", "in_use", "waiters")

    def __init__(self, limit: int | None):
        self.limit = limit
        self.in_use = 0
        self.waiters: deque[asyncio.Future[bool]] = deque()

    def try_take(self) -> bool:
        if (self.limit is None or self.in_use < self.limit) and not self.waiters:
            self.in_use += 1
            return True
        return False

    async def take(self, deadline: float) -> bool:
        """Wait for a slot until the loop time ``deadline``; False if none came."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self.waiters.append(fut)
        timer = loop.call_at(deadline, _settle, fut, False)
        try:
            return await fut  # True: ``give`` counted the slot for this waiter
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.result():
                self.give()  # handed a slot while being cancelled: pass it on
            raise
        finally:
            timer.cancel()
            if fut in self.waiters:
                self.waiters.remove(fut)

    def give(self) -> None:
        self.in_use -= 1
        self.wake()

    def wake(self) -> None:
        while self.waiters and (self.limit is None or self.in_use < self.limit):
            fut = self.waiters.popleft()
            if not fut.done():
                self.in_use += 1
                fut.set_result(True)


def _settle(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


class Slots:
    """Concurrency limits for upstream calls; see the module docstring.

    ``metrics`` (a ``GatewayMetrics``, optional) gets the in-flight and waiting
    gauges and the timeout counter.
    """

    def __init__(self, max_concurrent: int = DEFAULT_MAX_CONCURRENT,
                 slot_wait_secs: float = DEFAULT_SLOT_WAIT_SECS, metrics: Any = None):
        self._all = _Gate(max_concurrent)
        self.wait_secs = slot_wait_secs
        self._providers: dict[str, _Gate] = {}
        self._metrics = metrics

    def configure(self, max_concurrent: int, slot_wait_secs: float) -> None:
        """New limits (a reload); calls in flight keep their slots."""
        self._all.limit = max_concurrent
        self.wait_secs = slot_wait_secs
        self._all.wake()

    def in_flight(self, provider: str) -> int:
        """Calls to ``provider`` holding a slot now."""
        gate = self._providers.get(provider)
        return gate.in_use if gate is not None else 0

    async def acquire(self, provider: str, limit: int | None) -> Callable[[], None]:
        """Take a slot for a call to ``provider`` (at most ``limit`` at once); returns the
        function that gives it back (call it exactly once). Raises ``SlotTimeout``."""
        gate = self._providers.get(provider)
        if gate is None:
            gate = self._providers[provider] = _Gate(limit)
        elif gate.limit != limit:
            gate.limit = limit
            gate.wake()
        everyone = self._all
        if gate.try_take():
            if not everyone.try_take():
                await self._wait(everyone, provider, gate, f"[router] max_concurrent="
                                 f"{everyone.limit}")
        else:
            await self._wait(gate, provider, None, f"max_concurrent={limit} of provider "
                             f"{provider}")
            if not everyone.try_take():
                await self._wait(everyone, provider, gate, f"[router] max_concurrent="
                                 f"{everyone.limit}")
        m = self._metrics
        if m is not None:
            m.upstream_in_flight.inc(provider=provider)
        done = False

        def release() -> None:
            nonlocal done
            if done:
                return
            done = True
            gate.give()
            everyone.give()
            if m is not None:
                m.upstream_in_flight.inc(-1, provider=provider)
        return release

    async def _wait(self, gate: _Gate, provider: str, holding: _Gate | None,
                    limit: str) -> None:
        m = self._metrics
        if m is not None:
            m.upstream_waiting.inc(provider=provider)
        loop = asyncio.get_running_loop()
        try:
            got = await gate.take(loop.time() + self.wait_secs)
        except BaseException:
            if holding is not None:
                holding.give()
            raise
        finally:
            if m is not None:
                m.upstream_waiting.inc(-1, provider=provider)
        if not got:
            if holding is not None:
                holding.give()
            if m is not None:
                m.upstream_slot_timeouts.inc(provider=provider)
            raise SlotTimeout(f"upstream concurrency limit reached: {limit} "
                              f"(no slot within {self.wait_secs:g}s)")

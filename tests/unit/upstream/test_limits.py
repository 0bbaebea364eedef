"""Concurrency slots: per provider, per process, first come first served, bounded waits."""

from __future__ import annotations

import asyncio

import pytest

from humpyard.metrics import GatewayMetrics, Metrics
from humpyard.upstream.errors import SlotTimeout
from humpyard.upstream.limits import Slots


def test_a_provider_limit_queues_in_order_and_hands_slots_on() -> None:
    async def main() -> None:
        slots = Slots(max_concurrent=100, slot_wait_secs=5)
        first = await slots.acquire("p", 1)
        order: list[int] = []

        async def wait(i: int) -> None:
            release = await slots.acquire("p", 1)
            order.append(i)
            await asyncio.sleep(0)
            release()
        waiting = [asyncio.ensure_future(wait(i)) for i in range(3)]
        await asyncio.sleep(0.01)
        assert slots.in_flight("p") == 1 and order == []
        first()
        first()  # a second call is a no-op
        await asyncio.gather(*waiting)
        assert order == [0, 1, 2] and slots.in_flight("p") == 0
    asyncio.run(main())


def test_a_wait_past_the_bound_names_the_limit_and_gives_nothing_away() -> None:
    async def main() -> None:
        m = GatewayMetrics(Metrics())
        slots = Slots(max_concurrent=1, slot_wait_secs=0.05, metrics=m)
        held = await slots.acquire("a", None)
        with pytest.raises(SlotTimeout, match=r"\[router\] max_concurrent=1"):
            await slots.acquire("b", None)
        assert slots.in_flight("b") == 0
        held()
        (await slots.acquire("b", None))()
        slots.configure(max_concurrent=10, slot_wait_secs=0.05)
        p_held = await slots.acquire("p", 2)
        p_held2 = await slots.acquire("p", 2)
        with pytest.raises(SlotTimeout, match="max_concurrent=2 of provider p"):
            await slots.acquire("p", 2)
        p_held()
        p_held2()
        assert slots.in_flight("p") == 0
        assert m.upstream_slot_timeouts.samples() == {("b",): 1, ("p",): 1}
        assert m.upstream_in_flight.samples() == {("a",): 0, ("b",): 0, ("p",): 0}
        assert m.upstream_waiting.samples() == {("b",): 0, ("p",): 0}
    asyncio.run(main())


def test_a_cancelled_waiter_leaves_no_slot_taken() -> None:
    async def main() -> None:
        slots = Slots(max_concurrent=1, slot_wait_secs=5)
        held = await slots.acquire("p", None)
        waiter = asyncio.ensure_future(slots.acquire("p", None))
        await asyncio.sleep(0.01)
        held()  # hands the slot to the waiter ...
        waiter.cancel()  # ... which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await waiter
        (await asyncio.wait_for(slots.acquire("q", None), 1))()  # the slot is free again
    asyncio.run(main())


def test_limits_change_on_reload() -> None:
    async def main() -> None:
        slots = Slots(max_concurrent=1, slot_wait_secs=5)
        held = await slots.acquire("p", None)
        waiter = asyncio.ensure_future(slots.acquire("p", None))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        slots.configure(max_concurrent=2, slot_wait_secs=5)
        (await asyncio.wait_for(waiter, 1))()
        held()
    asyncio.run(main())

"""``ReadPool``: store calls off the event loop, on bounded threads, with a bounded wait.

The loop keeps running while a call blocks; at most ``threads`` calls run and
``max_waiting`` wait, one more is refused at once with ``ReadsBusy`` (503); a
caller that stops waiting keeps its place until its call has ended.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from humpyard.store.reads import ReadPool, ReadsBusy


def test_calls_run_off_the_loop_and_a_full_queue_is_refused() -> None:
    release = threading.Event()
    threads: set[str] = set()

    def blocking(n: int) -> int:
        threads.add(threading.current_thread().name)
        assert release.wait(10)
        return n

    async def main() -> None:
        pool = ReadPool(threads=1, max_waiting=2)
        try:
            calls = [asyncio.ensure_future(pool.run(blocking, i)) for i in range(3)]
            ticks = 0
            while ticks < 5:  # the loop runs on while the calls block
                await asyncio.sleep(0.01)
                ticks += 1
            assert pool.pending == 3
            with pytest.raises(ReadsBusy) as refused:
                await pool.run(blocking, 99)
            assert refused.value.status == 503 and refused.value.code == "store_busy"
            release.set()
            assert await asyncio.gather(*calls) == [0, 1, 2]
            assert pool.pending == 0 and pool.peak_pending == 3
        finally:
            pool.close()

    asyncio.run(main())
    assert len(threads) == 1 and threading.current_thread().name not in threads


def test_a_caller_that_leaves_keeps_its_place_until_its_call_ends() -> None:
    release = threading.Event()

    async def main() -> None:
        pool = ReadPool(threads=1, max_waiting=1)
        try:
            first = asyncio.ensure_future(pool.run(release.wait, 10))
            await asyncio.sleep(0.05)
            first.cancel()  # the client went away; the store call still runs
            with pytest.raises(asyncio.CancelledError):
                await first
            second = asyncio.ensure_future(pool.run(lambda: "second"))
            await asyncio.sleep(0)
            with pytest.raises(ReadsBusy):
                await pool.run(lambda: "third")
            release.set()
            assert await second == "second"
            assert pool.pending == 0
        finally:
            pool.close()

    asyncio.run(main())

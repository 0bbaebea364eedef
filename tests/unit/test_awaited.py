"""``Awaited``: a store call a request waits for is bounded in time, and skipped for a
doubling pause after the store failed (a fake clock times the pauses)."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from humpyard.awaited import FIRST_PAUSE_SECS, MAX_PAUSE_SECS, Awaited
from humpyard.clock import FakeClock
from humpyard.errors import StoreUnavailable


def unavailable() -> None:
    raise StoreUnavailable("no route to the tables")


def test_a_failure_skips_calls_for_a_pause_that_doubles_until_one_succeeds(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    awaited = Awaited(clock.monotonic)
    calls: list[str] = []

    def answered() -> str:
        calls.append("asked")
        return "ok"

    async def scenario() -> None:
        with pytest.raises(StoreUnavailable):
            await awaited.run(unavailable)
        with pytest.raises(StoreUnavailable, match="not asked again yet"):
            await awaited.run(answered)  # skipped: nobody waits on a store just failed
        assert calls == []
        clock.advance(FIRST_PAUSE_SECS)
        with pytest.raises(StoreUnavailable):
            await awaited.run(unavailable)  # asked again, failed again: twice the pause
        clock.advance(FIRST_PAUSE_SECS)
        assert awaited.down()
        clock.advance(FIRST_PAUSE_SECS)
        assert await awaited.run(answered) == "ok"
        assert not awaited.down()
        with pytest.raises(StoreUnavailable):
            await awaited.run(unavailable)  # a new outage starts from the first pause
        clock.advance(FIRST_PAUSE_SECS)
        assert not awaited.down()

    with caplog.at_level(logging.WARNING, logger="humpyard.leases"):
        asyncio.run(scenario())
    awaited.close()
    said = [r.getMessage() for r in caplog.records]
    assert [s.split(" (")[0].split(":")[0] for s in said] == [
        "the store is unavailable", "the store answers again", "the store is unavailable"]


def test_the_pause_stops_doubling_at_its_most() -> None:
    clock = FakeClock()
    awaited = Awaited(clock.monotonic)
    pauses = []
    for _ in range(7):
        awaited.failed("down")
        waited = 0.0
        while awaited.down():
            clock.advance(0.5)
            waited += 0.5
        pauses.append(waited)
    assert pauses == [FIRST_PAUSE_SECS * 2 ** i for i in range(5)] + [MAX_PAUSE_SECS] * 2


def test_a_call_that_does_not_answer_is_given_up_and_its_store_paused() -> None:
    clock = FakeClock()
    awaited = Awaited(clock.monotonic, wait_secs=0.05)
    release = threading.Event()

    async def scenario() -> None:
        with pytest.raises(StoreUnavailable, match="did not answer within 0.05 s"):
            await awaited.run(release.wait, 30)
        assert awaited.down()

    asyncio.run(scenario())
    release.set()
    awaited.close()

"""Time as a seam: the gateway never reads the system clock directly.

``Clock.now()`` is wall time in seconds since the epoch (for records and
expiries); ``Clock.monotonic()`` is for durations and cooldowns. Tests pass a
``FakeClock`` and advance it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Protocol


class Clock(Protocol):
    """What every time-dependent component is given."""

    def now(self) -> float: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it at once."""

    def __init__(self, start: float = 1_800_000_000.0):
        self._wall = start
        self._mono = 1000.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._wall += seconds
        self._mono += seconds

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)


def time_key(ts: float) -> str:
    """``ts`` as 16 hex digits whose string order is the numeric order (exact, signs too):
    the sortable time in request ids and in the DynamoDB ledger's sort keys."""
    bits = struct.unpack(">Q", struct.pack(">d", float(ts)))[0]
    bits = bits ^ 0xFFFF_FFFF_FFFF_FFFF if bits >> 63 else bits | (1 << 63)
    return f"{bits:016x}"


def key_time(key: str) -> float:
    """The time ``time_key`` encoded; ``ValueError`` for anything else."""
    if len(key) != 16:
        raise ValueError(f"not a time key: {key!r}")
    bits = int(key, 16)
    bits = bits ^ (1 << 63) if bits >> 63 else bits ^ 0xFFFF_FFFF_FFFF_FFFF
    return float(struct.unpack(">d", struct.pack(">Q", bits))[0])

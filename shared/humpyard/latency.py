"""Latency figures for fastest routes: where answered attempts are folded.

``LatencyBook`` is the contract; ``LocalLatency`` keeps the smoothed figure
per target in memory (one process). The AWS backend aggregates per instance
and flushes to shared buckets instead, behind the same two methods.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol

from humpyard.planning.order import fold_latency
from humpyard.planning.types import LatencyFigure


class LatencyBook(Protocol):
    """Where the executor reports answered attempts and the planner reads figures."""

    def record(self, target: str, ms: float, now: float) -> LatencyFigure | None:
        """Fold one answered attempt's time; returns the new figure when known at once."""
        ...

    def figures(self, now: float) -> Mapping[str, LatencyFigure]:
        """The current figure per target (a target never answered is absent)."""
        ...


class LocalLatency:
    """In-memory figures, the newest sample weighing 0.3. A restart starts empty.

    The mapping ``figures`` returns is never mutated: each new sample replaces
    it (copy on write), so a planner may cache work keyed on that object.
    """

    def __init__(self) -> None:
        self._figs: dict[str, LatencyFigure] = {}
        self._lock = threading.Lock()

    def record(self, target: str, ms: float, now: float) -> LatencyFigure:
        with self._lock:
            fig = fold_latency(self._figs.get(target), ms, now)
            self._figs = {**self._figs, target: fig}
        return fig

    def figures(self, now: float) -> Mapping[str, LatencyFigure]:
        return self._figs

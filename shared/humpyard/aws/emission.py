"""When a Lambda instance prints its metrics as CloudWatch EMF: ``MetricsCadence``.

CloudWatch Logs bills every byte a function prints, and a Lambda instance
serves one request at a time: printing every counter and histogram after
every request was four EMF records, ~1.3 KB, per request (docs/deploy.md,
"What it costs"). So an instance lets them add up in its registry — a
counter's EMF value is its increase since the previous print, a histogram's
the values observed since — and prints them, after a request, when

- ``interval_secs`` (``HUMPYARD_METRICS_INTERVAL_SECS``, 60 s: CloudWatch's
  resolution for these metrics) have passed since the previous print,
- ``MAX_PENDING`` requests are unprinted (an EMF record keeps at most 100
  values of a metric, so no per-request histogram is ever sampled), or
- it is the instance's first request.

The records are stamped with the time of the window's first request, so a
print that waited for a frozen instance's next invocation still lands in
the minute it counted. Counters an alarm reads (``ALARMED``) are printed
after the request in which they moved, whatever the interval. Gauges are
point-in-time values: printed every ``gauge_interval_secs``
(``HUMPYARD_GAUGE_INTERVAL_SECS``) with the current time.

What an instance that never runs again loses: the stream function's
adapter delivers a shutdown, and ``print_pending`` then prints everything.
A Mangum function (gateway, admin) gets no shutdown: the counts and
histogram values of its last window, at most ``interval_secs`` and
``MAX_PENDING`` requests of that one instance, are never printed. Decisions
(DynamoDB) and the alarmed counters are never in that window
(docs/operations.md, "Metrics in Lambda").
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING

from humpyard.metrics import emf

if TYPE_CHECKING:
    from humpyard.clock import Clock
    from humpyard.metrics.registry import Counter, Gauge, Histogram, Metrics

    Metric = Counter | Gauge | Histogram

MAX_PENDING = 100
"""Requests an instance lets add up before it prints (EMF: 100 values per metric)."""

ALARMED = frozenset({"humpyard_ledger_lost_total",
                     "humpyard_dynamodb_transaction_conflicts_total",
                     "humpyard_fallback_blocked_total"})
"""Counters the template's alarms read: printed with the request in which they moved
(``tests/infra`` checks every alarm's metric is here or a gauge the poller prints)."""


class MetricsCadence:
    """Print ``metrics`` to ``out`` (default: ``sys.stdout`` when printing) as EMF lines
    when due (see the module docstring).

    ``after_request()`` is called once per flushed request (or boundary refusal);
    ``print_all()`` prints everything now (the scheduled poller);
    ``print_pending()`` prints what is waiting (shutdown). Each returns the number
    of EMF records printed; one runs at a time (a shutdown may meet a request's flush).
    ``refresh_gauges`` is called just before the gauges are printed.
    """

    def __init__(self, metrics: Metrics, out: IO[str] | None, clock: Clock, *, namespace: str,
                 service: str, interval_secs: float, gauge_interval_secs: float,
                 refresh_gauges: Callable[[], None] | None = None) -> None:
        self.metrics = metrics
        self.out = out
        self.clock = clock
        self.namespace = namespace
        self.service = service
        self.interval_secs = interval_secs
        self.gauge_interval_secs = gauge_interval_secs
        self.pending = 0  # requests since the last print of counters and histograms
        self._opened_at: float | None = None  # wall time of the window's first request
        self._printed_at: float | None = None  # monotonic time of that print
        self._gauges_at: float | None = None
        self._refresh_gauges = refresh_gauges
        # Every counter is declared when the registry's owner is built; a counter's
        # ``take`` leaves out series that did not move since the previous print.
        self._alarmed = [m for m in metrics.collect()
                         if m.name in ALARMED and m.kind == "counter"]
        self._lock = threading.RLock()

    def after_request(self) -> int:
        """One request is done: print what is due."""
        with self._lock:
            now = self.clock.monotonic()
            if self.pending == 0:
                self._opened_at = self.clock.now()
            self.pending += 1
            printed = 0
            if self._gauges_at is None or now - self._gauges_at >= self.gauge_interval_secs:
                printed += self._print_gauges()
            if (self._printed_at is None or self.pending >= MAX_PENDING
                    or now - self._printed_at >= self.interval_secs):
                return printed + self.print_pending()
            # The alarmed counters that moved, stamped now: an alarm's minute is the
            # one it happened in.
            return printed + self._print(self._alarmed, self.clock.now())

    def print_pending(self) -> int:
        """Print every counter and histogram that moved since the last print."""
        with self._lock:
            stamp = self._stamp()
            self._printed_at = self.clock.monotonic()
            self.pending = 0
            self._opened_at = None
            return self._print([m for m in self.metrics.collect() if m.kind != "gauge"],
                               stamp)

    def print_all(self) -> int:
        """Print the gauges and everything pending (the poller, once a run)."""
        with self._lock:
            return self._print_gauges() + self.print_pending()

    # -- internals --------------------------------------------------------------------
    def _print_gauges(self) -> int:
        self._gauges_at = self.clock.monotonic()
        if self._refresh_gauges is not None:
            self._refresh_gauges()
        return self._print([m for m in self.metrics.collect() if m.kind == "gauge"],
                           self.clock.now())

    def _stamp(self) -> float:
        return self._opened_at if self._opened_at is not None else self.clock.now()

    def _print(self, metrics: Iterable[Metric], stamp: float) -> int:
        records = emf.records(metrics, namespace=self.namespace, service=self.service,
                              timestamp_ms=int(stamp * 1000))
        if records:
            out = self.out or sys.stdout
            out.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
            out.flush()
        return len(records)

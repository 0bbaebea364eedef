"""The metric objects and the registry that owns them.

A metric's series live in a dict keyed by the tuple of its label values, in
declaration order; the hot path (``inc``/``set``/``observe``) builds that tuple
and updates one dict entry under the metric's own lock. Nothing is formatted
until a render (``prometheus.render``, ``emf.records``). Label names are fixed
when a metric is declared; label values are converted with ``str()``.

Label values must never be secrets. Metrics that are about a client key use
the key's configured *id* (``[keys.<id>]``), never the key itself, and
``Metrics.forbid_label_values`` turns that rule into a check: a new series
whose label value equals a registered secret is refused with ``ValueError``
(the message never repeats the value).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import threading
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# ``le``/``quantile`` belong to the exposition format, ``service`` is the EMF
# dimension every record carries, ``value``/``self`` would shadow call arguments.
RESERVED_LABELS = frozenset({"le", "quantile", "service", "value", "self"})
# CloudWatch accepts at most 100 values per metric in one EMF document.
EMF_MAX_VALUES = 100

LabelKey = tuple[str, ...]


def _unit_for(name: str, kind: str) -> str:
    if name.endswith("_seconds"):
        return "Seconds"
    if kind == "counter" or name.endswith("_total"):
        return "Count"
    if name.endswith("_percent"):
        return "Percent"
    return "None"


class _Metric:
    kind = "untyped"

    def __init__(self, registry: Metrics, name: str, help: str, labelnames: Sequence[str],
                 unit: str | None) -> None:
        if not _NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        names = tuple(labelnames)
        for n in names:
            if not _LABEL.match(n) or n.startswith("__") or n in RESERVED_LABELS:
                raise ValueError(f"{name}: label name {n!r} is invalid or reserved")
        if len(set(names)) != len(names):
            raise ValueError(f"{name}: duplicate label names {names!r}")
        self.name = name
        self.help = help
        self.labelnames: tuple[str, ...] = names
        self.unit = unit or _unit_for(name, self.kind)
        self._registry = registry
        self._lock = threading.Lock()

    def _key(self, labels: Mapping[str, Any]) -> LabelKey:
        names = self.labelnames
        if len(labels) != len(names):
            raise ValueError(f"{self.name} takes labels {names!r}, got {tuple(labels)!r}")
        try:
            return tuple([str(labels[n]) for n in names])
        except KeyError:
            raise ValueError(
                f"{self.name} takes labels {names!r}, got {tuple(labels)!r}") from None

    def _admit(self, key: LabelKey) -> None:
        """Called once per new series, before it is stored."""
        self._registry._check_values(self.name, key)


class Counter(_Metric):
    """A monotonically increasing count per label combination."""

    kind = "counter"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._values: dict[LabelKey, float] = {}
        self._emf_sent: dict[LabelKey, float] = {}

    def inc(self, value: float = 1, **labels: Any) -> None:
        """Add ``value`` (>= 0) to the series named by ``labels`` (exactly the label names)."""
        if value < 0:
            raise ValueError(f"{self.name}: a counter cannot decrease (got {value})")
        key = self._key(labels)
        with self._lock:
            old = self._values.get(key)
            if old is None:
                self._admit(key)
                old = 0
            self._values[key] = old + value

    def add(self, key: LabelKey, value: float) -> None:
        """``inc`` for a caller that has the label values as a tuple of strings, in
        declaration order, already (the per-request usage counters)."""
        if value < 0:
            raise ValueError(f"{self.name}: a counter cannot decrease (got {value})")
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames!r}")
        with self._lock:
            old = self._values.get(key)
            if old is None:
                self._admit(key)
                old = 0
            self._values[key] = old + value

    def value(self, **labels: Any) -> float:
        """The current total of one series (0 if it was never incremented)."""
        key = self._key(labels)
        with self._lock:
            return self._values.get(key, 0)

    def samples(self) -> dict[LabelKey, float]:
        """A consistent copy of every series: label values → total."""
        with self._lock:
            return dict(self._values)

    def take(self) -> list[tuple[LabelKey, list[float]]]:
        """Per series, the increase since the previous ``take``; unmoved series are left out."""
        out = []
        with self._lock:
            for key, total in self._values.items():
                delta = total - self._emf_sent.get(key, 0)
                if delta > 0:
                    self._emf_sent[key] = total
                    out.append((key, [delta]))
        return out


class Gauge(_Metric):
    """A value per label combination that can go up and down, or be set."""

    kind = "gauge"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._values: dict[LabelKey, float] = {}

    def set(self, value: float, **labels: Any) -> None:
        """Set the series named by ``labels`` to ``value``."""
        key = self._key(labels)
        with self._lock:
            if key not in self._values:
                self._admit(key)
            self._values[key] = value

    def inc(self, value: float = 1, **labels: Any) -> None:
        """Add ``value`` (may be negative) to the series."""
        key = self._key(labels)
        with self._lock:
            old = self._values.get(key)
            if old is None:
                self._admit(key)
                old = 0
            self._values[key] = old + value

    def dec(self, value: float = 1, **labels: Any) -> None:
        """Subtract ``value`` from the series."""
        self.inc(-value, **labels)

    def remove(self, **labels: Any) -> None:
        """Forget one series (it disappears from renders); a missing series is ignored."""
        key = self._key(labels)
        with self._lock:
            self._values.pop(key, None)

    def clear(self) -> None:
        """Forget every series."""
        with self._lock:
            self._values.clear()

    def value(self, **labels: Any) -> float | None:
        """The current value of one series, or None if it is not set."""
        key = self._key(labels)
        with self._lock:
            return self._values.get(key)

    def samples(self) -> dict[LabelKey, float]:
        """A consistent copy of every series: label values → value."""
        with self._lock:
            return dict(self._values)

    def take(self) -> list[tuple[LabelKey, list[float]]]:
        """Every series' current value (an unlabelled gauge that was never set reads 0)."""
        with self._lock:
            items = list(self._values.items())
        if not items and not self.labelnames:
            return [((), [0.0])]
        return [(key, [v]) for key, v in items if math.isfinite(v)]


class _HistSeries:
    __slots__ = ("counts", "sum", "count", "recent", "seen")

    def __init__(self, n: int) -> None:
        self.counts = [0] * n  # per bucket, not cumulative; the last one is +Inf
        self.sum = 0.0
        self.count = 0
        self.recent: list[float] = []  # a uniform sample of values since the last take
        self.seen = 0  # values observed since the last take


class Histogram(_Metric):
    """Observations counted into fixed buckets (upper bounds, ``+Inf`` implied)."""

    kind = "histogram"

    def __init__(self, registry: Metrics, name: str, help: str, labelnames: Sequence[str],
                 unit: str | None, buckets: Sequence[float]) -> None:
        super().__init__(registry, name, help, labelnames, unit)
        bounds = tuple(float(b) for b in buckets if b != math.inf)
        if not bounds or any(not math.isfinite(b) for b in bounds) or any(
                a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
            raise ValueError(f"{name}: buckets must be finite and strictly increasing")
        self.buckets: tuple[float, ...] = bounds
        self._series: dict[LabelKey, _HistSeries] = {}
        self._rng = random.Random(0)  # reservoir sampling only; not security-relevant

    def observe(self, value: float, **labels: Any) -> None:
        """Count ``value`` into the series named by ``labels``."""
        key = self._key(labels)
        i = bisect_left(self.buckets, value)  # the first bound >= value ("le")
        with self._lock:
            s = self._series.get(key)
            if s is None:
                self._admit(key)
                s = self._series[key] = _HistSeries(len(self.buckets) + 1)
            s.counts[i] += 1
            s.sum += value
            s.count += 1
            s.seen += 1
            if len(s.recent) < EMF_MAX_VALUES:
                s.recent.append(value)
            else:
                j = self._rng.randrange(s.seen)
                if j < EMF_MAX_VALUES:
                    s.recent[j] = value

    def absorb(self, key: LabelKey, counts: Sequence[int], total: float, count: int) -> None:
        """Add another histogram's series (per-bucket counts, the last +Inf; its sum and
        count) to the series ``key``: the counts of a worker this one replaces
        (``metrics/sharing.py``). Other bucket layouts are refused with ``ValueError``."""
        if len(key) != len(self.labelnames) or len(counts) != len(self.buckets) + 1:
            raise ValueError(f"{self.name}: another layout of labels or buckets")
        with self._lock:
            s = self._series.get(key)
            if s is None:
                self._admit(key)
                s = self._series[key] = _HistSeries(len(self.buckets) + 1)
            for i, c in enumerate(counts):
                s.counts[i] += int(c)
            s.sum += float(total)
            s.count += int(count)

    def samples(self) -> dict[LabelKey, tuple[list[int], float, int]]:
        """Per series: (per-bucket counts, the last being +Inf; sum; count)."""
        with self._lock:
            return {k: (list(s.counts), s.sum, s.count) for k, s in self._series.items()}

    def take(self) -> list[tuple[LabelKey, list[float]]]:
        """Per series, the values observed since the previous ``take``: all of them up to
        ``EMF_MAX_VALUES``, beyond that a uniform sample of that many."""
        out = []
        with self._lock:
            for key, s in self._series.items():
                if s.recent:
                    out.append((key, [v for v in s.recent if math.isfinite(v)]))
                    s.recent = []
                    s.seen = 0
        return [(k, v) for k, v in out if v]


class Metrics:
    """A registry of counters, gauges and histograms; safe to use from any thread.

    Declaring a name twice returns the existing metric when kind and label
    names match, and raises ``ValueError`` otherwise. ``collect`` hands every
    metric, in declaration order, to a renderer (``prometheus.render``,
    ``emf.records``); the registry knows nothing of their formats.
    """

    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}
        self._lock = threading.Lock()
        self._forbidden: frozenset[bytes] = frozenset()

    def counter(self, name: str, help: str, labelnames: Sequence[str] = (), *,
                unit: str | None = None) -> Counter:
        """Declare (or get) a counter; ``unit`` is the EMF unit (default from the name)."""
        return self._declare(Counter, name, help, labelnames, unit)

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = (), *,
              unit: str | None = None) -> Gauge:
        """Declare (or get) a gauge."""
        return self._declare(Gauge, name, help, labelnames, unit)

    def histogram(self, name: str, help: str, labelnames: Sequence[str] = (),
                  buckets: Sequence[float] = (), *, unit: str | None = None) -> Histogram:
        """Declare (or get) a histogram with these finite, increasing bucket bounds."""
        return self._declare(Histogram, name, help, labelnames, unit, buckets)

    def _declare(self, cls: type[Any], name: str, help: str, labelnames: Sequence[str],
                 unit: str | None, *extra: Any) -> Any:
        with self._lock:
            found = self._metrics.get(name)
            if found is not None:
                if type(found) is not cls or found.labelnames != tuple(labelnames):
                    raise ValueError(f"metric {name!r} is already declared differently")
                return found
            metric = cls(self, name, help, labelnames, unit, *extra)
            self._metrics[name] = metric
            return metric

    def collect(self) -> list[Counter | Gauge | Histogram]:
        """Every declared metric, in declaration order."""
        with self._lock:
            return list(self._metrics.values())  # type: ignore[arg-type]

    def get(self, name: str) -> Counter | Gauge | Histogram | None:
        """The metric declared under ``name``, or None."""
        return self._metrics.get(name)  # type: ignore[return-value]

    def forbid_label_values(self, secrets: Iterable[str | None]) -> None:
        """Refuse, from now on, any new series whose label value equals one of ``secrets``.

        Only SHA-256 digests are kept. Call again (e.g. after a reload) to
        replace the set. Series that already exist are not re-checked.
        """
        self._forbidden = frozenset(
            hashlib.sha256(s.encode()).digest() for s in secrets if s)

    def _check_values(self, name: str, key: LabelKey) -> None:
        forbidden = self._forbidden
        if forbidden:
            for v in key:
                if hashlib.sha256(v.encode()).digest() in forbidden:
                    raise ValueError(f"{name}: a label value is a secret; label with the key id")

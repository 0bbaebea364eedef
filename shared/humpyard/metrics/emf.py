"""CloudWatch Embedded Metric Format (EMF) records of a metrics registry.

One record (a JSON-ready dict, to be printed as one log line) per label
combination; metrics sharing the same label names and values share a
record, at most 100 metrics per record::

    {"_aws": {"Timestamp": 1800000000000,
              "CloudWatchMetrics": [{"Namespace": "Humpyard",
                                     "Dimensions": [["service", "route", "target", "status"]],
                                     "Metrics": [{"Name": "humpyard_requests_total",
                                                  "Unit": "Count"}]}]},
     "service": "humpyard", "route": "auto", "target": "fast", "status": "200",
     "humpyard_requests_total": 3}

The dimension set contract, which CloudWatch alarms depend on: every metric
is published with exactly ONE dimension set, ``["service", *labelnames]`` in
the metric's declared label order (``["service"]`` for a metric without
labels). An alarm must name all of those dimensions, e.g.
``humpyard_override_oldest_age_seconds`` with ``service=humpyard`` only.
Empty label values are published as ``"-"`` (CloudWatch refuses empty
dimension values).

Values per kind:

- counter: the increase since the previous ``records()`` call; series
  that did not move are left out (alarms should treat missing data as 0,
  ``TreatMissingData: notBreaching``).
- gauge: the current value of every series at each call (a Lambda instance
  hands its gauges over once a minute: ``aws/build.py``).
- histogram: the values observed since the previous call (an array; at most
  100, beyond that a uniform sample of 100, so percentiles stay
  representative but ``SampleCount`` is then a lower bound; count with the
  counters instead), each to ``HISTOGRAM_DIGITS`` significant digits: a
  duration's 17 digits cost log bytes and say nothing a percentile uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from humpyard.metrics.registry import Counter, Gauge, Histogram

MAX_METRICS_PER_RECORD = 100
MAX_DIMENSION_VALUE = 1024
HISTOGRAM_DIGITS = 4


def records(metrics: Iterable[Counter | Gauge | Histogram], *, namespace: str, service: str,
            timestamp_ms: int) -> list[dict[str, Any]]:
    """Take every metric's values for this window (``take``: counters' baselines advance,
    histograms' samples are emptied) and shape them as EMF records."""
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[tuple[str, str, list[float]]]] = {}
    for m in metrics:
        for key, values in m.take():
            if m.kind == "histogram":
                values = [float(f"{v:.{HISTOGRAM_DIGITS}g}") for v in values]
            groups.setdefault((m.labelnames, key), []).append((m.name, m.unit, values))
    out: list[dict[str, Any]] = []
    for (names, key), entries in groups.items():
        dims = {"service": service}
        dims.update({n: (v or "-")[:MAX_DIMENSION_VALUE] for n, v in zip(names, key, strict=True)})
        for start in range(0, len(entries), MAX_METRICS_PER_RECORD):
            chunk = entries[start:start + MAX_METRICS_PER_RECORD]
            doc: dict[str, Any] = {
                "_aws": {
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": namespace,
                        "Dimensions": [["service", *names]],
                        "Metrics": [{"Name": name, "Unit": unit} for name, unit, _ in chunk],
                    }],
                },
                **dims,
            }
            for name, _, values in chunk:
                doc[name] = values[0] if len(values) == 1 else values
            out.append(doc)
    return out

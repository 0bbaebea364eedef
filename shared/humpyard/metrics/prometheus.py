"""Prometheus text exposition format 0.0.4.

Per metric: ``# HELP`` (backslash and newline escaped), ``# TYPE``, then one
line per series sorted by label values. Label values escape backslash,
double quote and newline. A histogram series renders cumulative
``_bucket{le="…"}`` lines ending with ``le="+Inf"``, then ``_sum`` and
``_count``. A metric without labels that was never touched renders as 0, so
alert expressions on it have a value from the first scrape.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Family(Protocol):
    """What a render reads of a metric: a registry's ``Counter``, ``Gauge`` or
    ``Histogram``, or the merge of several workers' (``metrics/sharing.py``)."""

    name: str
    help: str
    kind: str
    labelnames: tuple[str, ...]

    def samples(self) -> Mapping[tuple[str, ...], Any]: ...


class HistogramFamily(Family, Protocol):
    buckets: tuple[float, ...]


def format_value(v: float) -> str:
    """A sample value as Prometheus writes it: ``+Inf``, ``-Inf``, ``NaN``, ints without ``.0``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if float(v).is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(float(v))


def escape_label_value(v: str) -> str:
    """A label value as written between double quotes."""
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(v: str) -> str:
    """HELP text on one line."""
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(names: Sequence[str], values: Sequence[str],
            extra: tuple[str, str] | None = None) -> str:
    pairs = [f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True)]
    if extra is not None:
        pairs.append(f'{extra[0]}="{extra[1]}"')
    return "{" + ",".join(pairs) + "}" if pairs else ""


def render(metrics: Iterable[Family]) -> str:
    """Every metric in order, as one exposition document ending with a newline."""
    lines: list[str] = []
    for m in metrics:
        lines.append(f"# HELP {m.name} {escape_help(m.help)}")
        lines.append(f"# TYPE {m.name} {m.kind}")
        if m.kind == "histogram":
            _histogram(cast(HistogramFamily, m), lines)
        else:
            _scalar(m, lines)
    return "\n".join(lines) + "\n"


def _scalar(m: Family, lines: list[str]) -> None:
    values = dict(m.samples())
    if not values and not m.labelnames:
        values = {(): 0.0}
    for key in sorted(values):
        lines.append(f"{m.name}{_labels(m.labelnames, key)} {format_value(values[key])}")


def _histogram(m: HistogramFamily, lines: list[str]) -> None:
    series = dict(m.samples())
    if not series and not m.labelnames:
        series = {(): ([0] * (len(m.buckets) + 1), 0.0, 0)}
    bounds = [format_value(b) for b in m.buckets] + ["+Inf"]
    for key in sorted(series):
        counts, total, count = series[key]
        running = 0
        for le, c in zip(bounds, counts, strict=True):
            running += c
            lines.append(f"{m.name}_bucket{_labels(m.labelnames, key, ('le', le))} {running}")
        lbl = _labels(m.labelnames, key)
        lines.append(f"{m.name}_sum{lbl} {format_value(total)}")
        lines.append(f"{m.name}_count{lbl} {count}")

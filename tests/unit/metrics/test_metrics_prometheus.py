"""Prometheus text format 0.0.4, read back with a minimal parser."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from humpyard.metrics import CONTENT_TYPE, GatewayMetrics, Metrics, prometheus

_LABEL_START = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')
_UNESCAPE = {"n": "\n", "\\": "\\", '"': '"'}


@dataclass
class Family:
    help: str = ""
    type: str = ""
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    i = 0
    while i < len(text):
        m = _LABEL_START.match(text, i)
        assert m, f"bad label at {text[i:]!r}"
        i = m.end()
        value: list[str] = []
        while text[i] != '"':
            if text[i] == "\\":
                value.append(_UNESCAPE[text[i + 1]])
                i += 2
            else:
                assert text[i] != "\n"
                value.append(text[i])
                i += 1
        i += 1
        assert m.group(1) not in labels
        labels[m.group(1)] = "".join(value)
        if i < len(text):
            assert text[i] == ",", text[i:]
            i += 1
    return labels


def parse(text: str) -> dict[str, Family]:
    """Families by name; samples are attributed to the family declared last."""
    assert text.endswith("\n")
    families: dict[str, Family] = {}
    current = ""
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            current = name
            families.setdefault(name, Family()).help = re.sub(
                r"\\(.)", lambda m: _UNESCAPE[m.group(1)], help_text)
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert name == current
            families[name].type = kind
        else:
            series, value = line.rsplit(" ", 1)
            name, brace, rest = series.partition("{")
            assert name.startswith(current)
            labels = parse_labels(rest[:-1]) if brace else {}
            if brace:
                assert rest.endswith("}")
            families[current].samples.append((name, labels, float(value)))
    return families


def test_help_type_labels_and_escaping() -> None:
    m = Metrics()
    c = m.counter("t_total", 'Counts "things"\nwith a back\\slash.', ("route", "status"))
    c.inc(route='we"ird\\na\nme', status=200)
    c.inc(3, route="plain", status="500")
    g = m.gauge("t_ratio", "A ratio.")
    g.set(0.25)
    fams = parse(prometheus.render(m.collect()))
    assert list(fams) == ["t_total", "t_ratio"]
    assert fams["t_total"].help == 'Counts "things"\nwith a back\\slash.'
    assert fams["t_total"].type == "counter"
    assert fams["t_ratio"].type == "gauge"
    assert sorted(fams["t_total"].samples, key=lambda s: s[2]) == [
        ("t_total", {"route": 'we"ird\\na\nme', "status": "200"}, 1.0),
        ("t_total", {"route": "plain", "status": "500"}, 3.0),
    ]
    assert fams["t_ratio"].samples == [("t_ratio", {}, 0.25)]


def test_histogram_buckets_are_cumulative_with_sum_and_count() -> None:
    m = Metrics()
    h = m.histogram("t_seconds", "Durations.", ("route",), (0.1, 0.5, 2))
    for v in (0.05, 0.1, 0.3, 0.3, 1.0, 9.0):
        h.observe(v, route="a")
    h.observe(0.2, route="b")
    fam = parse(prometheus.render(m.collect()))["t_seconds"]
    assert fam.type == "histogram"
    a = [(n, lbl, v) for n, lbl, v in fam.samples if lbl["route"] == "a"]
    buckets = [(lbl["le"], v) for n, lbl, v in a if n == "t_seconds_bucket"]
    assert buckets == [("0.1", 2), ("0.5", 4), ("2", 5), ("+Inf", 6)]
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert [(n, v) for n, _, v in a if not n.endswith("_bucket")] == [
        ("t_seconds_sum", 10.75), ("t_seconds_count", 6)]
    b_inf = [v for n, lbl, v in fam.samples if lbl == {"route": "b", "le": "+Inf"}]
    assert b_inf == [1]


def test_unlabelled_metrics_render_zero_before_first_use() -> None:
    gm = GatewayMetrics(Metrics())
    fams = parse(prometheus.render(gm.metrics.collect()))
    assert fams["humpyard_override_oldest_age_seconds"].samples == [
        ("humpyard_override_oldest_age_seconds", {}, 0.0)]
    assert fams["humpyard_retry_after_honored_total"].samples[0][2] == 0
    overhead = fams["humpyard_gateway_overhead_seconds"].samples
    assert overhead[-1] == ("humpyard_gateway_overhead_seconds_count", {}, 0)
    assert fams["humpyard_requests_total"].samples == []  # labelled: no series yet
    assert set(fams) == gm.names()
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_special_values() -> None:
    m = Metrics()
    g = m.gauge("t_value", "v", ("k",))
    g.set(math.inf, k="inf")
    g.set(-math.inf, k="ninf")
    g.set(math.nan, k="nan")
    g.set(1e-7, k="small")
    g.set(12.0, k="int")
    text = prometheus.render(m.collect())
    assert 't_value{k="inf"} +Inf' in text
    assert 't_value{k="ninf"} -Inf' in text
    assert 't_value{k="nan"} NaN' in text
    assert 't_value{k="small"} 1e-07' in text
    assert 't_value{k="int"} 12\n' in text

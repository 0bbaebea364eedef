"""``/metrics`` of ``serve --workers N``: every worker's counts in one answer.

A scrape of the shared port reaches whichever worker accepted the
connection; each worker counts only what it served. So each worker keeps a
snapshot of its registry in the run's directory (``worker-<index>.json``,
written every ``SNAPSHOT_SECS`` off the loop, at exit, and by every scrape it
answers before it reads the others), and a scrape answers the merge of every
snapshot in the directory:

- counters and histograms: summed over every worker, live or dead, per
  series. A worker started again in a dead one's place (same index) first
  adds the dead one's last snapshot to its own registry (``adopt``) and then
  replaces that file, so a summed series never goes down: what a scrape
  reported was in a file (the worker that answered wrote its own first), and
  a file only ever grows. What a killed worker counted after its last
  snapshot, and no scrape saw, is lost.
- gauges: ``SUMMED_GAUGES`` (a worker's own load: requests in flight, its
  ledger queue) are summed over the live workers, ``MAXED_GAUGES`` (the
  ledger lag) are their maximum, and the rest describe the shared state
  (breakers, overrides, spend, quota, latency figures), which every worker
  reads from the same store: the answering worker's own values.

Files are JSON, written to a temporary name and renamed, so a reader never
sees half of one. docs/decisions/0026-metrics-across-workers.md.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from humpyard.metrics import prometheus
from humpyard.metrics.registry import Counter, Gauge, Histogram, LabelKey, Metrics

log = logging.getLogger("humpyard.metrics")

SNAPSHOT_SECS = 1.0
"""How often a worker writes its snapshot (a scrape writes the answering worker's too)."""
SUMMED_GAUGES = frozenset({"humpyard_ledger_queue_depth", "humpyard_upstream_in_flight",
                           "humpyard_upstream_waiting"})
MAXED_GAUGES = frozenset({"humpyard_ledger_lag_seconds"})


def snapshot(metrics: Metrics, pid: int) -> dict[str, Any]:
    """Every series of ``metrics`` as JSON-ready lists, with the writer's pid."""
    counters: dict[str, list[Any]] = {}
    histograms: dict[str, list[Any]] = {}
    gauges: dict[str, list[Any]] = {}
    for m in metrics.collect():
        if isinstance(m, Counter):
            counters[m.name] = [[list(k), v] for k, v in m.samples().items()]
        elif isinstance(m, Histogram):
            histograms[m.name] = [[list(k), counts, total, count]
                                  for k, (counts, total, count) in m.samples().items()]
        else:
            gauges[m.name] = [[list(k), v] for k, v in m.samples().items()]
    return {"pid": pid, "counters": counters, "histograms": histograms, "gauges": gauges}


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: not one of ours
        return False
    return True


@dataclass
class _Merged:
    """One metric's merged series, shaped as ``prometheus.render`` reads a metric."""

    name: str
    help: str
    kind: str
    labelnames: tuple[str, ...]
    buckets: tuple[float, ...] = ()
    values: dict[LabelKey, Any] = field(default_factory=dict)

    def samples(self) -> dict[LabelKey, Any]:
        return self.values


def merge(metrics: Metrics, snapshots: Iterable[dict[str, Any]], own_pid: int) -> list[_Merged]:
    """``metrics``' declarations with the series of every snapshot merged as the module
    docstring says (``own_pid``'s snapshot is the answering worker's)."""
    snaps = list(snapshots)
    live = [s for s in snaps if s.get("pid") == own_pid or _alive(s.get("pid"))]
    out: list[_Merged] = []
    for m in metrics.collect():
        merged = _Merged(m.name, m.help, m.kind, m.labelnames,
                         m.buckets if isinstance(m, Histogram) else ())
        if isinstance(m, Counter):
            for s in snaps:
                for key, v in s.get("counters", {}).get(m.name, ()):
                    k = tuple(key)
                    merged.values[k] = merged.values.get(k, 0) + v
        elif isinstance(m, Histogram):
            width = len(m.buckets) + 1
            for s in snaps:
                for key, counts, total, count in s.get("histograms", {}).get(m.name, ()):
                    if len(counts) != width:
                        continue  # another build's buckets: not comparable
                    k = tuple(key)
                    old = merged.values.get(k)
                    if old is None:
                        merged.values[k] = (list(counts), total, count)
                    else:
                        merged.values[k] = ([a + b for a, b in zip(old[0], counts, strict=True)],
                                            old[1] + total, old[2] + count)
        elif m.name in SUMMED_GAUGES or m.name in MAXED_GAUGES:
            pick = max if m.name in MAXED_GAUGES else (lambda a, b: a + b)
            for s in live:
                for key, v in s.get("gauges", {}).get(m.name, ()):
                    k = tuple(key)
                    merged.values[k] = v if k not in merged.values else pick(merged.values[k], v)
        else:
            merged.values = m.samples() if isinstance(m, Gauge) else {}
        out.append(merged)
    return out


class WorkerMetrics:
    """One worker's side: its snapshot file in ``directory``, and the merged render."""

    def __init__(self, directory: str, index: int, metrics: Metrics, *,
                 pid: int | None = None) -> None:
        self.dir = Path(directory)
        self.path = self.dir / f"worker-{index}.json"
        self.metrics = metrics
        self.pid = os.getpid() if pid is None else pid  # tests stand for several processes
        self._writing = threading.Lock()

    def adopt(self) -> None:
        """Take over the counts of the worker this one replaces (same index, now dead),
        then write this worker's snapshot in its place. Call once, before serving."""
        try:
            old = json.loads(self.path.read_text())
        except FileNotFoundError:
            old = None
        except (OSError, ValueError):
            log.warning("metrics snapshot %s unreadable; its counts start again", self.path)
            old = None
        if old is not None and old.get("pid") != self.pid:
            for name, series in old.get("counters", {}).items():
                m = self.metrics.get(name)
                if isinstance(m, Counter):
                    for key, v in series:
                        if len(key) == len(m.labelnames) and v > 0:
                            m.add(tuple(key), v)
            for name, series in old.get("histograms", {}).items():
                m = self.metrics.get(name)
                if isinstance(m, Histogram):
                    for key, counts, total, count in series:
                        if len(key) == len(m.labelnames):
                            m.absorb(tuple(key), counts, total, count)
        self.write()

    def write(self) -> None:
        """Write this worker's snapshot (atomically: a temporary name, renamed). One
        write at a time: the periodic one and those of scrapes run in threads, and two
        on the one temporary name would fail the second rename."""
        with self._writing:
            data = json.dumps(snapshot(self.metrics, self.pid), separators=(",", ":"))
            tmp = self.path.with_suffix(f".{self.pid}.tmp")
            tmp.write_text(data)
            os.replace(tmp, self.path)

    def render(self) -> str:
        """The Prometheus text of every worker's counts: this worker's snapshot is
        written first, then every snapshot in the directory is merged. Blocking (files):
        call it off the event loop. Without the directory (removed under it), this
        worker's own counts."""
        try:
            self.write()
        except OSError as e:
            log.warning("metrics snapshot not written (%s); answering this worker's only", e)
            return prometheus.render(self.metrics.collect())
        snaps = []
        for path in sorted(self.dir.glob("worker-*.json")):
            try:
                snaps.append(json.loads(path.read_text()))
            except (OSError, ValueError):  # a worker's directory entry gone meanwhile
                continue
        return prometheus.render(merge(self.metrics, snaps, self.pid))

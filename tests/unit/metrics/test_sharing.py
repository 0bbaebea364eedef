"""``/metrics`` across ``serve --workers N`` (``metrics/sharing.py``): each worker's
snapshot in the run's directory, merged by whichever worker answers the scrape.

Each ``WorkerMetrics`` here stands for one worker process (its own registry, index and
pid); a dead worker is a pid that no longer runs (a finished child process)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from humpyard.clock import FakeClock
from humpyard.metrics import GatewayMetrics, Metrics
from humpyard.metrics.sharing import WorkerMetrics


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def registry() -> GatewayMetrics:
    return GatewayMetrics(Metrics())


def value(text: str, series: str) -> float:
    """The sample ``series`` (name and labels as rendered) in an exposition, or 0."""
    m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_counters_and_histograms_are_summed_over_every_worker(tmp_path: Path):
    a, b = registry(), registry()
    wa = WorkerMetrics(str(tmp_path), 0, a.metrics, pid=1_000_001)
    wb = WorkerMetrics(str(tmp_path), 1, b.metrics, pid=1_000_002)
    a.requests.inc(route="r", target="t", status="200")
    a.requests.inc(route="r", target="t", status="200")
    b.requests.inc(route="r", target="t", status="200")
    b.requests.inc(route="r", target="t", status="502")
    a.request_duration.observe(0.01, route="r")
    b.request_duration.observe(5.0, route="r")
    wb.write()
    text = wa.render()  # a answers: it writes its own, then merges both
    assert value(text, 'humpyard_requests_total{route="r",target="t",status="200"}') == 3
    assert value(text, 'humpyard_requests_total{route="r",target="t",status="502"}') == 1
    assert value(text, 'humpyard_request_duration_seconds_count{route="r"}') == 2
    assert value(text, 'humpyard_request_duration_seconds_sum{route="r"}') == 5.01
    assert text == wb.render()  # the same answer whichever worker is asked


def test_gauges_of_a_workers_own_load_are_summed_the_shared_ones_are_not(tmp_path: Path):
    a, b, gone = registry(), registry(), registry()
    wa = WorkerMetrics(str(tmp_path), 0, a.metrics, pid=os.getppid())  # a live process
    wb = WorkerMetrics(str(tmp_path), 1, b.metrics)  # this test process
    wg = WorkerMetrics(str(tmp_path), 2, gone.metrics, pid=dead_pid())
    for m, n in ((a, 2), (b, 3), (gone, 50)):
        m.ledger_queue_depth.set(n)
        m.ledger_lag.set(n / 10)
        m.overrides_active.set(n, kind="pin_route")  # the shared state, as each read it
    wa.write()
    wg.write()
    text = wb.render()
    assert value(text, "humpyard_ledger_queue_depth") == 3 + 2  # live workers only
    assert value(text, "humpyard_ledger_lag_seconds") == 0.3  # the largest
    assert value(text, 'humpyard_overrides_active{kind="pin_route"}') == 3  # b's own


def test_a_worker_started_in_a_dead_ones_place_carries_its_counts_on(tmp_path: Path):
    first, other = registry(), registry()
    w0 = WorkerMetrics(str(tmp_path), 0, first.metrics, pid=1_000_001)
    w1 = WorkerMetrics(str(tmp_path), 1, other.metrics, pid=1_000_002)
    for _ in range(5):
        first.requests.inc(route="r", target="t", status="200")
    first.request_duration.observe(0.2, route="r")
    other.requests.inc(route="r", target="t", status="200")
    w1.write()
    series = 'humpyard_requests_total{route="r",target="t",status="200"}'
    seen = [value(w0.render(), series)]  # 6: the scrape w0 answered wrote its 5
    first.requests.inc(route="r", target="t", status="200")  # never seen: w0 is killed
    again = registry()  # worker 0 again, a new process
    w0b = WorkerMetrics(str(tmp_path), 0, again.metrics, pid=1_000_003)
    w0b.adopt()
    assert again.requests.value(route="r", target="t", status="200") == 5
    seen.append(value(w1.render(), series))
    again.requests.inc(route="r", target="t", status="200")
    seen.append(value(w0b.render(), series))
    assert seen == [6, 6, 7]  # never down: the sum Prometheus sees is a counter
    text = w1.render()
    assert value(text, 'humpyard_request_duration_seconds_count{route="r"}') == 1


def test_a_first_start_adopts_nothing_and_writes_its_file(tmp_path: Path):
    m = registry()
    w = WorkerMetrics(str(tmp_path), 3, m.metrics)
    w.adopt()
    assert (tmp_path / "worker-3.json").is_file()
    assert m.requests.samples() == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worker-3.json"]  # no temp left


def test_without_its_directory_a_worker_answers_for_itself(tmp_path: Path):
    m = registry()
    m.requests.inc(route="r", target="t", status="200")
    w = WorkerMetrics(str(tmp_path / "gone"), 0, m.metrics)
    text = w.render()
    assert value(text, 'humpyard_requests_total{route="r",target="t",status="200"}') == 1


def test_concurrent_snapshots_in_one_worker_never_answer_its_own_counts_only(tmp_path: Path):
    """A worker writes its snapshot from a thread every second and from each scrape it
    answers, also in threads: writes that overlap must not fail. They shared one
    temporary name, so one rename found the other's already gone and that scrape
    answered this worker's counts only (seen in a full run: 23 of 40 requests)."""
    import threading
    a, b = registry(), registry()
    wa = WorkerMetrics(str(tmp_path), 0, a.metrics, pid=1_000_001)
    wb = WorkerMetrics(str(tmp_path), 1, b.metrics, pid=1_000_002)
    a.requests.inc(route="r", target="t", status="200")
    b.requests.inc(route="r", target="t", status="200")
    wb.write()
    series = 'humpyard_requests_total{route="r",target="t",status="200"}'
    seen: list[float] = []

    def scrape() -> None:
        for _ in range(300):
            seen.append(value(wa.render(), series))

    threads = [threading.Thread(target=scrape) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 1200 and set(seen) == {2.0}, sorted(set(seen))


def test_a_snapshot_that_cannot_be_written_is_said_once_a_minute(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A worker writes its snapshot every second; on a full disk (here: its directory
    gone) that was a warning every second for as long as it lasted."""
    from humpyard.logsink import Sampled
    from humpyard.worker_side import UNWRITTEN_LOG_SECS, write_snapshot
    clock = FakeClock()
    said = Sampled(clock.monotonic, UNWRITTEN_LOG_SECS)
    shared = WorkerMetrics(str(tmp_path / "gone"), 0, registry().metrics)

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if "could not write the metrics snapshot" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="humpyard"):
        for _ in range(int(UNWRITTEN_LOG_SECS)):  # a minute of seconds
            write_snapshot(shared, said)
            clock.advance(1.0)
        write_snapshot(shared, said)
    assert [m.split(":")[0] for m in lines()] == [
        "could not write the metrics snapshot (1 time(s) since the last line)",
        "could not write the metrics snapshot (60 time(s) since the last line)"]

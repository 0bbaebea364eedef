"""A probe client and a memory reader, for attack tests.

``Probe(url, model)`` sends small chat requests one after another from a
thread of its own and records each latency and each failure. An attack test
takes the probe's quiet figure first, then runs the attack with the probe
running, and checks that the probe was served throughout::

    with Probe(gw.url, "ok") as probe:
        quiet = probe.measure(40)            # 40 requests, nothing else running
        with probe.running():                # probing in the background...
            attack()                         # ...while the attack runs
        probe.assert_flat(quiet)             # p99 within 2x quiet (+ slack), no error

``rss_mb(pid)`` and ``peak_rss_mb(pid)`` read ``/proc/<pid>/status`` (VmRSS,
VmHWM) of a real ``humpyard serve`` child (``tests/durability/process.py``).

The probe times its requests in the test's own process, which late in a full
run holds millions of objects: one full collection there, triggered by the
attacker's or the fake upstream's allocations, held every thread for
300-500 ms and read as a stalled gateway (probe p99 490 ms against a quiet
5 ms, the gateway's p50 unchanged). So while a probe is open the test
process's heap is frozen (``gc.freeze``): a collection then walks only the
objects made since, and what the probe measures is the gateway.
"""

from __future__ import annotations

import gc
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

MSG = [{"role": "user", "content": "ping"}]
# A 2-core CI machine schedules the probe, the attacker and the gateway on the same
# two cores: a fixed allowance on top of the factor keeps scheduler noise on a
# millisecond-scale quiet figure from failing a test whose gateway did not stall.
SLACK_SECS = 0.05
T = TypeVar("T")
_frozen = 0  # open probes; the heap is frozen while any is (``gc.freeze`` is per process)
_frozen_lock = threading.Lock()


def _freeze_heap() -> None:
    global _frozen
    with _frozen_lock:
        if _frozen == 0:
            gc.collect()  # the garbage goes first: the collector never frees a frozen object
            gc.freeze()
        _frozen += 1


def _thaw_heap() -> None:
    global _frozen
    with _frozen_lock:
        _frozen -= 1
        if _frozen == 0:
            gc.unfreeze()


@dataclass
class Figures:
    """Latencies (seconds) of one measuring phase and the failures seen in it."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies) if self.latencies else float("nan")

    @property
    def p99(self) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))]

    def __str__(self) -> str:
        return (f"n={len(self.latencies)} p50={self.p50 * 1000:.1f} ms "
                f"p99={self.p99 * 1000:.1f} ms errors={len(self.errors)} {self.errors[:3]}")


class Probe:
    """A normal client: small buffered chat requests, one at a time."""

    def __init__(self, url: str, model: str, *, headers: dict[str, str] | None = None,
                 path: str = "/v1/chat/completions", timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.model = model
        self.path = path
        self._client = httpx.Client(base_url=self.url, headers=headers or {}, timeout=timeout)
        self.attacked = Figures()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Probe:
        _freeze_heap()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stop.set()
            if self._thread is not None:
                self._thread.join(30)
            self._client.close()
        finally:
            _thaw_heap()

    def once(self, into: Figures) -> None:
        t0 = time.perf_counter()
        try:
            r = self._client.post(self.path, json={"model": self.model, "messages": MSG,
                                                   "max_tokens": 8})
            elapsed = time.perf_counter() - t0
            if r.status_code != 200:
                into.errors.append(f"{r.status_code} {r.text[:120]}")
            into.latencies.append(elapsed)
        except httpx.HTTPError as e:
            into.latencies.append(time.perf_counter() - t0)
            into.errors.append(f"{type(e).__name__}: {e}")

    def measure(self, n: int = 40, *, warmup: int = 5) -> Figures:
        """``n`` requests in a row (after ``warmup`` unrecorded ones): the quiet figure."""
        scratch = Figures()
        for _ in range(warmup):
            self.once(scratch)
        figures = Figures()
        for _ in range(n):
            self.once(figures)
        assert not figures.errors, f"the quiet probe failed: {figures}"
        return figures

    @contextmanager
    def running(self, pause: float = 0.01) -> Iterator[Figures]:
        """Probe in the background while the block runs; the figures are ``attacked``."""
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                self.once(self.attacked)
                self._stop.wait(pause)

        self._thread = threading.Thread(target=loop, name="probe", daemon=True)
        self._thread.start()
        try:
            yield self.attacked
        finally:
            self._stop.set()
            self._thread.join(30)
            self._thread = None

    def at_least(self, n: int = 5, timeout: float = 10.0) -> None:
        """Inside ``running``: wait until the attack's figures hold ``n`` answers (for an
        attack that is held open once made, which a fast machine makes in a few probes'
        time)."""
        deadline = time.monotonic() + timeout
        while len(self.attacked.latencies) < n and time.monotonic() < deadline:
            time.sleep(0.01)

    def flat_during(self, attack: Callable[[], T], *, quiet_n: int = 40) -> T:
        """``attack()`` while probing, flat against a quiet figure taken just before it.

        On a shared 2-core machine a neighbour's burst can spoil one run, so a run
        whose probe was not flat is played once more before that counts as a failure
        (an attack that really starves the loop fails both)."""
        for again in (False, True):
            quiet = self.measure(quiet_n, warmup=2)
            self.attacked = Figures()  # this attack's figures only
            with self.running():
                result = attack()
            try:
                self.assert_flat(quiet)
                return result
            except AssertionError:
                if again:
                    raise
        raise AssertionError("unreachable")

    def assert_flat(self, quiet: Figures, *, factor: float = 2.0, min_samples: int = 5) -> None:
        """During the attack: no error, enough answers, p99 within ``factor`` x quiet."""
        got = self.attacked
        assert not got.errors, f"the probe failed during the attack: {got}"
        assert len(got.latencies) >= min_samples, f"the probe was starved: {got}"
        bound = factor * quiet.p99 + SLACK_SECS
        assert got.p99 <= bound, f"probe p99 {got} against quiet {quiet} (bound {bound:.3f}s)"


def _status_kb(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise LookupError(field_name)


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` now, in MB."""
    return _status_kb(pid, "VmRSS") / 1024


def peak_rss_mb(pid: int) -> float:
    """The highest resident memory ``pid`` has had (VmHWM), in MB."""
    return _status_kb(pid, "VmHWM") / 1024

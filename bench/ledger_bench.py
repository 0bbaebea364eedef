"""The SQLite ledger writer alone: how many decisions per second it sustains.

    python bench/ledger_bench.py [--seconds 5] [--quick]

Prints one JSON document. A ``BackgroundWriter`` as ``humpyard serve`` builds
it (default batch size, linger and bound) writes to a ``SQLiteStore`` on a
temp file, in WAL mode as shipped. This process's main thread stands in for
the event loop: it submits decisions shaped like the gateway's (a ~1 KB
record with one attempt, usage and cost; every fourth a failover with two
attempts) plus a spend add for each, keeping the writer's queue between 2,000
and 4,000 decisions so that it always has work and never sheds. After one
second of warm-up, ``decisions_per_s`` is what the writer committed per
second of wall time over ``--seconds``. ``run.py`` pins this process to the
gateway's CPU, so the producer and the writer share one core, as the event
loop and the writer do in ``humpyard serve``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))

from humpyard.clock import SystemClock  # noqa: E402
from humpyard.metrics import GatewayMetrics, Metrics  # noqa: E402
from humpyard.store.sqlite import SQLiteStore  # noqa: E402
from humpyard.store.writer import BackgroundWriter  # noqa: E402

LOW, HIGH = 2_000, 4_000
CHUNK = 250


def template(i: int) -> dict[str, Any]:
    """A decision as the gateway records it (field for field; values vary a little)."""
    failover = i % 4 == 0
    attempts = [{"target": "primary", "provider": "up1", "model": "model-a", "class": None,
                 "status": 200, "failure_class": None, "latency_ms": 1.1}]
    if failover:
        attempts.insert(0, {"target": "backup", "provider": "up2", "model": "model-b",
                            "class": None, "status": 502, "failure_class": "server_error",
                            "latency_ms": 12.5, "error": "upstream answered 502"})
    return {
        "request_id": "", "ts": 0.0, "protocol": "openai", "model": "auto",
        "key_id": f"team-{i % 5}", "session_id": None, "stream": i % 3 == 0,
        "route": ("auto", "tools", "cheap")[i % 3], "route_type": "passthrough",
        "rule": "default", "rule_source": "requested_model", "skipped_rules": [],
        "excluded_targets": [], "policy_removed": [], "incapable_targets": [],
        "overrides": [], "cold_targets": [], "health_fail_open": False, "ranking": [],
        "attempts": attempts, "outcome": "ok", "status": 200, "error": None,
        "target": "primary", "provider": "up1", "fallback_crossed_classes": None,
        "prompt_tokens": 20 + i % 50, "usage": {"input_tokens": 10 + i % 40,
                                                "output_tokens": 1 + i % 30},
        "cost_usd": 1.2e-05, "latency_ms": 3.39 + i % 7, "notes": [],
    }


def measure(seconds: float, warm: float = 1.0) -> dict[str, Any]:
    clock = SystemClock()
    templates = [template(i) for i in range(64)]
    with tempfile.TemporaryDirectory(prefix="humpyard-ledger-bench-") as tmp:
        store = SQLiteStore(os.path.join(tmp, "ledger.db"), clock)
        writer = BackgroundWriter(store)
        metrics = GatewayMetrics(Metrics())
        writer.use_metrics(metrics)
        submitted = 0
        marks: list[tuple[float, int, float]] = []  # (time, written, cpu)
        started = time.perf_counter()
        stop_at = started + warm + seconds
        lag: list[float] = []
        while True:
            now = time.perf_counter()
            if not marks and now - started >= warm:
                marks.append((now, submitted - writer.pending, time.process_time()))
            if now >= stop_at:
                marks.append((now, submitted - writer.pending, time.process_time()))
                break
            if writer.queued > HIGH - CHUNK:
                lag.append(writer.lag())
                time.sleep(0.001)
                continue
            ts = clock.now()
            for _ in range(CHUNK if writer.queued < LOW else 50):
                d = dict(templates[submitted % 64])
                d["request_id"] = f"req_{submitted:012d}"
                d["ts"] = ts
                writer.submit_decision(d)
                writer.submit_spend(d["key_id"], "day:2027-01-15", d["cost_usd"])
                submitted += 1
        assert writer.close(timeout=120), "the writer did not drain"
        lost = sum(metrics.ledger_lost.samples().values())
        count = store.list_decisions(limit=1)  # the file is readable and not empty
        store.close()
    (t0, w0, c0), (t1, w1, c1) = marks
    [(_, size_sum, batches)] = metrics.ledger_batch_size.samples().values()
    [(_, write_sum, _)] = metrics.ledger_write_seconds.samples().values()
    return {
        "decisions_per_s": round((w1 - w0) / (t1 - t0)),
        "seconds": round(t1 - t0, 2),
        "decisions_written": submitted,
        "batches": batches,
        "mean_batch_items": round(size_sum / batches, 1),
        "mean_write_ms": round(write_sum / batches * 1000, 2),
        "cpu_us_per_decision": round((c1 - c0) / max(1, w1 - w0) * 1e6, 1),
        "median_lag_ms": round(statistics.median(lag) * 1000, 1) if lag else None,
        "lost": lost,
        "nonempty": bool(count[0]),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--quick", action="store_true", help="two seconds")
    a = p.parse_args()
    print(json.dumps(measure(2.0 if a.quick else a.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

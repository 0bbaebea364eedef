"""``make bench``: the gateway's own cost against a zero-delay simulated upstream.

    python bench/run.py [--quick] [--no-cold] [--no-planner] [--profile]
    PEERS=1 python bench/run.py      # also LiteLLM proxy and Switchyard's server

Writes ``bench/results/latest.json`` and ``latest.md`` and the README block
between ``<!-- bench:start -->`` and ``<!-- bench:end -->``. See
``bench/README.md`` for what each number means and how it is taken.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import coldstart  # noqa: E402
import httpload  # noqa: E402
import paced  # noqa: E402
import report  # noqa: E402
import spy  # noqa: E402
import targets as tg  # noqa: E402
import wrkload  # noqa: E402
from procs import (  # noqa: E402
    GATEWAY_CPU,
    LOAD_CPU,
    boost_self,
    can_pin,
    cores,
    cpu_seconds,
    free_port,
    machine_busy,
    pin,
    pin_self,
    rss_mb,
    running,
    start,
    stop,
    wait_http,
)

RESULTS = tg.BENCH / "results"
RUNS = (("buffered_c1", False, 1), ("stream_c1", True, 1),
        ("buffered_c32", False, 32), ("stream_c32", True, 32))


def machine() -> dict[str, Any]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": cores(), "cpu_model": model, "python": platform.python_version(),
            "kernel": f"{platform.system()} {platform.release()}",
            "pinning": f"gateway on cpu {GATEWAY_CPU}; simulator, load generator and latency "
                       f"client on cpu {LOAD_CPU}" if can_pin() else "none (taskset missing "
                       "or a single core)",
            "loadgen": "wrk (throughput) + raw asyncio client (latency)" if wrkload.have_wrk()
            else "raw asyncio client only (wrk missing)",
            "loadavg_before": _loadavg()}


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


class Meter:
    """CPU used by the target, and by everything else on the machine, over an interval."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.target_cpu0 = sum(cpu_seconds(p) for p in pids[:1])
        self.ours0 = sum(cpu_seconds(p) for p in pids) + _self_cpu()
        self.busy0, self.total0 = machine_busy()

    def target_cpu(self) -> float:
        return sum(cpu_seconds(p) for p in self.pids[:1]) - self.target_cpu0

    def other_share(self) -> float:
        busy, total = machine_busy()
        hz = os.sysconf("SC_CLK_TCK")
        ours = (sum(cpu_seconds(p) for p in self.pids) + _self_cpu() - self.ours0) * hz
        return max(0.0, (busy - self.busy0 - ours) / max(1.0, total - self.total0))


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


LATENCY_ROUNDS = 3


def bench_target(t: tg.Target, port: int, pid: int | None, sim_pid: int,
                 a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"label": t.label, "version": t.version, "port": port}
    # warm: connections, lazy imports, caches
    for stream in (False, True):
        httpload.run_latency("127.0.0.1", port, model=tg.ROUTE, stream=stream, connections=4,
                             warmup=0.0, seconds=a.warm, auth=t.auth)
    watched = [pid, sim_pid] if pid else [sim_pid]  # first: whose CPU per request is shown
    if pid:
        time.sleep(1.0)
        out["memory"] = {"idle_mb": rss_mb(pid)}
    meter = Meter(watched)
    latency = {}
    for run, stream, conns in RUNS:
        # One connection: three rounds, the median one (by p50) is kept, so that a
        # burst of other work on the machine skews one round, not the figure.
        rounds = []
        for _ in range(LATENCY_ROUNDS if conns == 1 else 1):
            before = meter.target_cpu()
            s = httpload.run_latency("127.0.0.1", port, model=tg.ROUTE, stream=stream,
                                     connections=conns, warmup=0.5 if not rounds else 0.1,
                                     seconds=a.seconds / (LATENCY_ROUNDS if conns == 1 else 1),
                                     auth=t.auth)
            got = httpload.summarize(s)
            if s.completed:
                used = meter.target_cpu() - before
                got["cpu_us_per_request"] = round(used / s.completed * 1e6)
            rounds.append(got)
        rounds.sort(key=lambda r: r["total_p50_ms"] if r["total_p50_ms"] is not None
                    else float("inf"))
        latency[run] = rounds[len(rounds) // 2]
        if len(rounds) > 1:
            latency[run]["rounds_p50_ms"] = [r["total_p50_ms"] for r in rounds]
        print(f"    {run:13s} p50 {latency[run]['total_p50_ms']} ms  p99 "
              f"{latency[run]['total_p99_ms']} ms  {latency[run]['rps']} req/s", flush=True)
    out["latency"] = latency
    peak = [0.0]

    def sample() -> None:
        if pid:
            peak[0] = max(peak[0], rss_mb(pid) or 0.0)

    thr = {}
    for run, stream in (("buffered_c32", False), ("stream_c32", True)):
        thr[run] = wrkload.throughput(port, model=tg.ROUTE, stream=stream, connections=32,
                                      seconds=a.wrk_seconds, auth=t.auth, during=sample)
        print(f"    wrk {run:9s} {thr[run].get('rps')} req/s  errors "
              f"{thr[run].get('errors')}", flush=True)
    out["throughput"] = thr
    if pid:
        out["memory"]["peak_mb"] = peak[0]
        out["memory"]["after_mb"] = rss_mb(pid)
    out["other_cpu_share"] = round(meter.other_share(), 3)
    return out


def run_server(t: tg.Target, port: int, tmp: Path, sim_pid: int, a: argparse.Namespace,
               results: dict[str, Any]) -> None:
    print(f"  {t.label} ...", flush=True)
    if t.skipped:
        results["targets"][t.name] = {"label": t.label, "skipped": t.skipped}
        return
    assert t.cmd is not None
    proc = start(t.name, pin(t.cmd, GATEWAY_CPU), tmp / f"{t.name}.log", env=t.env)
    try:
        up = wait_http(port, t.ready_path, proc, t.ready_timeout)
        res = bench_target(t, port, proc.pid, sim_pid, a)
        res["startup_s"] = round(up, 2)
        if a.profile and t.name == "humpyard":
            res["profile"] = profile(port, proc.pid, t, a)
        results["targets"][t.name] = res
    except Exception as e:  # noqa: BLE001 - a server that will not run is a result too
        results["targets"][t.name] = {"label": t.label, "version": t.version,
                                      "skipped": f"{type(e).__name__}: {e}"[:600]}
        print(f"    skipped: {e}", flush=True)
    finally:
        stop(proc)


def profile(port: int, pid: int, t: tg.Target, a: argparse.Namespace) -> dict[str, Any]:
    raw = RESULTS / "profile-raw.txt"
    seconds = max(4.0, a.wrk_seconds)
    done: dict[str, Any] = {}

    def load() -> None:
        done.update(wrkload.throughput(port, model=tg.ROUTE, stream=False, connections=32,
                                       seconds=seconds + 2, auth=t.auth))
    import threading
    th = threading.Thread(target=load)
    th.start()
    time.sleep(1.0)
    err = spy.record(pid, seconds, raw)
    th.join()
    if err:
        return {"error": err}
    (RESULTS / "profile.txt").write_text(
        f"# py-spy, humpyard serve, buffered, 32 connections, {done.get('rps')} req/s "
        "while sampled\n" + spy.summarize(raw))
    raw.unlink(missing_ok=True)
    return {"summary": "bench/results/profile.txt", "rps_while_sampled": done.get("rps")}


def planner(a: argparse.Namespace) -> dict[str, Any]:
    cmd = pin([sys.executable, str(tg.BENCH / "planner_bench.py"), "--budget",
               str(0.4 if a.quick else 1.0)], GATEWAY_CPU)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"exit {res.returncode}: {res.stderr.strip()[-500:]}"}


def ledger(a: argparse.Namespace) -> dict[str, Any]:
    """The SQLite ledger writer's sustained decisions/s, on the gateway's CPU."""
    cmd = pin([sys.executable, str(tg.BENCH / "ledger_bench.py"), "--seconds",
               str(2.0 if a.quick else 5.0)], GATEWAY_CPU)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
    except (IndexError, ValueError):
        return {"error": f"exit {res.returncode}: {res.stderr.strip()[-500:]}"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
    p.add_argument("--no-cold", action="store_true")
    p.add_argument("--no-planner", action="store_true")
    p.add_argument("--no-ledger", action="store_true")
    p.add_argument("--no-paced", action="store_true", help="skip the paced-stream scenario")
    p.add_argument("--profile", action="store_true", help="py-spy humpyard under load")
    p.add_argument("--no-readme", action="store_true", help="leave README.md alone")
    a = p.parse_args()
    a.seconds, a.wrk_seconds, a.warm = (1.5, 3, 0.5) if a.quick else (4.0, 6, 1.0)
    peers = os.environ.get("PEERS", "") == "1"
    t_start = time.perf_counter()
    pin_self(LOAD_CPU)
    niceness = None if os.environ.get("BENCH_NICE") == "0" else boost_self()
    if not wrkload.have_wrk():
        print(wrkload.INSTALL_HINT, file=sys.stderr)
    cmd = ("PEERS=1 " if peers else "") + "python bench/run.py" + \
        "".join(f" {x}" for x in sys.argv[1:])
    results: dict[str, Any] = {"command": cmd, "machine": machine(), "targets": {},
                               "priority": f"nice {niceness}" if niceness is not None
                               else "default",
                               "started": dt.datetime.now(dt.UTC).isoformat(
                                   timespec="seconds")}
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not a.no_planner:
        print("planner ...", flush=True)
        results["planner"] = planner(a)
    if not a.no_ledger:
        print("ledger writer ...", flush=True)
        results["ledger"] = ledger(a)
        print(f"    {results['ledger'].get('decisions_per_s')} decisions/s", flush=True)
    with tempfile.TemporaryDirectory(prefix="humpyard-bench-") as tmp_s, running([]) as procs:
        tmp = Path(tmp_s)
        sim_port = free_port()
        sim = start("simulator", pin([str(tg.VENV_BIN / "humpyard"), "--log-level", "WARNING",
                                      "simulate", "--port", str(sim_port), "--profile", "zero"],
                                     LOAD_CPU), tmp / "simulator.log")
        procs.append(sim)
        wait_http(sim_port, "/health", sim, 30)
        if not a.no_cold:
            print("cold start ...", flush=True)
            results["cold_start"] = coldstart.measure(sim_port, repeat=3 if a.quick else 5)
        print("  direct (simulator) ...", flush=True)
        results["targets"]["direct"] = bench_target(
            tg.Target("direct", "simulator, direct"), sim_port, None, sim.pid, a)
        servers = [(tg.humpyard, {"ledger": False}), (tg.humpyard, {"ledger": True})]
        if peers:
            servers += [(tg.litellm, {}), (tg.switchyard, {})]
        for make, kw in servers:
            port = free_port()
            run_server(make(tmp, sim_port, port, **kw), port, tmp, sim.pid, a, results)
        if not a.no_paced:
            print("paced streams ...", flush=True)
            try:
                results["paced"] = paced.measure([1000, 2000], 4.0 if a.quick else 8.0, tmp)
            except Exception as e:  # noqa: BLE001 - a scenario that cannot run is a result too
                results["paced"] = {"skipped": f"{type(e).__name__}: {e}"[:600]}
        if not peers:
            for name, label in (("litellm", "LiteLLM proxy"),
                                ("switchyard", "Switchyard server (Rust)")):
                results["targets"][name] = {"label": label, "skipped": "run with PEERS=1"}
    results["machine"]["loadavg_after"] = _loadavg()
    results["added"] = report.added(results)
    results["goals"] = report.goals(results)
    results["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    results["duration_s"] = round(time.perf_counter() - t_start, 1)
    (RESULTS / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    md = report.markdown(results)
    (RESULTS / "latest.md").write_text(md)
    if not a.no_readme:
        report.replace_block(tg.ROOT / "README.md", report.readme_block(results))
    print("\n" + md)
    print(f"wrote {RESULTS.relative_to(tg.ROOT)}/latest.json, latest.md "
          f"({results['duration_s']:.0f} s); command: {shlex.quote(cmd)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

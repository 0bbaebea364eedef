"""A/B of gateway variants, interleaved so that a noisy machine hurts them alike.

    python bench/ab.py [--variants stock,quiet,fast-loop] [--rounds 5] [--seconds 3]
                       [--connections 1] [--site bench/.peers/fast-site]
    python bench/ab.py --variants rev:HEAD~3,rev:worktree   # two revisions, as shipped

A variant is one of ``variant_server.py``'s experiments, or ``rev:<git revision>``:
``humpyard serve`` as that revision ships it (its ``shared/`` exported with
``git archive``; ``rev:worktree`` is the working tree, uncommitted changes included;
``rev:/some/dir`` serves ``/some/dir/shared``, e.g. a copy taken before an edit;
a ``@NAME=value`` tail, e.g. ``rev:HEAD@PYTHONMALLOC=malloc``, adds an environment
variable to that variant's server, and a ``@--flag=value`` tail an argument to its
``serve``, e.g. ``rev:HEAD@--workers=2``).

Starts a simulator and one ``variant_server.py`` per variant (all pinned to
the gateway CPU, idle but one at a time), then for each round drives every
variant in turn with wrk (or the asyncio client) and reads the server's CPU
time from /proc. Prints, per variant, the best and median of: CPU µs per
request, p50 latency and requests/s. The *best* is the steadier estimate of a
variant's cost when other work shares the machine.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import targets as tg
import wrkload
from procs import (
    GATEWAY_CPU,
    LOAD_CPU,
    boost_self,
    cpu_seconds,
    free_port,
    in_turn,
    pin,
    pin_self,
    running,
    start,
    wait_http,
)


def server_cmd(variant: str, cfg: Path, port: int, site: str,
               tmp: Path) -> tuple[list[str], dict[str, str]]:
    """The command (and environment) that serves ``variant`` on ``port``."""
    if not variant.startswith("rev:"):
        return [sys.executable, str(tg.BENCH / "variant_server.py"), "--config", str(cfg),
                "--port", str(port), "--variant", variant, "--site", site], {}
    rev, *settings = variant[4:].split("@")  # rev:HEAD@NAME=value: one more env var
    # (and rev:HEAD@--workers=2: one more argument to ``serve``)
    args = [kv for kv in settings if kv.startswith("--")]
    extra = dict(kv.split("=", 1) for kv in settings if not kv.startswith("--"))
    shared = tg.ROOT / "shared"
    if rev.startswith("/"):  # a copy of a tree, e.g. before an uncommitted change
        shared = Path(rev) / "shared"
    elif rev != "worktree":
        out = tmp / ("rev-" + "".join(c if c.isalnum() else "_" for c in rev))
        archive = subprocess.run(["git", "-C", str(tg.ROOT), "archive", rev, "shared"],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(out, filter="data")
        shared = out / "shared"
    code = "import sys; from humpyard.cli import main; sys.exit(main())"
    return ([sys.executable, "-c", code, "serve", "--config",
             str(cfg), "--host", "127.0.0.1", "--port", str(port), *args],
            {"PYTHONPATH": str(shared), **extra})


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--variants", default="stock,quiet,fast-loop")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3)
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--ledger", action="store_true")
    p.add_argument("--site", default=str(tg.PEERS_DIR / "fast-site"))
    a = p.parse_args()
    pin_self(LOAD_CPU)
    boost_self()
    names = a.variants.split(",")
    samples: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp_s, running([]) as procs:
        tmp = Path(tmp_s)
        sim_port = free_port()
        sim = start("sim", pin([str(tg.VENV_BIN / "humpyard"), "--log-level", "WARNING",
                                "simulate", "--port", str(sim_port), "--profile", "zero"],
                               LOAD_CPU), tmp / "sim.log")
        procs.append(sim)
        wait_http(sim_port, "/health", sim, 30)
        cfg = tmp / "gw.toml"
        cfg.write_text(tg.humpyard_config(sim_port, tmp / "bench.db" if a.ledger else None))
        servers = {}
        for n in names:
            port = free_port()
            cmd, env = server_cmd(n, cfg, port, a.site, tmp)
            log = "".join(c if c.isalnum() else "-" for c in n) + ".log"
            proc = start(n, pin(cmd, GATEWAY_CPU), tmp / log, env=env)
            procs.append(proc)
            wait_http(port, "/v1/models", proc, 60)
            wrkload.throughput(port, model=tg.ROUTE, stream=a.stream, connections=4,
                               seconds=2)
            servers[n] = (port, proc)
        for i in range(a.rounds):
            for n, (port, proc) in in_turn(list(servers.items()), i):
                c0 = cpu_seconds(proc.pid)
                r = wrkload.throughput(port, model=tg.ROUTE, stream=a.stream,
                                       connections=a.connections, seconds=a.seconds)
                used = cpu_seconds(proc.pid) - c0
                if r.get("requests"):
                    samples[n].append({"cpu_us": used / r["requests"] * 1e6,
                                       "p50_ms": r["p50_ms"], "rps": r["rps"]})
    out: dict[str, Any] = {"connections": a.connections, "stream": a.stream,
                           "rounds": a.rounds, "seconds": a.seconds, "variants": {}}
    for n, rows in samples.items():
        if not rows:
            continue
        cpu = [r["cpu_us"] for r in rows]
        p50 = [r["p50_ms"] for r in rows]
        rps = [r["rps"] for r in rows]
        out["variants"][n] = {
            "cpu_us_best": round(min(cpu)), "cpu_us_median": round(statistics.median(cpu)),
            "p50_ms_best": round(min(p50), 2), "p50_ms_median": round(statistics.median(p50), 2),
            "rps_best": round(max(rps)), "rps_median": round(statistics.median(rps))}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The paced-stream scenario: many concurrent streams whose upstream sends a chunk
every 200 ms, directly and through the gateway.

    python bench/paced.py [--streams 1000,2000] [--seconds 8]   # alone
    (``make bench`` runs it too: ``run.py`` calls ``measure``)

LLM answers last seconds, so what a gateway runs out of is calls in flight. The
upstream here (``serve``: raw asyncio, uvloop when installed) answers every
``stream: true`` POST with 11 content events 200 ms apart, then usage and
``[DONE]`` (2.2 s per answer when called directly). ``load`` keeps N keep-alive
connections each asking for one stream after another and counts the streams
that end inside the measured window: streams/s, and the time per stream
(p50/p99/mean). The goal: through the gateway, at most 5 % added to the direct
stream time on one core; the gateway's CPU share during the run says where the
core's time goes when it is not met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

EVENTS = 11
INTERVAL = 0.2


def _use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _event(i: int, final: bool = False) -> bytes:
    delta: dict[str, Any] = {"content": f"tok{i} "}
    if i == 0:
        delta["role"] = "assistant"
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": "stop" if final
                          else None}]}
    data = b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


EVENT_BYTES = [_event(i, final=i == EVENTS - 1) for i in range(EVENTS)]
USAGE = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":11,"total_tokens":16}}'
         b'\n\n')
TAIL = (b"%x\r\n%s\r\n" % (len(USAGE), USAGE)
        + b"%x\r\n%s\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n") + b"0\r\n\r\n")
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")
SMALL = b'{"object":"list","data":[]}'


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            if not head.startswith(b"POST"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(SMALL), SMALL))
                continue
            writer.write(HEAD + EVENT_BYTES[0])
            for i in range(1, EVENTS):
                await asyncio.sleep(INTERVAL)
                writer.write(EVENT_BYTES[i])
            await asyncio.sleep(INTERVAL)
            writer.write(TAIL)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def serve(port: int) -> None:
    """Serve the paced upstream on 127.0.0.1:``port`` until killed."""
    _use_uvloop()

    async def main() -> None:
        server = await asyncio.start_server(_answer, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()
    asyncio.run(main())


def _request(port: int, model: str) -> bytes:
    body = json.dumps({"model": model, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (port, len(body), body))


async def _stream(reader: asyncio.StreamReader) -> bool:
    """Read one chunked answer to its end; False if it was not a 200."""
    head = await reader.readuntil(b"\r\n\r\n")
    ok = head.startswith(b"HTTP/1.1 200")
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        await reader.readexactly(size + 2)
        if size == 0:
            return ok


async def _load(port: int, streams: int, warm: float, seconds: float,
                model: str) -> tuple[list[float], int]:
    """The stream times that ended in the window, and the errors."""
    raw = _request(port, model)
    start = time.monotonic()
    lo, hi = start + warm, start + warm + seconds
    durations: list[float] = []
    errors = 0

    async def worker(i: int) -> None:
        nonlocal errors
        await asyncio.sleep(INTERVAL * i / streams)  # spread the starts over one tick
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            errors += 1
            return
        try:
            while time.monotonic() < hi:
                t0 = time.monotonic()
                writer.write(raw)
                ok = await _stream(reader)
                t1 = time.monotonic()
                if not ok:
                    errors += 1
                elif lo <= t1 <= hi:
                    durations.append(t1 - t0)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            errors += 1
        finally:
            writer.close()
    await asyncio.gather(*(worker(i) for i in range(streams)))
    return durations, errors


def _summary(durations: list[float], errors: int, streams: int,
             seconds: float) -> dict[str, Any]:
    durations = sorted(durations)

    def pct(q: float) -> float | None:
        return round(durations[min(len(durations) - 1, int(q * len(durations)))] * 1000) \
            if durations else None
    return {"streams": streams, "completed": len(durations),
            "streams_per_s": round(len(durations) / seconds, 1),
            "p50_ms": pct(0.5), "p99_ms": pct(0.99),
            "mean_ms": round(statistics.fmean(durations) * 1000) if durations else None,
            "errors": errors}


def load(port: int, streams: int, *, warm: float = 3.0, seconds: float = 8.0,
         model: str = "bench") -> dict[str, Any]:
    """Drive ``streams`` concurrent streams at ``port``; see the module docstring."""
    return load_split([port], streams, warm=warm, seconds=seconds, model=model)


def load_split(ports: list[int], streams: int, *, warm: float = 3.0, seconds: float = 8.0,
               model: str = "bench") -> dict[str, Any]:
    """``load``, the ``streams`` shared evenly between ``ports`` at once, as one result."""
    _use_uvloop()

    async def run() -> list[tuple[list[float], int]]:
        return await asyncio.gather(*(_load(p, streams // len(ports), warm, seconds, model)
                                      for p in ports))
    parts = asyncio.run(run())
    return _summary([d for ds, _ in parts for d in ds], sum(e for _, e in parts), streams,
                    seconds)


def _sched(pid: int | str) -> tuple[float, float]:
    """(seconds on a CPU, seconds waiting in the run queue) of ``pid`` so far (Linux)."""
    try:
        run, wait, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(run) / 1e9, int(wait) / 1e9


GATEWAYS = (("humpyard", 1, False, 1), ("humpyard_ledger", 1, True, 1),
            ("humpyard_w2", 2, True, 1), ("humpyard_x2", 1, True, 2),
            ("humpyard_w2_cores", 2, True, 1))
"""The rows through the gateway, as (name, workers, ledger, processes): one process
without and with the SQLite ledger; ``--workers 2`` on the ledger file (what the
workers share; without one they would share a private file of the same kind); and, for
reference, two separate single-worker ``serve`` processes with a ledger each, the load
split between them. Every process is pinned to
the gateway's core. ``humpyard_w2`` against ``humpyard_ledger`` says what two workers
cost per stream on one core, not how far two cores go; against ``humpyard_x2`` it says
what of that is the sharing (two processes taking turns on one core cost more per
stream than one, whatever they share: docs/decisions/0003-performance.md).

``humpyard_w2_cores`` (``SPREAD``; only with two cores or more) runs ``--workers 2``
with a core per worker: the first on the gateway's core, the second on a core of its
own or, on two cores, on the load generator's; the parent beside the load. It reports
each worker's CPU per stream (its share of the streams is its share of the client
connections, counted mid-load), to hold against ``humpyard_ledger``'s: the worker
alone on its core is the one that compares."""
SPREAD = frozenset({"humpyard_w2_cores"})


def measure(counts: list[int], seconds: float, tmp: Path,
            gateways: tuple[tuple[str, int, bool, int], ...] = GATEWAYS) -> dict[str, Any]:
    """Direct and through ``humpyard serve`` (the ``GATEWAYS`` rows) for each count."""
    import targets as tg
    from procs import (
        GATEWAY_CPU,
        LOAD_CPU,
        cores,
        free_port,
        pin,
        pin_process,
        spread_cpus,
        start,
        stop,
        tree,
        wait_http,
    )

    out: dict[str, Any] = {"interval_ms": INTERVAL * 1000, "events": EVENTS,
                           "direct_answer_ms": round(EVENTS * INTERVAL * 1000)}
    up_port = free_port()
    up = start("paced", pin([sys.executable, __file__, "--serve", str(up_port)], LOAD_CPU),
               tmp / "paced.log")
    try:
        wait_http(up_port, "/health", up, 30)
        for who, workers, ledger, copies in gateways:
            spread = who in SPREAD
            if spread and cores() < 2:
                continue
            procs, ports = [], []
            cores_of: dict[int, int] = {}  # a spread row's workers and their cores
            try:
                for i in range(copies):
                    gw_port = free_port()
                    home = tmp / f"{who}-{i}" if copies > 1 else tmp
                    home.mkdir(exist_ok=True)
                    t = tg.humpyard(home, up_port, gw_port, ledger=ledger, workers=workers)
                    assert t.cmd is not None
                    procs.append(start(f"{who}-{i}-paced",
                                       pin(t.cmd, LOAD_CPU if spread else GATEWAY_CPU),
                                       tmp / f"{who}-{i}-paced.log"))
                    ports.append(gw_port)
                    wait_http(gw_port, t.ready_path, procs[-1], 30)
                if spread:
                    kids = sorted(p for p in tree(procs[0].pid) if p != procs[0].pid)
                    cores_of = dict(zip(kids, spread_cpus(), strict=False))
                    for pid, cpu in cores_of.items():
                        pin_process(pid, cpu)
                for n in counts:
                    row = out.setdefault(f"c{n}", {})
                    if "direct" not in row:
                        row["direct"] = load(up_port, n, seconds=seconds)
                    _through(row, who, workers, [g.pid for g in procs], ports, n, seconds,
                             cores_of)
            finally:
                for g in procs:
                    stop(g)
    finally:
        stop(up)
    return out


def measure_variants(variants: list[str], streams: int, seconds: float, rounds: int,
                     tmp: Path, *, ledger: bool = False) -> dict[str, Any]:
    """``gateway_cpu_us_per_stream`` of several gateways in one run, A/B style: every
    variant (``ab.py``'s, e.g. ``rev:047106d`` or ``rev:worktree``) is started pinned
    to the gateway CPU, idle but one at a time, and in each round driven in turn with
    ``streams`` paced streams for ``seconds`` (in the other order every other round:
    ``procs.in_turn``). The best and median per variant, and each later variant's
    CPU per stream over the first's, round by round (``cpu_ratio_to_first``).
    ``ledger``: each variant writes its own SQLite ledger (``--workers`` needs one,
    e.g. ``rev:HEAD,rev:HEAD@--workers=2``)."""
    import targets as tg
    from ab import server_cmd
    from procs import (
        GATEWAY_CPU,
        LOAD_CPU,
        cpu_seconds,
        free_port,
        in_turn,
        pin,
        start,
        stop,
        wait_http,
    )

    up_port = free_port()
    up = start("paced", pin([sys.executable, __file__, "--serve", str(up_port)], LOAD_CPU),
               tmp / "paced.log")
    servers: dict[str, tuple[int, Any]] = {}
    samples: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    try:
        wait_http(up_port, "/health", up, 30)
        for v in variants:
            port = free_port()
            name = "".join(c if c.isalnum() else "-" for c in v)
            cfg = tmp / f"{name}.toml"
            cfg.write_text(tg.humpyard_config(up_port, tmp / f"{name}.db" if ledger else None))
            cmd, env = server_cmd(v, cfg, port, "", tmp)
            log = tmp / f"{name}.log"
            servers[v] = (port, start(v, pin(cmd, GATEWAY_CPU), log, env=env))
            wait_http(port, "/v1/models", servers[v][1], 60)
        for i in range(rounds):
            for v, (port, proc) in in_turn(list(servers.items()), i):
                cpu0 = cpu_seconds(proc.pid)
                r = load(port, streams, warm=1.0, seconds=seconds)
                cpu = cpu_seconds(proc.pid) - cpu0
                if r["completed"]:
                    # CPU over the whole load (warm-up and drain too) per stream started
                    # in it: the same ratio for every variant of a round
                    samples[v].append({"cpu_us": cpu / r["completed"] * 1e6,
                                       "mean_ms": r["mean_ms"], "errors": r["errors"]})
                    print(f"    {v}: {samples[v][-1]}", flush=True)
    finally:
        for _, proc in servers.values():
            stop(proc)
        stop(up)
    out: dict[str, Any] = {"streams": streams, "seconds": seconds, "rounds": rounds,
                           "variants": {}}
    for v, rows in samples.items():
        if rows:
            cpu = [r["cpu_us"] for r in rows]
            out["variants"][v] = {
                "gateway_cpu_us_per_stream_best": round(min(cpu)),
                "gateway_cpu_us_per_stream_median": round(statistics.median(cpu)),
                "mean_ms_median": round(statistics.median(r["mean_ms"] for r in rows)),
                "errors": sum(int(r["errors"]) for r in rows)}
    first = samples[variants[0]]
    for v in variants[1:]:  # CPU per stream over the first variant's, round by round
        pairs = [b["cpu_us"] / a["cpu_us"] for a, b in zip(first, samples[v], strict=False)]
        if v in out["variants"] and pairs:
            out["variants"][v]["cpu_ratio_to_first"] = [round(r, 3) for r in pairs]
            out["variants"][v]["cpu_ratio_to_first_median"] = round(statistics.median(pairs), 3)
    return out


def _through(row: dict[str, Any], who: str, workers: int, pids: list[int], ports: list[int],
             n: int, seconds: float, cores_of: dict[int, int] | None = None) -> None:
    """One measured run through the gateways at ``ports`` (the load split between them)
    into ``row[who]``; with ``cores_of`` (worker pid: its core), each worker's CPU per
    stream too (``per_worker``)."""
    import threading

    from procs import LOAD_CPU, connections_by_pid, cpu_seconds

    def cpu_now() -> float:
        return sum(cpu_seconds(p) for p in pids)  # each parent and every worker

    def waited() -> float:
        return sum(_sched(p)[1] for p in pids)
    direct = row["direct"]
    cpu0, t0 = cpu_now(), time.monotonic()
    cores_of = cores_of or {}
    each0 = {pid: cpu_seconds(pid) for pid in cores_of}
    held: dict[int, int] = {}  # each worker's client connections, mid-load
    sampler = threading.Timer(1.0 + seconds / 2, lambda: held.update(
        connections_by_pid(ports[0], list(cores_of)))) if cores_of else None
    if sampler is not None:
        sampler.start()
    gw_wait0, (_, me_wait0) = waited(), _sched("self")
    via = load_split(ports, n, seconds=seconds)
    cpu = cpu_now() - cpu0
    if sampler is not None:
        sampler.join()
    if via["completed"] and sum(held.values()):
        via["per_worker"] = [
            {"core": core, "shares_core_with_load": core == LOAD_CPU,
             "connections": held.get(pid, 0),
             "cpu_us_per_stream": round((cpu_seconds(pid) - each0[pid]) / (
                 via["completed"] * held[pid] / sum(held.values())) * 1e6)
             if held.get(pid) else None}
            for pid, core in cores_of.items()]
    wall = time.monotonic() - t0
    via["workers"] = workers
    via["processes"] = len(pids)
    via["gateway_cpu_share"] = round(cpu / wall, 2)
    # time ready to run but waiting for a CPU (other processes had it; with several
    # workers, the parent's, which serves nothing)
    via["gateway_runqueue_wait_share"] = round((waited() - gw_wait0) / wall, 2)
    via["load_client_runqueue_wait_share"] = round((_sched("self")[1] - me_wait0) / wall, 2)
    if via["completed"]:
        via["gateway_cpu_us_per_stream"] = round(cpu / via["completed"] * 1e6)
    added = None
    if direct["mean_ms"] and via["mean_ms"]:
        added = round((via["mean_ms"] - direct["mean_ms"]) / direct["mean_ms"] * 100, 1)
    row[who] = via
    row["added_pct_mean" if who == "humpyard" else f"added_pct_mean_{who}"] = added
    print(f"    paced c{n}: direct {direct['streams_per_s']}/s {direct['mean_ms']} ms; "
          f"{who} {via['streams_per_s']}/s {via['mean_ms']} ms "
          f"(+{added}%), gateway CPU {via['gateway_cpu_share']:.0%} "
          f"({via.get('gateway_cpu_us_per_stream')} us/stream), waiting for a "
          f"CPU {via['gateway_runqueue_wait_share']:.0%}"
          + "".join(f"; worker on core {w['core']}: {w['connections']} connections, "
                    f"{w['cpu_us_per_stream']} us/stream" for w in via.get("per_worker", ())),
          flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--serve", type=int, help="serve the paced upstream on this port")
    p.add_argument("--streams", default="1000,2000")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--variants", help="compare gateways in one run (ab.py's variants, "
                   "e.g. rev:047106d,rev:worktree); --streams is then one count")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ledger", action="store_true",
                   help="with --variants: each variant writes a SQLite ledger")
    p.add_argument("--rows", default="humpyard,humpyard_ledger,humpyard_w2,humpyard_x2,"
                   "humpyard_w2_cores",
                   help="the gateway rows to run, in this order (names from GATEWAYS)")
    a = p.parse_args()
    if a.serve:
        serve(a.serve)
        return 0
    if a.variants:
        with tempfile.TemporaryDirectory(prefix="humpyard-paced-") as tmp:
            res = measure_variants(a.variants.split(","), int(a.streams.split(",")[0]),
                                   a.seconds, a.rounds, Path(tmp), ledger=a.ledger)
        print(json.dumps(res, indent=2))
        return 0
    with tempfile.TemporaryDirectory(prefix="humpyard-paced-") as tmp:
        rows = a.rows.split(",")  # in the order given
        res = measure([int(x) for x in a.streams.split(",")], a.seconds, Path(tmp),
                      tuple(g for name in rows for g in GATEWAYS if g[0] == name))
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

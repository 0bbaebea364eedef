"""A bounded soak: mixed traffic and upstream faults at 32 concurrent connections.

``HUMPYARD_SOAK_SECS`` sets the measured phase (default 10; ``make soak``
runs 120). After a warm-up the test measures, and at the end asserts:

- every answer's status is in the set its kind of request allows, every
  stream ends with ``[DONE]`` or an error event, and no request took longer
  than its timeouts allow (nothing hangs);
- every chat/messages request left exactly one decision in the ledger;
- no asyncio task is left over in the server loop (counted through a debug
  route of a test-only wrapper app, never in production code);
- no upstream connection is left checked out of the pool, and no socket is
  left open beyond the pool's idle keep-alive connections (``/proc/self/fd``);
- resident memory grew by less than ``RSS_LIMIT_MB`` after the warm-up.

The fake upstreams run in a child process, so their sockets and their record
of every request are not counted as the gateway's.

``test_soak_ledger`` is the ledger under sustained load: ``humpyard serve``
(a child process, SQLite ledger) in front of ``humpyard simulate --profile
zero``, ``LEDGER_CONNECTIONS`` (256) connections of chat traffic for the same
``HUMPYARD_SOAK_SECS``. Its report gives the server's resident memory (warm
idle, peak, after) and the ledger writer's lag and queue depth sampled from
``/metrics`` every ``SAMPLE_SECS``; it asserts memory after the load within
``RSS_FACTOR`` times the warm idle figure and at most ``RSS_EXTRA_MB`` above
it, the lag within ``MAX_LAG_SECS`` (docs/operations.md, "The ledger
writer") in all samples but one in a hundred (or one), and within
``STALL_LAG_SECS`` in every one, nothing lost, and one decision per answer.
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import os
import random
import re
import sqlite3
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import httpx
import pytest

from humpyard.clock import SystemClock
from humpyard.config import load_config_text
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from humpyard.store import open_store
from tests.durability.load import ChatLoad
from tests.durability.process import ServeProcess, SimulatorProcess
from tests.faults.harness import MSG, drill_config
from tests.faults.steps import (
    Hold,
    Mixed,
    ResetMidBody,
    Slowloris,
    StallAfter,
    error_object_200,
    invalid_sse,
    truncated_json,
)
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import ServerThread
from tests.support.steps import (
    delay,
    ok,
    reset,
    status,
    stream_error,
    stream_then_fail,
)

SOAK_SECS = float(os.environ.get("HUMPYARD_SOAK_SECS", "10"))
WARMUP_SECS = min(5.0, max(2.0, SOAK_SECS * 0.1))
CONNECTIONS = 32
A_TIMEOUT = 1.0
MAX_BODY = 64 * 1024
RSS_LIMIT_MB = 30
SETTLE_SECS = 10.0
LEDGER_CONNECTIONS = 256
SAMPLE_SECS = 0.5
RSS_FACTOR = 1.5
RSS_EXTRA_MB = 20.0
MAX_LAG_SECS = 1.0  # every sample but one in a hundred (and one stall, on a short run)
STALL_LAG_SECS = 2.0  # that one, on a loaded machine, and no more
# The slowest legitimate request: provider a's whole-call timeout, then b,
# under 32-way contention for one interpreter shared with the upstreams.
LATENCY_BOUND = 10.0

UPSTREAM_FAILURES = {200, 429, 500, 502, 504}
EXPECTED: dict[str, set[int]] = {
    "failover": {200}, "failover-stream": {200}, "anthropic-stream": {200},
    "solo": UPSTREAM_FAILURES, "solo-stream": UPSTREAM_FAILURES,
    "bystander": {200}, "bad-json": {400}, "unknown-model": {404}, "too-large": {413},
    "admin": {200}, "abort": {200}, "client-timeout": UPSTREAM_FAILURES | {0},
}


class Instrumented:
    """The gateway app plus ``GET /__debug/state``: the server loop's tasks and the
    upstream pool, read inside the loop that owns them. Test-only."""

    def __init__(self, app: Any, gw: Gateway):
        self.app = app
        self.gw = gw

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/__debug/state":
            await self.app(scope, receive, send)
            return
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        pool = self.gw.client.fast
        conns = [c for c in pool.connections if not c.is_closed()]
        body = json.dumps({
            "tasks": sorted(repr(t.get_coro()) for t in tasks),
            "pool_open": len(conns),
            "pool_busy": [repr(c) for c in conns if not c.is_idle()],
        }).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


@dataclass
class Tally:
    statuses: dict[str, Counter] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    slowest: dict[str, float] = field(default_factory=dict)
    gateway_requests: int = 0

    def add(self, kind: str, code: int, elapsed: float) -> None:
        self.statuses.setdefault(kind, Counter())[code] += 1
        self.slowest[kind] = max(self.slowest.get(kind, 0.0), elapsed)
        if code not in EXPECTED[kind]:
            self.problems.append(f"{kind}: unexpected status {code}")


def stream_ended(lines: list[str], anthropic: bool) -> bool:
    if anthropic:
        return "event: message_stop" in lines or "event: error" in lines
    return bool(lines) and (lines[-1] == "data: [DONE]" or '"error"' in lines[-1])


async def one_request(client: httpx.AsyncClient, kind: str, tally: Tally) -> None:
    chat = "/v1/chat/completions"
    body: dict[str, Any] = {"model": "r", "messages": MSG}
    code = 0
    started = time.monotonic()
    try:
        if kind in ("failover", "solo", "bystander", "unknown-model"):
            model = {"failover": "r", "solo": "solo", "bystander": "ok"}.get(kind, "nope")
            code = (await client.post(chat, json={**body, "model": model})).status_code
        elif kind in ("failover-stream", "solo-stream", "anthropic-stream", "abort"):
            anthropic = kind == "anthropic-stream"
            path = "/v1/messages" if anthropic else chat
            req = {**body, "model": "solo" if kind == "solo-stream" else "r", "stream": True}
            if anthropic:
                req["max_tokens"] = 20
            async with client.stream("POST", path, json=req) as resp:
                code = resp.status_code
                if code == 200:
                    lines = []
                    async for line in resp.aiter_lines():
                        if line:
                            lines.append(line)
                        if kind == "abort" and len(lines) >= 2:
                            break  # the client walks away mid-stream
                    if kind != "abort" and not stream_ended(lines, anthropic):
                        tally.problems.append(f"{kind}: stream did not end cleanly: "
                                              f"{lines[-2:]}")
                else:
                    await resp.aread()
        elif kind == "bad-json":
            code = (await client.post(chat, content=b'{"model": "r", "messages": [',
                                      headers={"content-type": "application/json"})).status_code
        elif kind == "too-large":
            big = {**body, "messages": [{"role": "user", "content": "x" * (MAX_BODY + 1)}]}
            code = (await client.post(chat, json=big)).status_code
        elif kind == "admin":
            for path in ("/v1/health", "/v1/decisions?limit=5", "/v1/stats"):
                code = (await client.get(path)).status_code
                if code != 200:
                    break
        elif kind == "client-timeout":
            try:
                code = (await client.post(chat, json={**body, "model": "solo"},
                                          timeout=0.2)).status_code
            except httpx.TimeoutException:
                code = 0  # the client gave up; the gateway must still clean up
        else:
            raise AssertionError(kind)
    except httpx.HTTPError as e:
        tally.problems.append(f"{kind}: {type(e).__name__}: {e}")
        return
    if kind != "admin":
        tally.gateway_requests += 1
    tally.add(kind, code, time.monotonic() - started)


KINDS = {"failover": 6, "failover-stream": 6, "anthropic-stream": 2, "solo": 3,
         "solo-stream": 3, "bystander": 4, "bad-json": 1, "unknown-model": 1,
         "too-large": 1, "admin": 1, "abort": 2, "client-timeout": 1}


async def load(url: str, seconds: float, tally: Tally, seed: int) -> None:
    """``CONNECTIONS`` workers, each sending requests back to back until time is up."""
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        async def worker(i: int) -> None:
            rng = random.Random(seed * 1000 + i)
            names, weights = list(KINDS), list(KINDS.values())
            while time.monotonic() < deadline:
                await one_request(client, rng.choices(names, weights)[0], tally)
        await asyncio.gather(*(worker(i) for i in range(CONNECTIONS)))


def faulty() -> Mixed:
    """Provider a: healthy half the time, otherwise one of every fault drilled."""
    stall = A_TIMEOUT + 0.5
    steps = [
        (ok(["fine ", "answer"]), 12), (delay(0.05), 2),
        (status(500), 1), (status(429, headers={"Retry-After": "1"}), 1), (status(429), 1),
        (ResetMidBody(), 1), (stream_then_fail(["partial "]), 1), (reset(), 1),
        (Hold(stall), 1), (StallAfter(content=False, hold=stall), 1),
        (StallAfter(content=True, hold=stall), 1), (Slowloris(0.1, limit=int(stall * 10)), 1),
        (truncated_json(), 1), (invalid_sse(), 1), (error_object_200(), 1),
        (stream_error("boom"), 1), (stream_error("late", after=["partial "]), 1),
    ]
    return Mixed([s for s, _ in steps], [w for _, w in steps], seed=11)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def debug_state(url: str) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=5) as c:
        return c.get("/__debug/state").json()  # type: ignore[no-any-return]


def settled(url: str, baseline_tasks: list[str], loose_limit: int) -> tuple[bool, dict]:
    """Wait (bounded) until the server is back to its idle shape; returns the last look."""
    deadline = time.monotonic() + SETTLE_SECS
    while True:
        gc.collect()
        state = debug_state(url)
        # the upstreams live in another process: an idle pooled connection is one socket
        state["loose_fds"] = open_fds() - state["pool_open"]
        done = (len(state["tasks"]) <= len(baseline_tasks) and not state["pool_busy"]
                and state["loose_fds"] <= loose_limit)
        if done or time.monotonic() > deadline:
            return done, state
        time.sleep(0.25)


def serve_upstreams(conn: Connection) -> None:
    """In a child process: upstreams a (faulty), b and h until told to stop.

    Out of the test's process so that what they record (every request) and
    their sockets are not counted as the gateway's memory and descriptors.
    """
    with FakeUpstream() as a, FakeUpstream() as b, FakeUpstream() as h:
        a.default = faulty()
        conn.send((a.url, b.url, h.url))
        conn.recv()


@contextmanager
def upstreams_process() -> Iterator[tuple[str, str, str]]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve_upstreams, args=(child,), name="soak-upstreams")
    proc.start()
    try:
        assert parent.poll(30), "the upstream process did not start"
        yield parent.recv()
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        parent.close()


@pytest.fixture
def soak_gateway(tmp_path):
    with upstreams_process() as (a, b, h):
        text = drill_config(a, b, h, a_timeout=A_TIMEOUT, threshold=3, cooldown=1,
                            # every refusal written, so the ledger can be counted whole
                            top=f"max_body_bytes = {MAX_BODY}\nrefused_per_minute = 0",
                            extra=f'[ledger]\npath = "{tmp_path / "soak.db"}"')
        config = load_config_text(text, env={})
        clock = SystemClock()
        gw = Gateway(config, store=open_store(config.ledger.path, clock), clock=clock,
                     rng=random.Random(3))
        app = Instrumented(create_app(config, gateway=gw), gw)
        with ServerThread(app, lifespan="on") as srv:
            yield srv.url, gw


def run_phase(url: str, seconds: float, seed: int) -> Tally:
    tally = Tally()
    asyncio.run(load(url, seconds, tally, seed))
    return tally


def test_soak(soak_gateway):
    url, gw = soak_gateway
    baseline_tasks = debug_state(url)["tasks"]

    warm = run_phase(url, WARMUP_SECS, seed=1)
    assert warm.problems == []
    ok_, warm_state = settled(url, baseline_tasks, loose_limit=10**6)
    assert ok_, warm_state
    rss_warm = rss_mb()

    started = time.monotonic()
    tally = run_phase(url, SOAK_SECS, seed=2)
    elapsed = time.monotonic() - started

    done, state = settled(url, baseline_tasks, loose_limit=warm_state["loose_fds"] + 4)
    growth = rss_mb() - rss_warm
    report = (f"{elapsed:.1f}s, statuses {tally.statuses}, slowest {tally.slowest}, "
              f"state {state}, warm {warm_state}, rss +{growth:.1f} MB")
    print(report)

    assert tally.problems == [], tally.problems[:20]
    assert elapsed < SOAK_SECS + LATENCY_BOUND
    assert max(tally.slowest.values()) < LATENCY_BOUND, tally.slowest
    for kind in KINDS:  # every kind of traffic really ran
        assert sum(tally.statuses.get(kind, Counter()).values()) > 0, kind
    assert set(tally.statuses["solo"]) - {200}, "no fault reached a client"
    assert done, f"the server did not settle: {state} (baseline tasks {baseline_tasks}, " \
                 f"warm {warm_state})"
    assert growth < RSS_LIMIT_MB, report

    # one decision per gateway request, none lost (refused ones included)
    assert gw.writer.flush(timeout=10)
    recorded = sum(g["requests"] for g in gw.store.stats("key", 0, time.time() + 60))
    assert recorded == warm.gateway_requests + tally.gateway_requests


# -- the ledger under sustained load --------------------------------------------------


def process_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def ledger_gauges(text: str) -> dict[str, float]:
    """The unlabelled ``humpyard_ledger_*`` samples of a Prometheus text page."""
    return {m[1]: float(m[2]) for m in re.finditer(
        r"^(humpyard_ledger_[a-z_]+) ([0-9.e+-]+)$", text, re.M)}


class Sampler:
    """Every ``SAMPLE_SECS``, the server's RSS and its ledger gauges, until stopped."""

    def __init__(self, server: ServeProcess):
        self.server = server
        self.rss: list[float] = []
        self.lag: list[float] = []
        self.depth: list[float] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.server.url, timeout=10) as c:
            while not self.stopping.wait(SAMPLE_SECS):
                self.rss.append(process_rss_mb(self.server.pid))
                g = ledger_gauges(c.get("/metrics").text)
                self.lag.append(g["humpyard_ledger_lag_seconds"])
                self.depth.append(g["humpyard_ledger_queue_depth"])

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(15)


def drive(port: int, seconds: float) -> ChatLoad:
    async def for_a_while(_: ChatLoad) -> None:
        await asyncio.sleep(seconds)

    load = ChatLoad(port, LEDGER_CONNECTIONS)
    asyncio.run(load.run(for_a_while))
    return load


def test_soak_ledger(tmp_path):
    db = tmp_path / "ledger.db"
    with SimulatorProcess(tmp_path / "simulator.log") as up:
        cfg = tmp_path / "humpyard.toml"
        cfg.write_text(f'[ledger]\npath = "{db}"\n[providers.p]\nbase_url = "{up.url}"\n'
                       '[targets.t]\nendpoints = [{ provider = "p", model = "m" }]\n')
        server = ServeProcess(cfg, tmp_path / "serve.log", log_level="WARNING").start()
        try:
            warm = drive(server.port, WARMUP_SECS)
            time.sleep(1.0)  # idle: the writer drains, the loop settles
            rss_idle = process_rss_mb(server.pid)
            with Sampler(server) as sampled:
                started = time.monotonic()
                load = drive(server.port, SOAK_SECS)
                elapsed = time.monotonic() - started
            time.sleep(1.0)
            rss_after = process_rss_mb(server.pid)
            with httpx.Client(base_url=server.url, timeout=10) as c:
                metrics = c.get("/metrics").text
        finally:
            assert server.stop() is not None  # a clean stop drains the writer
    answered = len(warm.received) + len(load.received)
    lag = sorted(sampled.lag)
    report = (
        f"ledger soak: {len(load.received)} answers in {elapsed:.0f} s "
        f"({len(load.received) / elapsed:.0f}/s at {LEDGER_CONNECTIONS} connections); "
        f"RSS warm idle {rss_idle:.1f} MB, peak {max(sampled.rss):.1f} MB, after "
        f"{rss_after:.1f} MB (bound {min(rss_idle * RSS_FACTOR, rss_idle + RSS_EXTRA_MB):.1f}); "
        f"writer lag median {statistics.median(lag) * 1000:.0f} ms, p99 "
        f"{lag[int(len(lag) * 0.99)] * 1000:.0f} ms, max {lag[-1] * 1000:.0f} ms; queue depth "
        f"max {max(sampled.depth):.0f} over {len(lag)} samples")
    print(report)
    assert warm.errors == 0 and load.errors == 0, (warm.error_kinds, load.error_kinds)
    assert rss_after <= rss_idle * RSS_FACTOR and rss_after <= rss_idle + RSS_EXTRA_MB, report
    over = [x for x in lag if x > MAX_LAG_SECS]
    assert len(over) <= max(1, len(lag) // 100) and lag[-1] <= STALL_LAG_SECS, report
    assert "humpyard_ledger_lost_total{" not in metrics  # nothing shed, nothing failed
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT COUNT(*) FROM decisions").fetchone()[0] == answered
    finally:
        con.close()

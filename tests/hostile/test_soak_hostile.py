"""Every attack at once against a real ``humpyard serve`` with default limits, while a
probe client measures its latency.

The gateway (a child process, SQLite ledger, a client key) sits in front of
one hostile upstream (``hostile_upstream.py``, another child process) whose
models misbehave in every way it knows. A third process attacks for
``SOAK_SECS``: requests that meet each hostile model (each route fails over to
a healthy target), clients that leave while waiting, idle connections,
slowloris heads, multi-megabyte headers, floods without a key and to unknown
paths, requests that are not HTTP/1.1. Meanwhile the probe sends small
requests one at a time on a healthy route. At the end:

- the probe saw no error and its p99 stayed within twice its quiet figure
  (plus ``tests.support.probe.SLACK_SECS`` for a shared 2-core machine);
- the gateway's peak resident memory stayed within its idle figure + 250 MB;
- the refusals without a key were sampled into the ledger (at most 6 a minute),
  and every answer the attacker got is one its request allows;
- the gateway still answers, and its log holds no traceback.

``make test`` runs it for ``SHORT_SECS``; ``make soak`` for ``HUMPYARD_SOAK_SECS``.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

from tests.durability.process import ROOT, ServeProcess
from tests.support.probe import Probe, peak_rss_mb, rss_mb
from tests.support.servers import free_port

SHORT_SECS = 8.0
SOAK_SECS = float(os.environ.get("HUMPYARD_SOAK_SECS", SHORT_SECS))
KEY = "sk-hostile-probe-0123456789"
RSS_EXTRA_MB = 250
HOSTILE = ("bomb", "bomb500", "flood", "endless", "stall", "trickle")
STREAMED = {"endless", "trickle"}
IDLE_CONNECTIONS = 300
SLOWLORIS = 20
# What an attacker's request may get: the fallback's answer, a refusal naming a
# limit, or nothing because the attacker itself gave up (0).
ALLOWED = {200, 0, 429, 431, 502, 503, 504}


def config(upstream: str, ledger: Path) -> str:
    targets = "\n".join(
        f'[targets.t-{m}]\nendpoints = [{{ provider = "h", model = "{m}" }}]'
        for m in (*HOSTILE, "good"))
    routes = "\n".join(f'[routes.{m}]\ntargets = ["t-{m}", "t-good"]' for m in HOSTILE)
    return f"""
[providers.h]
base_url = "{upstream}/v1"

{targets}

{routes}

[routes.ok]
targets = ["t-good"]

[keys.probe]
key_env = "HOSTILE_PROBE_KEY"

[ledger]
path = "{ledger}"
"""


# -- the attacker (a process of its own: its work must not slow the probe's thread) --

async def _hostile_requests(port: int, model: str, stop: float, seen: Counter) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}],
            "stream": model in STREAMED}
    headers = {"authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=3.0) as c:
        while time.monotonic() < stop:
            try:
                async with c.stream("POST", "/v1/chat/completions", json=body,
                                    headers=headers) as r:
                    async for _ in r.aiter_bytes():
                        pass
                    seen[f"{model}:{r.status_code}"] += 1
            except httpx.HTTPError:
                seen[f"{model}:0"] += 1  # gave up (and so left the gateway mid-call)
            await asyncio.sleep(0.2)


async def _idle(port: int, stop: float, seen: Counter) -> None:
    """Connections that never send a byte; reopened when the gateway closes them."""
    async def one() -> None:
        while time.monotonic() < stop:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                seen["idle:refused"] += 1
                await asyncio.sleep(0.5)
                continue
            try:
                data = await asyncio.wait_for(reader.read(65536), stop - time.monotonic())
                seen["idle:answered" if data else "idle:closed"] += 1
            except (TimeoutError, OSError):
                pass
            finally:
                writer.close()
    await asyncio.gather(*(one() for _ in range(IDLE_CONNECTIONS)))


async def _slowloris(port: int, stop: float, seen: Counter) -> None:
    async def one() -> None:
        while time.monotonic() < stop:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
                while time.monotonic() < stop and not reader.at_eof():
                    writer.write(b"X-a: b\r\n")
                    await writer.drain()
                    await asyncio.sleep(1.0)
                seen["slowloris:closed"] += 1
            except OSError:
                seen["slowloris:cut"] += 1
                await asyncio.sleep(0.5)
    await asyncio.gather(*(one() for _ in range(SLOWLORIS)))


async def _count_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        seen: Counter, kind: str) -> None:
    """Count the status the connection was answered with (``closed``: none), and close."""
    status = (await asyncio.wait_for(reader.read(64), 5))[9:12]
    seen[f"{kind}:{status.decode() or 'closed'}"] += 1
    writer.close()


async def _huge_headers(port: int, stop: float, seen: Counter) -> None:
    piece = b"X-Big: " + b"a" * (64 * 1024) + b"\r\n"
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /ui HTTP/1.1\r\nHost: x\r\n")
            sent = 0
            while sent < 16 * 1024 * 1024 and not reader.at_eof():
                writer.write(piece)
                await writer.drain()
                sent += len(piece)
            await _count_answer(reader, writer, seen, "headers")
        except (OSError, TimeoutError):
            seen["headers:cut"] += 1
        await asyncio.sleep(0.5)


async def _keyless(port: int, stop: float, seen: Counter) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=3.0) as c:
        n = 0
        while time.monotonic() < stop:
            n += 1
            path = "/v1/chat/completions" if n % 2 else f"/nope/{n}"
            try:
                r = await c.post(path, json={"model": "ok", "messages": []})
                seen[f"keyless:{r.status_code}"] += 1
            except httpx.HTTPError:
                seen["keyless:0"] += 1
            await asyncio.sleep(0.002)


async def _malformed(port: int, stop: float, seen: Counter) -> None:
    """Requests that are not HTTP/1.1, one connection each."""
    bad = (b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A : a\r\n\r\n",
           b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
           b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    n = 0
    while time.monotonic() < stop:
        n += 1
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(bad[n % len(bad)])
            await _count_answer(reader, writer, seen, "malformed")
        except (OSError, TimeoutError):
            seen["malformed:cut"] += 1
        await asyncio.sleep(0.01)


async def _attack(port: int, secs: float) -> Counter:
    seen: Counter = Counter()
    stop = time.monotonic() + secs
    await asyncio.gather(
        *(_hostile_requests(port, m, stop, seen) for m in HOSTILE),
        _idle(port, stop, seen), _slowloris(port, stop, seen),
        _huge_headers(port, stop, seen), _keyless(port, stop, seen),
        _malformed(port, stop, seen))
    return seen


def attack(port: int, secs: float, out: str) -> None:
    seen = asyncio.run(_attack(port, secs))
    Path(out).write_text(json.dumps(seen))


# -- the test --

def _start_upstream(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}"}
    out = open(log, "wb")  # noqa: SIM115 - closed with the process below
    proc = subprocess.Popen([sys.executable, "-m", "tests.hostile.hostile_upstream", str(port)],
                            cwd=str(ROOT), env=env, stdout=out, stderr=subprocess.STDOUT)
    out.close()
    deadline = time.monotonic() + 30
    while b"ready" not in log.read_bytes():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


def test_every_attack_at_once_leaves_the_probe_served(tmp_path: Path) -> None:
    upstream, url = _start_upstream(tmp_path / "upstream.log")
    ledger = tmp_path / "ledger.db"
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(config(url, ledger))
    try:
        with ServeProcess(cfg, tmp_path / "serve.log",
                          env={"HOSTILE_PROBE_KEY": KEY}) as gw, \
                Probe(gw.url, "ok", headers={"authorization": f"Bearer {KEY}"}) as probe:
            quiet = probe.measure(60)
            idle_mb = rss_mb(gw.pid)
            out = tmp_path / "attack.json"
            ctx = multiprocessing.get_context("spawn")
            attacker = ctx.Process(target=attack, args=(gw.port, SOAK_SECS, str(out)))
            started = time.monotonic()
            with probe.running():
                attacker.start()
                attacker.join(SOAK_SECS + 60)
            assert attacker.exitcode == 0, "the attacker failed"
            minutes = (time.monotonic() - started) / 60
            seen = Counter(json.loads(out.read_text()))
            peak = peak_rss_mb(gw.pid)
            report = (f"quiet {quiet}; attacked {probe.attacked}; rss idle {idle_mb:.0f} MB "
                      f"peak {peak:.0f} MB; attacker saw {dict(seen)}")
            print(report)

            probe.assert_flat(quiet)
            assert peak <= idle_mb + RSS_EXTRA_MB, report
            for m in HOSTILE:
                assert sum(n for k, n in seen.items() if k.startswith(f"{m}:")) > 0, report
            unexpected = {k: n for k, n in seen.items() if k.split(":")[0] in HOSTILE
                          and int(k.split(":")[1]) not in ALLOWED}
            assert not unexpected, report
            assert seen["keyless:401"] + seen["keyless:404"] > 100, report
            assert seen["headers:431"] + seen["headers:cut"] + seen["headers:closed"] > 0, report
            assert seen["malformed:400"] > 100 and seen["malformed:400"] >= 0.9 * sum(
                n for k, n in seen.items() if k.startswith("malformed:")), report

            after = Probe(gw.url, "ok", headers={"authorization": f"Bearer {KEY}"})
            with after:
                after.measure(5, warmup=0)
        assert "Traceback" not in gw.output(), gw.output()[-4000:]
        # the malformed requests: a line at most every 10 s, not one each
        assert gw.output().count("not HTTP/1.1") <= minutes * 6 + 2, gw.output()[-4000:]
        with sqlite3.connect(ledger) as db:
            refused = db.execute(
                "SELECT count(*) FROM decisions WHERE status IN (401, 404)").fetchone()[0]
        assert refused <= 6 * (int(minutes) + 2), f"{refused} refusals written in {minutes:.1f} min"
    finally:
        upstream.terminate()
        upstream.wait(10)

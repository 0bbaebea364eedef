"""A small HTTP/1.1 keep-alive client on raw asyncio streams, for per-request latency.

No httpx, no h11: one pre-encoded request, a hand-written response reader
(``content-length`` or ``chunked``), and ``time.perf_counter`` around each
request. Every connection sends its next request only after the previous answer
was read completely, so the numbers are request latencies, not queueing inside
the client. ``ttfb`` is the time to the first byte of the response *body* (for
a stream: the first SSE bytes), ``total`` the time to its last byte.

``run_latency`` drives N connections for a fixed time and returns the samples;
it doubles as the throughput fallback when ``wrk`` is not installed.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field

PROMPT = "Say hello in one short sentence."


def chat_body(model: str, stream: bool) -> bytes:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 16,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def request_bytes(host: str, port: int, path: str, body: bytes, auth: str | None) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        "Accept: */*",
        f"Content-Length: {len(body)}",
    ]
    if auth:
        lines.append(f"Authorization: Bearer {auth}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class ProtocolError(Exception):
    """The server answered something this client does not understand."""


@dataclass
class Samples:
    """Per-request timings in seconds, and the failures seen."""

    ttfb: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0
    completed: int = 0  # every answered request, warm-up included

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


async def _read_response(reader: asyncio.StreamReader, t0: float) -> tuple[int, float, bool]:
    """Read one response; returns (status, ttfb timestamp, connection may be reused)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    keep = b"connection: close" not in lower
    ttfb = 0.0
    if b"transfer-encoding: chunked" in lower:
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            await reader.readexactly(size + 2)
            if not ttfb:
                ttfb = time.perf_counter()
        return status, ttfb or time.perf_counter(), keep
    pos = lower.find(b"content-length:")
    if pos < 0:
        raise ProtocolError("response has neither content-length nor chunked encoding")
    end = lower.find(b"\r\n", pos)
    length = int(lower[pos + 15 : end])
    if length:
        await reader.readexactly(1)
        ttfb = time.perf_counter()
        if length > 1:
            await reader.readexactly(length - 1)
    return status, ttfb or time.perf_counter(), keep


async def _worker(host: str, port: int, raw: bytes, warm_until: float, stop_at: float,
                  out: Samples) -> None:
    reader = writer = None
    try:
        while time.perf_counter() < stop_at:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            assert reader is not None
            t0 = time.perf_counter()
            writer.write(raw)
            try:
                status, ttfb, keep = await _read_response(reader, t0)
            except (asyncio.IncompleteReadError, ConnectionError, ProtocolError) as e:
                out.error(type(e).__name__)
                writer.close()
                reader = writer = None
                await asyncio.sleep(0.01)
                continue
            t1 = time.perf_counter()
            out.completed += 1
            if status != 200:
                out.error(f"status_{status}")
            elif t0 >= warm_until:
                out.ttfb.append(ttfb - t0)
                out.total.append(t1 - t0)
            if not keep:
                writer.close()
                reader = writer = None
    except OSError as e:
        out.error(type(e).__name__)
    finally:
        if writer is not None:
            writer.close()


async def _run(host: str, port: int, raw: bytes, connections: int, warmup: float,
               seconds: float) -> Samples:
    out = Samples()
    start = time.perf_counter()
    warm_until = start + warmup
    stop_at = warm_until + seconds
    await asyncio.gather(*(_worker(host, port, raw, warm_until, stop_at, out)
                           for _ in range(connections)))
    out.elapsed = max(1e-9, time.perf_counter() - warm_until)
    return out


def run_latency(host: str, port: int, *, model: str, stream: bool, connections: int,
                warmup: float, seconds: float, auth: str | None = None,
                path: str = "/v1/chat/completions") -> Samples:
    """Drive ``connections`` keep-alive connections for ``warmup + seconds``."""
    raw = request_bytes(host, port, path, chat_body(model, stream), auth)
    return asyncio.run(_run(host, port, raw, connections, warmup, seconds))


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def summarize(s: Samples) -> dict[str, object]:
    """Milliseconds: p50/p99 of time to first body byte and of the whole answer."""
    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 3)
    return {
        "requests": len(s.total),
        "rps": round(len(s.total) / s.elapsed, 1),
        "ttfb_p50_ms": ms(percentile(s.ttfb, 50)),
        "ttfb_p99_ms": ms(percentile(s.ttfb, 99)),
        "total_p50_ms": ms(percentile(s.total, 50)),
        "total_p99_ms": ms(percentile(s.total, 99)),
        "errors": dict(s.errors),
    }

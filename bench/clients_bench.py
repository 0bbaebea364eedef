"""What one upstream call costs the gateway's process, by HTTP client library.

    python bench/clients_bench.py --port SIM_PORT [--calls 2000] [--site DIR]

Sequential keep-alive POSTs of the bench chat body to a running simulator,
one connection, body read whole; prints CPU µs and wall µs per call for:

- ``httpx``: ``httpx.AsyncClient`` configured as ``UpstreamClient`` does
  (build_request + send(stream=True) + aread + aclose), what the gateway uses;
- ``httpcore``: the same pool one layer down (no httpx Request/URL/cookies);
- ``aiohttp``: when importable (``--site`` can point at a ``pip install
  --target`` directory so the project venv stays untouched);
- ``httpx_raw_transport``: ``httpx.AsyncClient`` over a minimal
  ``AsyncBaseTransport`` on asyncio streams (what keeping httpx's API and the
  ``transport=`` test seam but dropping httpcore/anyio would cost);
- ``raw``: ``bench/httpload.py``'s hand-written asyncio client, a floor.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from httpload import _read_response, chat_body, request_bytes

HEADERS = {"content-type": "application/json", "accept": "application/json"}


async def _time(call: Callable[[], Awaitable[None]], n: int) -> dict[str, float]:
    for _ in range(100):
        await call()
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        await call()
    return {"cpu_us": round((time.process_time() - c0) / n * 1e6, 1),
            "wall_us": round((time.perf_counter() - w0) / n * 1e6, 1)}


async def bench_httpx(url: str, body: bytes, n: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512,
                          keepalive_expiry=60)
    transport = httpx.AsyncHTTPTransport(limits=limits, retries=0, socket_options=[
        (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    async with httpx.AsyncClient(transport=transport, limits=limits, trust_env=False) as c:
        timeout = httpx.Timeout(600, connect=10)

        async def call() -> None:
            req = c.build_request("POST", url, content=body, headers=HEADERS, timeout=timeout)
            resp = await c.send(req, stream=True)
            await resp.aread()
            await resp.aclose()
        return await _time(call, n)


async def bench_httpcore(url: str, body: bytes, n: int) -> dict[str, float]:
    import httpcore
    headers = [(k.encode(), v.encode()) for k, v in HEADERS.items()]
    async with httpcore.AsyncConnectionPool(max_connections=512, keepalive_expiry=60) as pool:
        async def call() -> None:
            async with pool.stream("POST", url, headers=headers, content=body) as resp:
                await resp.aread()
        return await _time(call, n)


async def bench_aiohttp(url: str, body: bytes, n: int) -> dict[str, float]:
    import aiohttp
    conn = aiohttp.TCPConnector(limit=512, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=conn, auto_decompress=False) as s:
        async def call() -> None:
            async with s.post(url, data=body, headers=HEADERS) as resp:
                await resp.read()
        return await _time(call, n)


class RawTransport(httpx.AsyncBaseTransport):
    """A keep-alive HTTP/1.1 transport on asyncio streams, buffered bodies only (a probe)."""

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int], list[tuple[Any, Any]]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host, port = request.url.host, request.url.port or 80
        conns = self.idle.setdefault((host, port), [])
        reader, writer = conns.pop() if conns else await asyncio.open_connection(host, port)
        body = await request.aread()
        head = [f"{request.method} {request.url.raw_path.decode()} HTTP/1.1"]
        head += [f"{k.decode()}: {v.decode()}" for k, v in request.headers.raw]  # has length
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        raw_head = await reader.readuntil(b"\r\n\r\n")
        lines = raw_head.decode("latin-1").split("\r\n")
        status = int(lines[0][9:12])
        headers = [tuple(x.split(": ", 1)) for x in lines[1:] if x]
        length = next(int(v) for k, v in headers if k.lower() == "content-length")
        content = await reader.readexactly(length)
        conns.append((reader, writer))
        return httpx.Response(status, headers=headers, content=content)

    async def aclose(self) -> None:
        for conns in self.idle.values():
            for _, w in conns:
                w.close()


async def bench_httpx_raw(url: str, body: bytes, n: int) -> dict[str, float]:
    transport = RawTransport()
    async with httpx.AsyncClient(transport=transport, trust_env=False) as c:
        timeout = httpx.Timeout(600, connect=10)

        async def call() -> None:
            req = c.build_request("POST", url, content=body, headers=HEADERS, timeout=timeout)
            resp = await c.send(req, stream=True)
            await resp.aread()
            await resp.aclose()
        return await _time(call, n)


async def bench_raw(port: int, body: bytes, n: int) -> dict[str, float]:
    raw = request_bytes("127.0.0.1", port, "/v1/chat/completions", body, None)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def call() -> None:
        writer.write(raw)
        await _read_response(reader, 0.0)
    try:
        return await _time(call, n)
    finally:
        writer.close()


async def _main(a: argparse.Namespace) -> dict[str, Any]:
    url = f"http://127.0.0.1:{a.port}/v1/chat/completions"
    body = chat_body("bench", False)
    out: dict[str, Any] = {"calls": a.calls}
    runs: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {
        "httpx": lambda: bench_httpx(url, body, a.calls),
        "httpcore": lambda: bench_httpcore(url, body, a.calls),
        "aiohttp": lambda: bench_aiohttp(url, body, a.calls),
        "httpx_raw_transport": lambda: bench_httpx_raw(url, body, a.calls),
        "raw": lambda: bench_raw(a.port, body, a.calls),
    }
    for name, run in runs.items():
        try:
            out[name] = await run()
        except ImportError as e:
            out[name] = {"error": f"not importable: {e}"}
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--site", default=None)
    a = p.parse_args()
    if a.site:
        sys.path.insert(0, a.site)
    print(json.dumps(asyncio.run(_main(a))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

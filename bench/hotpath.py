"""Where one request's time goes: the gateway app called in-process, no HTTP server.

    python bench/hotpath.py --upstream http://127.0.0.1:PORT/v1 [--requests 2000]
                            [--stream] [--ledger DIR] [--profile OUT.txt]

Builds ``create_app`` on a one-target passthrough config pointing at a running
simulator, then calls the ASGI app directly (``scope``/``receive``/``send``)
``--requests`` times in a row, so uvicorn's parsing is not included. Prints a
JSON line with µs per request (wall and process CPU). With ``--profile`` it
runs again under cProfile and writes the functions with the most own time and
the most cumulative time, which is how ``docs/decisions/0003-performance.md``
attributes the per-request cost.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import sys
import time
from typing import Any

from httpload import chat_body

CONFIG = """
[providers.sim]
base_url = "{upstream}"

[targets.t]
endpoints = [{{ provider = "sim", model = "m" }}]

[routes.bench]
type = "passthrough"
targets = ["t"]

[health]
failure_threshold = 3
"""


def bench_config(upstream: str, ledger_path: str | None) -> str:
    text = CONFIG.format(upstream=upstream)
    if ledger_path:
        text += f'\n[ledger]\npath = "{ledger_path}"\n'
    return text


async def _one(app: Any, body: bytes) -> int:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080),
        "state": {},
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def _loop(app: Any, body: bytes, n: int) -> tuple[float, float, int]:
    bad = 0
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        if await _one(app, body) != 200:
            bad += 1
    return time.perf_counter() - w0, time.process_time() - c0, bad


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    from humpyard.config import load_config_text
    from humpyard.http.app import create_app

    ledger = f"{args.ledger}/hotpath.db" if args.ledger else None
    cfg = load_config_text(bench_config(args.upstream, ledger), env={})
    if args.inline_writer:
        from variant_server import InlineWriter

        from humpyard.clock import SystemClock
        from humpyard.gateway import Gateway
        from humpyard.store import open_store
        store = open_store(ledger, SystemClock())
        app = create_app(cfg, gateway=Gateway(cfg, store, writer=InlineWriter(store)))
    else:
        app = create_app(cfg)
    body = chat_body("bench", args.stream)
    await _loop(app, body, 50)  # warm: connections, caches, lazy imports
    wall, cpu, bad = await _loop(app, body, args.requests)
    out = {"requests": args.requests, "stream": args.stream, "ledger": bool(ledger),
           "inline_writer": args.inline_writer, "log_level": args.log_level,
           "wall_us_per_request": round(wall / args.requests * 1e6, 1),
           "cpu_us_per_request": round(cpu / args.requests * 1e6, 1), "non_200": bad}
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        await _loop(app, body, args.requests)
        prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(70)
        with open(args.profile, "w") as f:
            f.write(f"# {json.dumps(out)}\n")
            f.write(buf.getvalue())
    app.state.gateway.writer.flush(10)
    await app.state.gateway.aclose()
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--ledger", default=None, help="directory for a SQLite ledger")
    p.add_argument("--profile", default=None)
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--inline-writer", action="store_true",
                   help="record decisions on the event loop instead of the writer thread")
    args = p.parse_args()
    import logging
    logging.basicConfig(level=args.log_level, stream=open("/dev/null", "w"))  # noqa: SIM115
    print(json.dumps(asyncio.run(_main(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

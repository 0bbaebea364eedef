"""Serve the gateway with one experimental change, to measure what the change buys.

    python bench/variant_server.py --config FILE --port P --variant NAME

Variants (each is ``create_app`` on plain uvicorn, as ``humpyard serve`` was set up
when round 1 of ADR 0003 began, except for the named change; none edits the
package, they only use its seams or process-wide settings). To compare the
gateway as it ships now, use ``bench/ab.py --variants rev:main,rev:worktree``:

=================  ============================================================
``stock``          ``create_app`` on plain uvicorn (h11, asyncio loop, INFO logging)
``quiet``          log level WARNING: no per-request log lines (httpx + ours)
``inline-writer``  decisions recorded synchronously on the event loop instead of
                   being handed to the writer thread (memory store only)
``switch-1ms``     ``sys.setswitchinterval(0.001)`` (default 5 ms)
``fast-loop``      uvloop + httptools when importable (see ``--site``)
``raw-transport``  the upstream client keeps httpx's API but runs over
                   ``clients_bench.RawTransport`` (asyncio streams, no
                   httpcore/anyio; buffered bodies only: fine for the ``zero``
                   simulator, which answers streams with a content-length)
``all``            quiet + inline-writer + fast-loop
``best``           quiet + fast-loop + raw-transport
=================  ============================================================

``--site DIR`` prepends DIR to ``sys.path`` (e.g. a ``pip install --target``
directory holding uvloop and httptools) so the project venv stays untouched.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

VARIANTS = ("stock", "quiet", "inline-writer", "switch-1ms", "fast-loop", "raw-transport",
            "all", "best")


async def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    from humpyard.clock import SystemClock
    from humpyard.config import load_config
    from humpyard.gateway import Gateway
    from humpyard.http.app import create_app

    v = args.variant
    cfg = load_config(args.config)
    writer = None
    if v in ("inline-writer", "all"):
        from humpyard.store import open_store
        from humpyard.store.writer import InlineWriter
        store = open_store(cfg.ledger.path if cfg.ledger else None, SystemClock())
        writer = InlineWriter(store)
        gw = Gateway(cfg, store, writer=writer)  # type: ignore[arg-type]
    elif v in ("raw-transport", "best"):
        from clients_bench import RawTransport
        gw = Gateway(cfg, transport=RawTransport())
    else:
        gw = Gateway(cfg)
    app = create_app(cfg, gateway=gw)
    extras = {"http": "httptools"} if v in ("fast-loop", "all", "best") else {}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=args.port,
                                           access_log=False, log_config=None,
                                           timeout_keep_alive=75, **extras))  # type: ignore[arg-type]
    print(f"variant={v} extras={extras}", flush=True)
    await server.serve()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--variant", choices=VARIANTS, default="stock")
    p.add_argument("--site", default=None)
    args = p.parse_args()
    if args.site and args.variant in ("fast-loop", "all", "best"):
        sys.path.insert(0, args.site)  # only these variants may see uvloop/httptools
    level = "WARNING" if args.variant in ("quiet", "all", "best") else "INFO"
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.variant == "switch-1ms":
        sys.setswitchinterval(0.001)
    if args.variant in ("fast-loop", "all", "best"):
        try:  # the loop must be chosen before asyncio.run; uvicorn's loop= is too late here
            import uvloop
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``humpyard``: serve, check, explain, simulate, demo."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from humpyard.errors import ConfigError

log = logging.getLogger("humpyard")


def _setup_logging(level: str = "INFO", *, buffered: bool = False) -> None:
    """Log to stderr; ``buffered`` (the long-running commands) writes through a
    buffer drained a few times a second (``logsink.py``)."""
    if buffered:
        from humpyard.logsink import BufferedStderr
        # The line format uses no thread or process name: not collecting them
        # makes each record a third cheaper (docs/decisions/0003-performance.md).
        logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
        logging.basicConfig(level=level, handlers=[BufferedStderr()])
    else:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # httpx logs every upstream call at INFO; the gateway logs its own line per request.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # httpcore's DEBUG trace prints upstream response headers verbatim, and an
    # upstream may echo the provider key (or set cookies) in them.
    logging.getLogger("httpcore").setLevel(logging.INFO)


def cmd_check(args: argparse.Namespace) -> int:
    from humpyard.config import load_config
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    for w in cfg.warnings:
        print(f"warning: {w}", file=sys.stderr)
    explicit = sum(1 for r in cfg.routes.values() if not r.implicit)
    print(f"ok: {len(cfg.providers)} providers, {len(cfg.targets)} targets, {explicit} routes, "
          f"{len(cfg.select)} selector rules, {len(cfg.keys)} keys")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from humpyard.clock import SystemClock
    from humpyard.config import load_config
    from humpyard.planning.explain import explain
    from humpyard.planning.types import RequestFacts, StateSnapshot
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    headers = dict(h.split("=", 1) for h in args.header or [])
    facts = RequestFacts(model=args.model, key_id=args.key, headers=headers,
                         stream=args.stream, tools=args.tools, images=args.images,
                         subagent=args.subagent, prompt_tokens=args.prompt_tokens,
                         prompt_tokens_low=args.prompt_tokens)
    now = SystemClock().now()
    print(json.dumps(explain(facts, StateSnapshot(taken_at=now), cfg, now), indent=2))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from humpyard.serving import run_loop, serve
    try:
        run_loop(serve(args.config, args.host, args.port))
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from humpyard.simulate import run_simulator
    run_simulator(args.host, args.port, args.profile, delay_ms=args.delay_ms, seed=args.seed)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from humpyard.demo import run_demo
    return run_demo(args.config, args.host, args.port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="humpyard", description=__doc__)
    p.add_argument("--log-level", default="INFO")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the gateway")
    s.add_argument("--config", required=True)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.set_defaults(fn=cmd_serve)
    c = sub.add_parser("check", help="validate a configuration file")
    c.add_argument("--config", required=True)
    c.set_defaults(fn=cmd_check)
    e = sub.add_parser("explain", help="explain a request offline (no live state)")
    e.add_argument("--config", required=True)
    e.add_argument("--model", required=True)
    e.add_argument("--key", default=None, help="key id to explain for")
    e.add_argument("--header", action="append", help="name=value")
    e.add_argument("--prompt-tokens", type=int, default=None)
    for flag in ("stream", "tools", "images", "subagent"):
        e.add_argument(f"--{flag}", action="store_true")
    e.set_defaults(fn=cmd_explain)
    m = sub.add_parser("simulate", help="run a simulated OpenAI-compatible provider")
    m.add_argument("--host", default="127.0.0.1")
    m.add_argument("--port", type=int, default=9001)
    m.add_argument("--profile", default="ok", choices=["ok", "slow", "flaky", "down", "zero"])
    m.add_argument("--delay-ms", type=float, default=0)
    m.add_argument("--seed", type=int, default=None)
    m.set_defaults(fn=cmd_simulate)
    d = sub.add_parser("demo", help="simulated providers + the gateway on examples/demo.toml")
    d.add_argument("--config", default=None)
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--port", type=int, default=8080)
    d.set_defaults(fn=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level, buffered=args.command in ("serve", "demo"))
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

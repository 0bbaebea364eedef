"""``humpyard``: serve, check, explain, simulate, demo, prices."""

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
        # The line format uses no thread or process name and no source file or
        # line: not collecting them (the logging HOWTO's "Optimization") makes each
        # record cheaper (docs/decisions/0003-performance.md).
        logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
        logging._srcfile = None  # type: ignore[attr-defined]
        logging.basicConfig(level=level, handlers=[BufferedStderr()])
    else:
        from humpyard.logsink import FORMAT, EscapingFormatter
        handler = logging.StreamHandler()
        handler.setFormatter(EscapingFormatter(FORMAT))
        logging.basicConfig(level=level, handlers=[handler])
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
    import signal

    from humpyard.serving import run_loop, serve
    # Until ``serve`` takes SIGINT and SIGTERM over, either one ends the process as
    # Ctrl-C does (exit 0, the log drained at exit) rather than by the signal.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
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
    return run_demo(args.config, args.host, args.port, args.sim_ports, args.state_dir)


def cmd_prices(args: argparse.Namespace) -> int:
    from humpyard.prices.commands import run_check, run_import
    if args.prices_command == "import":
        return run_import(args.config, args.source, args.out, sys.stdout, sys.stderr)
    return run_check(args.config, args.source, sys.stdout, sys.stderr)


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
    d.add_argument("--port", type=int, default=8080, help="the gateway's port (default 8080)")
    d.add_argument("--sim-ports", default="0,0,0", metavar="STEADY,FLAKY,SLOW",
                   help="the simulated providers' ports on 127.0.0.1; 0 picks a free one "
                        "(default 0,0,0; the banner prints them)")
    d.add_argument("--state-dir", default=None, metavar="DIR",
                   help="where the demo writes its files (the configuration as served, the "
                        "SQLite ledger); default $XDG_STATE_HOME/humpyard/demo, else "
                        "~/.local/state/humpyard/demo")
    d.set_defaults(fn=cmd_demo)
    pr = sub.add_parser("prices", help="prices, context windows and capabilities from a "
                                       "models.dev catalogue")
    prs = pr.add_subparsers(dest="prices_command", required=True)
    from humpyard.prices import MODELS_DEV_URL
    pi = prs.add_parser("import", help="write the catalogue's facts for the configured "
                                       "endpoints to a file the configuration can include")
    pc = prs.add_parser("check", help="list where the configuration and the catalogue "
                                      "disagree (exit 1 if they do)")
    for sp in (pi, pc):
        sp.add_argument("--config", required=True)
        sp.add_argument("--from", dest="source", default=MODELS_DEV_URL, metavar="FILE|URL",
                        help=f"a models.dev-format catalogue (default {MODELS_DEV_URL})")
        sp.set_defaults(fn=cmd_prices)
    pi.add_argument("--out", default=None,
                    help="the file to write (default prices.toml beside the configuration)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level, buffered=args.command in ("serve", "demo"))
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

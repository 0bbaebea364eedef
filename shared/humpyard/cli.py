"""The ``humpyard`` command: serve, console, check, explain, store, simulate, demo, prices."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from humpyard.cli_args import CANNOT_LISTEN, count, header, level, port, unresolved
from humpyard.errors import ConfigError

log = logging.getLogger("humpyard")


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 1 on any problem; an unset key variable is only a warning without ``--strict``
    (``serve`` still refuses an unset client key variable: docs/configuration.md)."""
    from humpyard.config import load_config
    from humpyard.fleet import check_backend
    try:
        cfg = load_config(args.config, unset_env="strict" if args.strict else "check")
        check_backend(cfg)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    for w in cfg.warnings:
        print(f"warning: {w}", file=sys.stderr)
    explicit = sum(1 for r in cfg.routes.values() if not r.implicit)
    # cfg.keys holds only the keys serve could check (key_env set); the file declares more
    declared = len(cfg.public.get("keys", {}))
    unset = declared - len(cfg.keys)
    keys = f"{declared} keys" + (f" ({unset} without their variable: serve refuses to start)"
                                 if unset else "")
    print(f"ok: {len(cfg.providers)} providers, {len(cfg.targets)} targets, {explicit} routes, "
          f"{len(cfg.select)} selector rules, {keys}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """Exit 2 for a ``--key`` the file does not declare; a declared key whose variable is
    unset here is explained with its rules all the same (explain needs only its id)."""
    from humpyard.clock import SystemClock
    from humpyard.config import load_config
    from humpyard.planning.explain import explain
    from humpyard.planning.types import RequestFacts, StateSnapshot
    try:  # offline: no key value is needed to explain a plan
        cfg = load_config(args.config, unset_env="check")
        if args.key is not None:
            declared = cfg.public.get("keys", {})
            if args.key not in declared:
                known = ", ".join(sorted(declared)) or "none"
                print(f"humpyard explain: error: argument --key: {args.config} declares no "
                      f"key {args.key!r} (its keys: {known})", file=sys.stderr)
                return 2
            if args.key not in cfg.keys:  # its key_env is unset: its rules still apply
                env = {**os.environ, declared[args.key]["key_env"]: "explain"}
                cfg = load_config(args.config, env, unset_env="check")
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    headers = dict(args.header or [])
    facts = RequestFacts(model=args.model, key_id=args.key, headers=headers,
                         stream=args.stream, tools=args.tools, images=args.images,
                         subagent=args.subagent, prompt_tokens=args.prompt_tokens,
                         prompt_tokens_low=args.prompt_tokens)
    now = SystemClock().now()
    print(json.dumps(explain(facts, StateSnapshot(taken_at=now), cfg, now), indent=2))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import signal

    from humpyard.stopping import hold_stop_signals
    hold_stop_signals()  # before the imports below: a stop while starting is graceful

    from humpyard.cli_args import worker_count
    from humpyard.serving import run_loop, serve
    from humpyard.workers import Supervisor
    try:
        workers = worker_count(args.workers)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if workers > 1 and args.worker_fd is None:
        try:
            return Supervisor(args.config, args.host, args.port, workers,
                              argv=("--log-level", args.log_level),
                              serve_args=("--log-format", args.log_format)).run()
        except KeyboardInterrupt:  # a second signal while it was starting
            return 0
    if args.worker_fd is None and (problem := unresolved(args.host, args.port)):
        print(problem, file=sys.stderr)  # uvicorn's own line would not name the host
        return CANNOT_LISTEN
    if args.worker_fd is not None:
        # A worker still starting reads the file as it is; a SIGHUP the parent sends
        # meanwhile must not end it (serve takes SIGHUP over once it serves).
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        run_loop(serve(args.config, args.host, args.port, worker_fd=args.worker_fd,
                       worker_state=args.worker_state, worker_dir=args.worker_dir,
                       worker_index=args.worker_index,
                       worker_instance=args.worker_instance, worker_beat=args.worker_beat))
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def cmd_console(args: argparse.Namespace) -> int:
    """``serve`` with the admin API and the console only (no client path), on the
    configuration's ``[store]`` or on the tables a stack's outputs name (``--stack``)."""
    from humpyard.stopping import hold_stop_signals
    hold_stop_signals()  # as for serve

    from humpyard.serving import run_loop, serve
    if problem := unresolved(args.host, args.port):
        print(problem, file=sys.stderr)  # as for serve
        return CANNOT_LISTEN
    try:
        store = None
        if args.stack:
            from humpyard.config.spec import StoreSpec
            from humpyard.fleet import tables_from_stack
            state, ledger = tables_from_stack(args.stack, region=args.region)
            store = StoreSpec(backend="dynamodb", state_table=state, ledger_table=ledger,
                              region=args.region)
        run_loop(serve(args.config, args.host, args.port, surfaces=("admin", "console"),
                       store=store))
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def cmd_store(args: argparse.Namespace) -> int:
    """``humpyard store create-tables``: the two DynamoDB tables ``[store]`` names, made
    as ``template.yaml`` makes them (``store/dynamodb_schema.py``); existing ones are left."""
    from humpyard.config import load_config
    from humpyard.fleet import backend_of, dynamodb_client
    try:
        cfg = load_config(args.config, unset_env="check")
        spec = cfg.store
        if (spec is None or backend_of(cfg) != "dynamodb" or spec.state_table is None
                or spec.ledger_table is None):
            raise ConfigError('store.backend: create-tables is for backend = "dynamodb"')
        client = dynamodb_client(spec)
        from botocore.exceptions import BotoCoreError, ClientError

        from humpyard.store.dynamodb_schema import create_tables
        try:
            create_tables(client, spec.state_table, spec.ledger_table)
        except (BotoCoreError, ClientError) as e:
            print(f"could not create the tables: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"ok: tables {spec.state_table} and {spec.ledger_table} exist "
          f"(region {client.meta.region_name})")
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


DESCRIPTION = """humpyard, an LLM gateway: serve, console, check, explain, store, simulate,
demo, prices.

Run "humpyard COMMAND --help" for a command's flags."""

PORT_HELP = "the port to listen on, 0 to 65535 (0: a free one, which the log names)"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter,
                    argparse.RawDescriptionHelpFormatter):
    """Every flag's default after its help, except a default of none or off (the help
    says what none means); descriptions keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse with every default shown in the help and a one-line error (exit 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    """The installed distribution's version, else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("humpyard")
    except PackageNotFoundError:
        from humpyard import __version__
        return __version__


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (no import cost otherwise)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"humpyard {_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="humpyard", description=DESCRIPTION)
    p.add_argument("--version", action=_VersionAction, help="print the version and exit")
    p.add_argument("--log-level", default="INFO", type=level, choices=LOG_LEVELS,
                   metavar="LEVEL",
                   help=f"log threshold, one of {', '.join(LOG_LEVELS)} (any case)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           parser_class=Parser)
    s = sub.add_parser("serve", help="serve the gateway",
                       description="Serve the gateway on a configuration file. SIGHUP "
                                   "reloads the file; SIGINT or SIGTERM stops.")
    s.add_argument("--config", required=True, metavar="FILE",
                   help="the configuration file (TOML)")
    s.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    s.add_argument("--port", type=port, default=8080, help=PORT_HELP)
    s.add_argument("--log-format", default="text", choices=LOG_FORMATS,
                   help="text: one human-readable line per record; json: one JSON object "
                        "per line, the fields of the Lambda log lines (docs/operations.md)")
    s.add_argument("--workers", default="1", metavar="N",
                   help="worker processes serving one port and sharing one state ([ledger] "
                        "path, [store] backend = \"dynamodb\", or without either a private "
                        "file for the run), or auto for one per core this process may use (its "
                        "CPU affinity, bounded by its cgroup's CPU quota; docs/operations.md)")
    s.add_argument("--worker-fd", type=int, default=None, help=argparse.SUPPRESS)
    s.add_argument("--worker-state", default=None, help=argparse.SUPPRESS)
    s.add_argument("--worker-dir", default=None, help=argparse.SUPPRESS)
    s.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    s.add_argument("--worker-instance", help=argparse.SUPPRESS)
    s.add_argument("--worker-beat", type=int, default=None, help=argparse.SUPPRESS)
    s.set_defaults(fn=cmd_serve)
    c = sub.add_parser("check", help="validate a configuration file",
                       description="Validate a configuration file and print every problem. "
                                   "An unset key variable is a warning (exit 0) unless "
                                   "--strict.")
    c.add_argument("--config", required=True, metavar="FILE",
                   help="the configuration file (TOML)")
    c.add_argument("--strict", action="store_true",
                   help="treat an unset environment variable named by api_key_env or "
                        "key_env as an error (exit 1), as on the machine that serves")
    c.set_defaults(fn=cmd_check)
    e = sub.add_parser("explain", help="explain a request offline (no live state)",
                       description="Print, as JSON, the plan the gateway would make for a "
                                   "request, without live health or latency.")
    e.add_argument("--config", required=True, metavar="FILE",
                   help="the configuration file (TOML)")
    e.add_argument("--model", required=True, help="the model the client asks for")
    e.add_argument("--key", default=None, help="the key id to explain for (none: no key)")
    e.add_argument("--header", action="append", metavar="NAME=VALUE", type=header,
                   help="a request header; repeat for more")
    e.add_argument("--prompt-tokens", type=count, default=None, metavar="N",
                   help="the prompt's size in tokens (none: unknown)")
    for flag, what in (("stream", "the request streams"), ("tools", "the request has tools"),
                       ("images", "the request has images"),
                       ("subagent", "the request comes from a subagent")):
        e.add_argument(f"--{flag}", action="store_true", help=what)
    e.set_defaults(fn=cmd_explain)
    co = sub.add_parser(
        "console", help="the admin API and the console, no client traffic",
        description="Serve the admin API and the console (/ui) on the configuration's "
                    "[store] and no client path: an operator's console for gateways that "
                    "share a store, e.g. an AWS deployment's DynamoDB tables "
                    "(docs/deploy.md, \"The console for an AWS deployment\").")
    co.add_argument("--config", required=True, metavar="FILE",
                    help="the configuration file (TOML): its [keys] say who may do what")
    co.add_argument("--stack", default=None, metavar="NAME",
                    help="read the DynamoDB tables from this CloudFormation stack's outputs "
                         "(StateTableName, LedgerTableName) instead of [store]")
    co.add_argument("--region", default=None,
                    help="the stack's and tables' region (none: [store] region, else the "
                         "AWS environment's)")
    co.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    co.add_argument("--port", type=port, default=8080, help=PORT_HELP)
    co.set_defaults(fn=cmd_console, log_format="text")
    st = sub.add_parser("store", help="manage the store [store] names")
    sts = st.add_subparsers(dest="store_command", required=True, metavar="COMMAND",
                            parser_class=Parser)
    ct = sts.add_parser("create-tables", help="create the DynamoDB tables [store] names, "
                                              "as template.yaml does (existing ones are left)")
    ct.add_argument("--config", required=True, metavar="FILE",
                    help="the configuration file (TOML) with [store] backend = \"dynamodb\"")
    ct.set_defaults(fn=cmd_store)
    m = sub.add_parser("simulate", help="run a simulated OpenAI-compatible provider")
    m.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    m.add_argument("--port", type=port, default=9001, help=PORT_HELP)
    m.add_argument("--profile", default="ok", choices=["ok", "slow", "flaky", "down", "zero"],
                   help="how the provider behaves")
    m.add_argument("--delay-ms", type=float, default=0, metavar="MS",
                   help="added to every answer")
    m.add_argument("--seed", type=int, default=None,
                   help="the random seed (none: a fresh one)")
    m.set_defaults(fn=cmd_simulate)
    d = sub.add_parser("demo", help="simulated providers + the gateway on examples/demo.toml")
    d.add_argument("--config", default=None, metavar="FILE",
                   help="the configuration (none: examples/demo.toml)")
    d.add_argument("--host", default="127.0.0.1", help="the gateway's address")
    d.add_argument("--port", type=port, default=8080,
                   help="the gateway's port, 0 to 65535 (0: a free one, which the banner names)")
    d.add_argument("--sim-ports", default="0,0,0", metavar="STEADY,FLAKY,SLOW",
                   help="the simulated providers' ports on 127.0.0.1; 0 picks a free one "
                        "(the banner prints them)")
    d.add_argument("--state-dir", default=None, metavar="DIR",
                   help="where the demo writes its files (the configuration as served, the "
                        "SQLite ledger); none: $XDG_STATE_HOME/humpyard/demo, else "
                        "~/.local/state/humpyard/demo")
    d.set_defaults(fn=cmd_demo)
    pr = sub.add_parser("prices", help="prices, context windows and capabilities from a "
                                       "models.dev catalogue")
    prs = pr.add_subparsers(dest="prices_command", required=True, metavar="COMMAND",
                            parser_class=Parser)
    from humpyard.prices import MODELS_DEV_URL
    pi = prs.add_parser("import", help="write the catalogue's facts for the configured "
                                       "endpoints to a file the configuration can include")
    pc = prs.add_parser("check", help="list where the configuration and the catalogue "
                                      "disagree (exit 1 if they do)")
    for sp in (pi, pc):
        sp.add_argument("--config", required=True, metavar="FILE",
                        help="the configuration file (TOML)")
        sp.add_argument("--from", dest="source", default=MODELS_DEV_URL, metavar="FILE|URL",
                        help="a models.dev-format catalogue")
        sp.set_defaults(fn=cmd_prices)
    pi.add_argument("--out", default=None, metavar="FILE",
                    help="the file to write (none: prices.toml beside the configuration)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Output cut short by a closed pipe (``humpyard … | head``)
    ends quietly with exit 1, the way the Python documentation's note on SIGPIPE
    says, instead of a ``BrokenPipeError`` traceback."""
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # inside the try: a closed pipe is noticed here
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's own flush at exit
        # does not raise (and print) the same error again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from humpyard.logsink import setup_logging
    setup_logging(args.log_level, buffered=args.command in ("serve", "demo", "console"),
                   json_lines=getattr(args, "log_format", "text") == "json")
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

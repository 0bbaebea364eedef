"""``humpyard demo``: simulated providers plus the gateway, for a first look.

Starts three simulated OpenAI-compatible providers on loopback (steady,
flaky, slow) and serves the gateway on ``examples/demo.toml``, then prints
commands to try, each of which works as printed. Everything stops on Ctrl-C.

Before anything starts, every port is bound (the gateway's ``--port``, the
simulators' ``--sim-ports``, free ones by default); a busy one ends the demo
with one line naming the port and the flag that changes it. The demo's files
go to its state directory (``--state-dir``, by default
``$XDG_STATE_HOME/humpyard/demo`` or ``~/.local/state/humpyard/demo``), never
the working directory: ``demo.toml``, the configuration as served (the
simulators' ports filled in, the ledger moved here), and the SQLite ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib.util
import os
import shlex
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIMULATORS = (("steady", "ok"), ("flaky", "flaky"), ("slow", "slow"))
NOTES = {"flaky": " (500s, 429s, slow answers)", "slow": " (200-800 ms)"}


class DemoError(Exception):
    """The demo cannot start; the message is the one line the user sees."""


@dataclass
class Listener:
    """A bound socket and what it is for (named in a busy-port message)."""

    name: str
    sock: socket.socket

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])


def state_dir(explicit: str | None, env: Mapping[str, str] | None = None) -> Path:
    """Where the demo keeps its files: ``explicit``, else the XDG state directory."""
    if explicit:
        return Path(explicit).expanduser()
    environ = os.environ if env is None else env
    base = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "humpyard" / "demo"


def parse_sim_ports(text: str) -> list[int]:
    """``"9101,9102,9103"`` → ports for steady, flaky and slow; 0 picks a free one."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != len(SIMULATORS) or not all(p.isdigit() and int(p) < 65536 for p in parts):
        raise DemoError(f"--sim-ports wants {len(SIMULATORS)} ports (steady,flaky,slow), "
                        f"0 for a free one; got {text!r}")
    return [int(p) for p in parts]


def _bind(host: str, port: int, what: str, flag: str) -> socket.socket:
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise DemoError(f"humpyard demo: cannot listen on {host!r}: {e.strerror}; "
                        "choose another with --host") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.set_inheritable(True)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            why = "is already in use"
        elif e.errno == errno.EACCES:
            why = "needs privileges to listen on"
        else:
            why = f"cannot be listened on ({e.strerror})"
        raise DemoError(f"humpyard demo: port {port} on {host} ({what}) {why}; "
                        f"choose another with {flag}") from None
    return sock


def bind_all(host: str, port: int, sim_ports: Sequence[int]) -> tuple[Listener, list[Listener]]:
    """Bind the gateway's and every simulator's port, or raise ``DemoError`` for the
    first busy one with nothing left bound."""
    bound: list[Listener] = []
    try:
        for (name, _), p in zip(SIMULATORS, sim_ports, strict=True):
            bound.append(Listener(name, _bind("127.0.0.1", p, f"simulated provider {name!r}",
                                              "--sim-ports (0 picks a free port)")))
        gateway = Listener("gateway", _bind(host, port, "the gateway", "--port"))
    except DemoError:
        for listener in bound:
            listener.sock.close()
        raise
    return gateway, bound


def find_config(explicit: str | None) -> Path:
    """``--config``, else ``examples/demo.toml`` here or in the source checkout."""
    if explicit:
        return Path(explicit)
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        p = base / "examples" / "demo.toml"
        if p.exists():
            return p
    raise DemoError("humpyard demo: examples/demo.toml not found; pass --config")


def served_config(source: Path, sims: Sequence[Listener], files: Path) -> Path:
    """Write ``source`` as the demo serves it into ``files``: the simulators' URLs
    with their real ports, the ledger (and any included file) at absolute paths."""
    import tomli_w

    from humpyard.config.files import TomlSyntaxError, parse_toml
    try:
        data = parse_toml(source.read_text())
    except OSError as e:
        raise DemoError(f"humpyard demo: cannot read {source}: {e.strerror}") from None
    except TomlSyntaxError as e:
        raise DemoError(f"humpyard demo: {source}: {e}") from None
    providers = data.get("providers")
    for sim in sims:
        if isinstance(providers, dict) and isinstance(providers.get(sim.name), dict):
            providers[sim.name]["base_url"] = f"http://127.0.0.1:{sim.port}/v1"
    ledger = data.get("ledger")
    if isinstance(ledger, dict):
        name = ledger.get("path", "humpyard.db")
        if isinstance(name, str) and not Path(name).is_absolute():
            ledger["path"] = str(files / name)
    if isinstance(data.get("include"), list):
        data["include"] = [str((source.parent / p).resolve()) if isinstance(p, str) else p
                           for p in data["include"]]
    files.mkdir(parents=True, exist_ok=True)
    out = files / "demo.toml"
    out.write_text(f"# {source.resolve()} as `humpyard demo` serves it (written at each start;\n"
                   "# edit that file, not this one).\n" + tomli_w.dumps(data))
    return out


def _url_host(host: str) -> str:
    """A host to put in a URL the user can call: a wildcard address means this machine."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def banner(url: str, sims: Sequence[Listener], config: Path, files: Path,
           python: str | None = None) -> str:
    """What the demo prints once everything listens: every command works as printed."""
    py = shlex.quote(python or sys.executable)
    sim_list = ", ".join(f"{s.name} :{s.port}{NOTES.get(s.name, '')}" for s in sims)
    sdk = (f"  {py} -c \"from openai import OpenAI; "
           f"c = OpenAI(base_url='{url}/v1', api_key='x'); \\\n"
           "print(c.chat.completions.create(model='demo', "
           "messages=[{'role': 'user', 'content': 'hi'}]))\"")
    if importlib.util.find_spec("openai") is None:
        sdk = f"  {py} -m pip install openai\n\n" + sdk
    return f"""
humpyard demo is running at {url} (console: {url}/ui)
  configuration: {config}
  simulated providers: {sim_list}
  files (served configuration, ledger): {files}

Try:
  curl -s {url}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{"model":"demo","messages":[{{"role":"user","content":"hello"}}]}}' -i

  curl -sN {url}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{"model":"fast","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}'

  curl -s {url}/v1/route/explain -H 'content-type: application/json' \\
    -d '{{"model":"demo","headers":{{"x-humpyard-profile":"deep"}}}}'

  curl -s {url}/v1/health ; curl -s '{url}/v1/decisions?limit=5'

{sdk}

Ctrl-C stops everything.
"""


async def _run(served: Path, shown: Path, files: Path, host: str, gateway: Listener,
               sims: Sequence[Listener]) -> None:
    """Serve the simulators and the gateway until SIGINT or SIGTERM, then stop them all.

    The demo owns the two signals: its servers leave them alone and stop together
    when told, each answering what it is still reading. A second signal is the
    platform's own: Ctrl-C raises KeyboardInterrupt, SIGTERM ends the process."""
    import uvicorn

    from humpyard.serving import notifying_server, serve
    from humpyard.simulate import create_simulator_app
    servers: list[Any] = []
    ready = [asyncio.Event() for _ in sims]
    for sim, event in zip(sims, ready, strict=True):
        profile = dict(SIMULATORS)[sim.name]
        app = create_simulator_app(profile, model_name=None, seed=sim.port)
        servers.append(notifying_server(uvicorn.Config(
            app, host="127.0.0.1", port=sim.port, access_log=False, log_level="warning",
            log_config=None), event.set, signals=False))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def stopping() -> None:
        for sig in signals:
            loop.remove_signal_handler(sig)
        stop.set()
        for s in servers:
            s.should_exit = True

    for sig in signals:
        loop.add_signal_handler(sig, stopping)
    tasks = [asyncio.create_task(s.serve(sockets=[sim.sock]))
             for s, sim in zip(servers, sims, strict=True)]
    await asyncio.gather(*(e.wait() for e in ready))
    url = f"http://{_url_host(host)}:{gateway.port}"
    try:
        await serve(str(served), host, gateway.port, sock=gateway.sock, stop=stop,
                    on_ready=lambda: print(banner(url, sims, shown, files), flush=True))
    finally:
        for s in servers:
            s.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)


def run_demo(config: str | None, host: str, port: int, sim_ports: str = "0,0,0",
             files: str | None = None) -> int:
    """Run the demo until Ctrl-C; 1 (and one line on stderr) if it cannot start."""
    from humpyard.config import load_config_text
    from humpyard.errors import ConfigError
    from humpyard.serving import run_loop
    try:
        source = find_config(config)
        where = state_dir(files)
        gateway, sims = bind_all(host, port, parse_sim_ports(sim_ports))
    except DemoError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        served = served_config(source, sims, where)
        # Refuse an invalid file before anything starts, naming the user's file.
        load_config_text(served.read_text(), source=str(source), base_dir=source.parent)
    except (DemoError, ConfigError, OSError) as e:
        for listener in (gateway, *sims):
            listener.sock.close()
        print(e if not isinstance(e, OSError) else
              f"humpyard demo: cannot write {where}: {e.strerror}", file=sys.stderr)
        return 1
    with contextlib.suppress(KeyboardInterrupt):
        run_loop(_run(served, source, where, host, gateway, sims))
    print("stopped", file=sys.stderr)
    return 0

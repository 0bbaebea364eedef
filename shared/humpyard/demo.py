"""``humpyard demo``: simulated providers plus the gateway, for a first look.

Starts three simulated OpenAI-compatible providers on loopback (steady,
flaky, slow) and serves the gateway on ``examples/demo.toml``, then prints
lines to try. Everything stops on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

SIMULATORS = (("steady", 9101, "ok"), ("flaky", 9102, "flaky"), ("slow", 9103, "slow"))


def _find_config(explicit: str | None) -> str:
    if explicit:
        return explicit
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        p = base / "examples" / "demo.toml"
        if p.exists():
            return str(p)
    raise SystemExit("examples/demo.toml not found; pass --config")


def _banner(host: str, port: int) -> str:
    url = f"http://{host}:{port}"
    return f"""
humpyard demo is running at {url}
  simulated providers: steady :9101, flaky :9102 (500s, 429s, slow answers), slow :9103

Try:
  curl -s {url}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{"model":"demo","messages":[{{"role":"user","content":"hello"}}]}}' -i
  curl -sN {url}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{{"model":"fast","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}'
  curl -s {url}/v1/route/explain -H 'content-type: application/json' \\
    -d '{{"model":"demo","headers":{{"x-humpyard-profile":"deep"}}}}'
  curl -s {url}/v1/health ; curl -s '{url}/v1/decisions?limit=5'

  python -c "from openai import OpenAI; c=OpenAI(base_url='{url}/v1', api_key='x'); \\
print(c.chat.completions.create(model='demo', messages=[{{'role':'user','content':'hi'}}]))"

Ctrl-C stops everything.
"""


async def _run(config_path: str, host: str, port: int) -> None:
    import uvicorn

    from humpyard.serving import serve
    from humpyard.simulate import create_simulator_app
    servers = []
    for _name, sim_port, profile in SIMULATORS:
        app = create_simulator_app(profile, model_name=None, seed=sim_port)
        servers.append(uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=sim_port, access_log=False, log_level="warning")))
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    await asyncio.sleep(0.3)
    print(_banner(host, port), flush=True)
    try:
        await serve(config_path, host, port)
    finally:
        for s in servers:
            s.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)


def run_demo(config: str | None, host: str, port: int) -> int:
    from humpyard.serving import run_loop
    path = _find_config(config)
    try:
        run_loop(_run(path, host, port))
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    return 0

"""``humpyard prices import --from URL``: the catalogue fetched over HTTP from a
local server, with the real command line in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from tests.support.servers import ServerThread, closed_port_url

CATALOGUE = Path(__file__).resolve().parents[1] / "fixtures" / "models-dev" / "api.json"
CONFIG = """
include = ["prices.toml"]
[providers.groq]
base_url = "https://api.groq.com/openai/v1"
[targets.big]
endpoints = [{ provider = "groq", model = "llama-3.3-70b-versatile" }]
"""


def catalogue_server() -> tuple[ServerThread, list[str]]:
    seen: list[str] = []

    async def api(request: Request) -> Response:
        seen.append(request.headers.get("user-agent", ""))
        return Response(CATALOGUE.read_bytes(), media_type="application/json")

    async def moved(request: Request) -> Response:
        return RedirectResponse("/api.json")

    async def gone(request: Request) -> Response:
        return Response("not here", status_code=404)

    app = Starlette(routes=[Route("/api.json", api), Route("/old.json", moved),
                            Route("/gone.json", gone)])
    return ServerThread(app), seen


def humpyard(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "humpyard.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_import_from_a_url_then_check_agrees(tmp_path):
    (tmp_path / "humpyard.toml").write_text(CONFIG)
    server, seen = catalogue_server()
    with server:
        r = humpyard("prices", "import", "--config", "humpyard.toml",
                     "--from", server.url + "/old.json", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "wrote 1 endpoint declaration to prices.toml" in r.stdout
        text = (tmp_path / "prices.toml").read_text()
        assert f"from {server.url}/old.json" in text and "input = 0.59" in text
        r = humpyard("prices", "check", "--config", "humpyard.toml",
                     "--from", server.url + "/api.json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("0 disagreements in 1 endpoint checked against http://")
    assert seen and all(ua == "humpyard-prices" for ua in seen)
    r = humpyard("check", "--config", "humpyard.toml", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("ok: 1 providers, 1 targets"), r.stderr


def test_a_url_that_fails_exits_2_with_one_line(tmp_path):
    (tmp_path / "humpyard.toml").write_text(CONFIG.replace('include = ["prices.toml"]', ""))
    server, _ = catalogue_server()
    with server:
        gone = humpyard("prices", "import", "--config", "humpyard.toml",
                        "--from", server.url + "/gone.json", cwd=tmp_path)
    refused = humpyard("prices", "check", "--config", "humpyard.toml", "--from",
                       closed_port_url("/api.json"), cwd=tmp_path)
    assert gone.returncode == 2
    assert gone.stderr.strip() == f"cannot fetch catalogue {server.url}/gone.json: HTTP 404"
    assert not (tmp_path / "prices.toml").exists()
    assert refused.returncode == 2
    assert refused.stderr.startswith("cannot fetch catalogue http://127.0.0.1:")
    assert "ConnectError" in refused.stderr and "Traceback" not in refused.stderr

"""``--port`` and ``--host`` of every command that listens: a port out of range is
refused as a bad flag (exit 2), and an address that cannot be listened on is one
line naming it, with the same exit code with one process or several (3).

Every test runs the real command as a child process, as ``test_cli.py`` does.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.unit.test_cli import ROOT, scrubbed_env

CONFIG = """
[providers.t]
base_url = "http://127.0.0.1:9/v1"
[targets.t]
endpoints = [{ provider = "t", model = "m" }]
"""


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """The command's outcome; a command still running after ``timeout`` (it started
    serving where it should have refused) fails the test."""
    try:
        return subprocess.run([sys.executable, "-m", "humpyard.cli", *args], cwd=str(ROOT),
                              env=scrubbed_env(), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"humpyard {' '.join(args)} was still running after {timeout} s")


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "humpyard.toml"
    path.write_text(CONFIG)
    return str(path)


@pytest.mark.parametrize("command,value", [
    ("serve", "99999"), ("serve", "65536"), ("serve", "-1"), ("serve --workers 2", "99999"),
    ("console", "70000"), ("simulate", "70000"), ("demo", "70000"),
])
def test_a_port_out_of_range_is_a_bad_flag(command, value, config, tmp_path):
    args = command.split()
    if args[0] in ("serve", "console"):
        args += ["--config", config]
    if args[0] == "demo":
        args += ["--state-dir", str(tmp_path / "st")]
    r = run(*args, "--port", value, timeout=15)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "--port" in lines[0] and "between 0 and 65535" in lines[0] and value in lines[0]
    assert not (tmp_path / "st").exists()


@pytest.mark.parametrize("value,port", [("0", 0), ("65535", 65535), ("8080", 8080)])
def test_ports_in_range_are_taken(value, port):
    from humpyard.cli import build_parser
    for command in (["serve", "--config", "f"], ["console", "--config", "f"], ["simulate"],
                    ["demo"]):
        assert build_parser().parse_args([*command, "--port", value]).port == port


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_taken_port_names_the_address_with_one_exit_code(workers, config):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run("serve", "--config", config, "--port", str(port), "--workers", workers)
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    if workers == "1":  # uvicorn's line: "error while attempting to bind on address (…)"
        assert f"('127.0.0.1', {port})" in r.stderr and "address already in use" in r.stderr
    else:  # printed before the log lines the parent buffered
        assert (f"cannot listen on 127.0.0.1:{port}: address already in use (--host/--port)"
                in r.stderr.splitlines()), r.stderr


@pytest.mark.parametrize("command", ["serve", "serve --workers 2", "console"])
def test_a_host_that_does_not_resolve_is_named(command, config):
    r = run(*command.split(), "--config", config, "--host", "nosuchhost.invalid",
            "--port", "0")
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    said = [line for line in r.stderr.splitlines()
            if line.startswith("cannot listen on nosuchhost.invalid:0: ")]
    assert len(said) == 1 and said[0].endswith("(--host)"), r.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_empty_host_is_every_interface(workers, config, tmp_path):
    """``--host ""`` listens on every interface, as uvicorn takes it, with one process or
    several: the check that names a host that does not resolve lets it through."""
    from tests.durability.process import ServeProcess
    server = ServeProcess(Path(config), tmp_path / "serve.log",
                          args=("--host", "", "--workers", workers))
    with server:
        assert httpx.get(server.url + "/v1/health", timeout=5).status_code == 200
    assert server.proc is not None and server.proc.returncode == 0, server.output()

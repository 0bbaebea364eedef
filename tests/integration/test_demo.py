"""``humpyard demo`` as a user runs it: a subprocess, real ports, the banner's
commands run in a shell exactly as printed, from a directory that is not the
checkout."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
DEMO_TOML = ROOT / "examples" / "demo.toml"


class Demo:
    """A running ``humpyard demo``; ``output`` collects stdout and stderr as they come."""

    def __init__(self, proc: subprocess.Popen[str]):
        self.proc = proc
        self.output = ""
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.output += line

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if text in self.output:
                    return self.output
            if self.proc.poll() is not None:
                self._reader.join(5)
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not printed; output so far:\n{self.output}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


@contextmanager
def demo(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Iterator[Demo]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "humpyard.cli", "demo", "--config", str(DEMO_TOML), *args],
        cwd=cwd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    d = Demo(proc)
    try:
        yield d
    finally:
        d.stop()


def listening_socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s




def commands(banner: str) -> list[str]:
    """The banner's commands: the blocks between "Try:" and "Ctrl-C", as printed."""
    body = banner.split("Try:\n", 1)[1].split("Ctrl-C stops everything.", 1)[0]
    return [textwrap.dedent(block).strip() for block in body.split("\n\n") if block.strip()]


def test_the_banner_commands_work_as_printed_and_files_stay_out_of_the_cwd(tmp_path):
    cwd = tmp_path / "somewhere-else"
    cwd.mkdir()
    state = tmp_path / "xdg-state"
    with demo("--port", "0", cwd=cwd, env={"XDG_STATE_HOME": str(state)}) as d:
        out = d.wait_for("Ctrl-C stops everything.")
        assert "humpyard demo is running at http://127.0.0.1:" in out
        files = state / "humpyard" / "demo"
        assert f"files (served configuration, ledger): {files}" in out
        sims = [line for line in out.splitlines() if "simulated providers:" in line][0]
        for name in ("steady", "flaky", "slow"):
            sim_port = int(sims.split(f"{name} :")[1].split()[0].rstrip(","))
            assert httpx.get(f"http://127.0.0.1:{sim_port}/v1/models").status_code == 200

        cmds = commands(out)
        assert len(cmds) == 5, cmds
        assert cmds[-1].startswith(sys.executable) or cmds[-1].startswith("'")
        results = [subprocess.run(["bash", "-c", c], cwd=cwd, capture_output=True, text=True,
                                  timeout=60, env={"PATH": os.environ["PATH"]}) for c in cmds]
        for c, r in zip(cmds, results, strict=True):
            assert r.returncode == 0, f"{c}\n{r.stdout}\n{r.stderr}"
        chat, stream, explain, health, sdk = (r.stdout for r in results)
        assert chat.startswith("HTTP/1.1 200") and "x-humpyard-route: demo" in chat
        assert "data: [DONE]" in stream
        assert '"route":"slow-large"' in explain.replace(" ", "")
        assert '"decisions"' in health
        assert sdk.startswith("ChatCompletion(")
        assert (files / "demo.toml").exists() and (files / "humpyard-demo.db").exists()
    assert d.proc.returncode == 0
    assert "Traceback" not in d.output
    assert list(cwd.iterdir()) == []  # nothing written where the demo was started


def sim_ports(banner: str) -> dict[str, int]:
    line = [x for x in banner.splitlines() if "simulated providers:" in x][0]
    return {name: int(line.split(f"{name} :")[1].split()[0].rstrip(","))
            for name in ("steady", "flaky", "slow")}


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def wait_refused(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not refused(port):
        assert time.monotonic() < deadline, f"port {port} still accepts connections"
        time.sleep(0.02)


CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


def start_request(port: int) -> socket.socket:
    """A chat request whose last bytes are not sent yet: the server is still reading it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\n"
                 b"content-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n" % len(CHAT) + CHAT[:-4])
    return sock


def finish_request(sock: socket.socket) -> bytes:
    """Send the rest of the request and read the answer until the server closes."""
    got = b""
    with sock:
        try:
            sock.sendall(CHAT[-4:])
            while chunk := sock.recv(65536):
                got += chunk
        except OSError:
            pass
    return got


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopping_answers_requests_in_flight_and_exits_cleanly(tmp_path, sig):
    """Ctrl-C (or SIGTERM) while two simulated providers are still reading a request:
    both are answered and the demo exits 0 without a traceback, whatever order its
    servers stop in. Each simulator used to stack its own signal handler on the one
    before; stopping in the order slow, flaky, steady handed the re-raised signal to a
    simulator already stopping, which then abandoned its request and its lifespan."""
    with demo("--port", "0", "--state-dir", str(tmp_path / "st"), cwd=tmp_path) as d:
        out = d.wait_for("Ctrl-C stops everything.")
        ports = sim_ports(out)
        gateway = int(out.split("running at http://127.0.0.1:")[1].split()[0])
        held = {name: start_request(ports[name]) for name in ("flaky", "steady")}
        d.proc.send_signal(sig)
        wait_refused(gateway)
        wait_refused(ports["slow"])
        answers = {}
        for name in ("flaky", "steady"):  # the last two stop in this order
            wait_refused(ports[name])  # stopping: no new connections, ours still open
            answers[name] = finish_request(held[name])
        code = d.proc.wait(30)
        d._reader.join(5)
    assert answers["flaky"].startswith(b"HTTP/1.1 "), answers["flaky"]
    assert answers["steady"].startswith(b"HTTP/1.1 200 "), answers["steady"]
    assert code == 0, d.output
    assert "Traceback" not in d.output
    assert d.output.rstrip().endswith("stopped")


def test_a_busy_gateway_port_is_one_line_before_anything_starts(tmp_path):
    busy = listening_socket()
    port = busy.getsockname()[1]
    try:
        with demo("--port", str(port), "--state-dir", str(tmp_path / "st"), cwd=tmp_path) as d:
            code = d.proc.wait(30)
            d._reader.join(5)
    finally:
        busy.close()
    assert code == 1
    assert d.output.strip() == (f"humpyard demo: port {port} on 127.0.0.1 (the gateway) is "
                                "already in use; choose another with --port")
    assert not (tmp_path / "st").exists()  # nothing started, nothing written


def test_a_busy_simulator_port_names_the_port_and_the_flag(tmp_path):
    busy = listening_socket()
    port = busy.getsockname()[1]
    try:
        with demo("--port", "0", "--sim-ports", f"0,{port},0", "--state-dir",
                  str(tmp_path / "st"), cwd=tmp_path) as d:
            code = d.proc.wait(30)
            d._reader.join(5)
    finally:
        busy.close()
    assert code == 1
    assert d.output.strip() == (f"humpyard demo: port {port} on 127.0.0.1 (simulated provider "
                                "'flaky') is already in use; choose another with --sim-ports "
                                "(0 picks a free port)")


def test_chosen_simulator_ports_are_used(tmp_path):
    ports = [free_port() for _ in range(3)]  # racy by nature: a clash fails, never passes
    with demo("--port", "0", "--sim-ports", ",".join(map(str, ports)), "--state-dir",
              str(tmp_path / "st"), cwd=tmp_path) as d:
        out = d.wait_for("Ctrl-C stops everything.")
        assert (f"steady :{ports[0]}, flaky :{ports[1]} (500s, 429s, slow answers), "
                f"slow :{ports[2]}") in out
        served = (tmp_path / "st" / "demo.toml").read_text()
        assert f'base_url = "http://127.0.0.1:{ports[1]}/v1"' in served
        assert f'path = "{tmp_path / "st" / "humpyard-demo.db"}"' in served


@pytest.mark.parametrize("value", ["1,2", "a,b,c", "70000,0,0"])
def test_bad_sim_ports_are_one_line(tmp_path, value):
    r = subprocess.run([sys.executable, "-m", "humpyard.cli", "demo", "--sim-ports", value,
                        "--state-dir", str(tmp_path)], capture_output=True, text=True,
                       timeout=30, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"--sim-ports wants 3 ports (steady,flaky,slow), 0 for a free "
                                f"one; got {value!r}")


def test_an_invalid_configuration_is_one_message_naming_the_file(tmp_path):
    bad = tmp_path / "demo.toml"
    bad.write_text(DEMO_TOML.read_text().replace("[routes.fast]", "[routes.fast]\ntargts = []"))
    r = subprocess.run([sys.executable, "-m", "humpyard.cli", "demo", "--config", str(bad),
                        "--port", "0", "--state-dir", str(tmp_path / "st")],
                       capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"invalid configuration ({bad}):")
    assert "routes.fast.targts: unknown key; did you mean 'targets'?" in r.stderr

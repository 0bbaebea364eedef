"""``humpyard serve`` as a real child process, for tests that kill it or read its log.

``ServeProcess(config_path, log_path)`` runs ``python -m humpyard.cli serve``
with ``PYTHONPATH`` pointing at this checkout's ``shared``; ``start()``
returns once the server answers HTTP. ``kill()`` is ``SIGKILL`` (nothing runs
in the child afterwards), ``stop()`` is ``SIGTERM`` (uvicorn shuts down and
the gateway closes its writer and store). Output goes to ``log_path``, never
a pipe, so a chatty server cannot block on a full pipe. ``SimulatorProcess``
runs the project's zero-work simulated provider the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


class SimulatorProcess:
    """``humpyard simulate --profile zero`` as a child process: an upstream that does
    no work, so a load test measures the gateway rather than its upstream."""

    def __init__(self, log_path: Path):
        self.log_path = log_path
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> SimulatorProcess:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "humpyard.cli", "--log-level", "WARNING", "simulate",
                 "--profile", "zero", "--port", str(self.port)],
                cwd=str(ROOT), env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1)
                return self
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError("humpyard simulate did not start") from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class ServeProcess:
    """One ``humpyard serve`` child process on a free loopback port."""

    def __init__(self, config_path: Path, log_path: Path, *,
                 env: Mapping[str, str] | None = None, log_level: str = "INFO",
                 args: Sequence[str] = (),
                 preexec_fn: Callable[[], object] | None = None, command: str = "serve"):
        self.args = tuple(args)  # more ``serve`` flags (``--log-format json``)
        self.command = command  # or ``console``, which takes the same --config and --port
        self.config_path = config_path
        self.preexec_fn = preexec_fn  # run in the child before exec (e.g. setrlimit)
        self.log_path = log_path
        self.env = dict(env or {})
        self.log_level = log_level
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 20.0) -> ServeProcess:
        """Start the child and wait until it answers; retries once on a port clash."""
        for _ in range(3):
            if self._start_once(timeout):
                return self
        raise RuntimeError(f"humpyard serve did not start:\n{self.output()[-3000:]}")

    def _start_once(self, timeout: float) -> bool:
        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}",
               "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "humpyard.cli", "--log-level", self.log_level, self.command,
                 "--config", str(self.config_path), "--port", str(self.port), *self.args],
                cwd=str(ROOT), env=env, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=self.preexec_fn)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                httpx.get(self.url + "/v1/health", timeout=1)
                return True
            except httpx.TransportError:
                time.sleep(0.05)
        self.kill()
        return False

    def kill(self) -> None:
        """``SIGKILL``: the process ends at once, mid-whatever it was doing."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """``SIGTERM`` and wait for a clean exit (killed if it takes too long)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

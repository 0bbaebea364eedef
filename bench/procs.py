"""Starting, pinning, watching and stopping the processes a benchmark needs.

Every process is started in its own session so that stopping it (SIGTERM,
then SIGKILL after a grace period) reaches its children too, and only them.
``pin(cmd, cpu)`` prefixes ``taskset -c CPU`` when taskset exists and the
machine has at least two cores.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


def cores() -> int:
    return os.cpu_count() or 1


def can_pin() -> bool:
    return cores() >= 2 and shutil.which("taskset") is not None


GATEWAY_CPU = 0  # the process under test
LOAD_CPU = 1  # load generator, simulator and this script


def pin(cmd: Sequence[str], cpu: int) -> list[str]:
    """``cmd`` prefixed with ``taskset -c cpu`` when pinning is possible."""
    if can_pin():
        return ["taskset", "-c", str(cpu), *cmd]
    return list(cmd)


def pin_self(cpu: int) -> None:
    """Pin this process (the latency client) to ``cpu`` when pinning is possible."""
    if can_pin():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})


def boost_self(niceness: int = -10) -> int | None:
    """Raise this process's priority (children inherit it) so that other work on a
    shared machine disturbs the measurements less; the niceness set, or None if not
    allowed (only root may lower it)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except OSError:
        return None
    return niceness


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    """A started process and where its output goes."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def start(name: str, cmd: Sequence[str], log: Path, *, env: dict[str, str] | None = None,
          cwd: str | None = None) -> Proc:
    """Start ``cmd`` in a new session, stdout and stderr into ``log``."""
    out = open(log, "wb")  # noqa: SIM115 - the child owns it for its lifetime
    popen = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                             cwd=cwd, start_new_session=True)
    out.close()
    return Proc(name, popen, log)


def stop(proc: Proc, grace: float = 8.0) -> None:
    """SIGTERM the process group started for ``proc``, SIGKILL it after ``grace`` s."""
    if proc.popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.popen.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.popen.wait(5)


@contextlib.contextmanager
def running(procs: list[Proc]) -> Iterator[list[Proc]]:
    """Stop every process in ``procs`` (also ones appended inside) on the way out."""
    try:
        yield procs
    finally:
        for p in reversed(procs):
            stop(p)


def wait_http(port: int, path: str, proc: Proc | None, timeout: float,
              headers: dict[str, str] | None = None) -> float:
    """Seconds until ``GET path`` answers (any status); raises RuntimeError on timeout."""
    t0 = time.perf_counter()
    url = f"http://127.0.0.1:{port}{path}"
    while time.perf_counter() - t0 < timeout:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")
        try:
            req = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(req, timeout=2):
                return time.perf_counter() - t0
        except urllib.error.HTTPError:
            return time.perf_counter() - t0
        except (OSError, ValueError):
            time.sleep(0.1)
    tail = proc.tail() if proc is not None else ""
    raise RuntimeError(f"no answer on 127.0.0.1:{port}{path} after {timeout:.0f}s\n{tail}")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                out.extend(int(c) for c in text.split())
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(_children(p))
    return seen


def rss_mb(pid: int) -> float | None:
    """VmRSS of ``pid`` and its descendants, in MB (from /proc/<pid>/status)."""
    total_kb, found = 0, False
    for p in tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
                    found = True
    return round(total_kb / 1024, 1) if found else None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its descendants so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in tree(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies over all cores since boot, from /proc/stat."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in parts[:8]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))


def in_turn(items: list, round_index: int) -> list:
    """The variants of one A/B round in the order to drive them: the variant driven
    second in a round has paid more, whichever it was (docs/decisions/
    0003-performance.md), so every other round reverses the order and a run's
    medians and paired ratios carry no order of their own."""
    return list(items) if round_index % 2 == 0 else list(items)[::-1]


def spread_cpus() -> list[int]:
    """The cores to give a gateway's workers one each, the load generator's last
    (on two cores the second worker shares it)."""
    others = [c for c in range(cores()) if c not in (GATEWAY_CPU, LOAD_CPU)]
    return [GATEWAY_CPU, *others, LOAD_CPU]


def pin_process(pid: int, cpu: int) -> None:
    """Move every thread of the running ``pid`` to ``cpu``."""
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task), {cpu})


def connections_by_pid(port: int, pids: Sequence[int]) -> dict[int, int]:
    """Established TCP connections on local ``port`` that each of ``pids`` holds (read
    from /proc/net/tcp and tcp6 and each process's open files)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                f = line.split()
                if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f[9])
    out: dict[int, int] = {}
    for pid in pids:
        n = 0
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        n += 1
        out[pid] = n
    return out

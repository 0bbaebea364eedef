"""The values the ``humpyard`` command's flags take (``--workers`` among them), the
socket ``serve --workers`` listens on, and what it says when it cannot listen where
``--host`` and ``--port`` say.

A type here raises ``argparse.ArgumentTypeError``, so a bad value is argparse's one
line naming the flag (exit 2). An address that cannot be listened on ends ``serve``
and ``console`` with ``CANNOT_LISTEN``, with one process or several.
"""

from __future__ import annotations

import argparse
import errno
import socket

MAX_PORT = 65535
MAX_WORKERS = 256
BACKLOG = 2048  # the listening socket ``serve --workers`` binds once for every worker
# uvicorn's exit code when it cannot start (``uvicorn.config.STARTUP_FAILURE``): what a
# single process exits with when its port is taken; the parent of --workers N says the same.
CANNOT_LISTEN = 3


def level(value: str) -> str:
    """``--log-level``: any case."""
    return value.upper()


def header(value: str) -> tuple[str, str]:
    """``--header NAME=VALUE``."""
    name, sep, rest = value.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"want NAME=VALUE, got {value!r}")
    return name.strip(), rest


def port(value: str) -> int:
    """``--port``: 0 to 65535; 0 lets the kernel choose (the log line names the port)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number between 0 and {MAX_PORT}, not {value!r}") from None
    if not 0 <= n <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_PORT}, not {n}")
    return n


def count(value: str) -> int:
    """A count such as ``--prompt-tokens``: a non-negative integer, as
    ``POST /v1/route/explain`` wants its fields."""
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {value!r}")
    return n


def cannot_listen(host: str, port: int, e: OSError) -> str:
    """One line: the address, why it cannot be listened on, and the flags that chose it."""
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address
    if isinstance(e, socket.gaierror):
        return f"cannot listen on {shown}:{port}: the host does not resolve ({e.strerror}) (--host)"
    why = {errno.EADDRINUSE: "address already in use",
           errno.EACCES: "permission denied (a port below 1024 needs privileges)",
           errno.EADDRNOTAVAIL: "no such address on this machine"}.get(
        e.errno or 0, e.strerror or str(e))
    return f"cannot listen on {shown}:{port}: {why} (--host/--port)"


def unresolved(host: str, port: int) -> str | None:
    """``cannot_listen``'s line when ``host`` does not resolve, else None. Only the name
    is checked: the server binds (and says, naming the address, when the port is taken).
    An empty host is every interface, as asyncio's ``create_server`` takes it."""
    try:
        socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return cannot_listen(host, port, e)
    return None


def worker_count(value: str) -> int:
    """``--workers``: a positive number, or ``auto`` (the cores this process may use:
    its affinity, bounded by its cgroup's CPU quota, ``cores.py``)."""
    if value == "auto":
        from humpyard.cores import available_cores
        return min(available_cores(), MAX_WORKERS)
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"--workers must be a number or auto, not {value!r}") from None
    if not 1 <= n <= MAX_WORKERS:
        raise ValueError(f"--workers must be between 1 and {MAX_WORKERS}, not {n}")
    return n


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket the workers inherit; ``OSError`` (``socket.gaierror``
    for a host that does not resolve) with nothing left open when it cannot be had. An
    empty host is every interface, as for one process (asyncio's ``create_server``)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock

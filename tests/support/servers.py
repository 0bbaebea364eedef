"""Real servers on loopback for tests: any ASGI app, or a scriptable upstream.

``ServerThread`` serves an ASGI app (the gateway, the simulator) with uvicorn
in a background thread; ``FakeUpstream`` (re-exported from
``tests.support.fake_upstream``) is a scriptable OpenAI-compatible upstream.
Both bind 127.0.0.1 on a free port, are ready when ``start()``/``__enter__``
returns, and leave no thread, socket or event loop behind when stopped.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from tests.support.fake_upstream import FakeUpstream, RecordedRequest

__all__ = ["FakeUpstream", "RecordedRequest", "ServerThread", "closed_port_url", "free_port",
           "silent_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (racy: prefer port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def closed_port_url(path: str = "/v1") -> str:
    """A URL on 127.0.0.1 where nothing listens: connecting is refused."""
    return f"http://127.0.0.1:{free_port()}{path}"


@contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port that silently drops connections: dialling it hangs until the
    connect timeout, like a host behind a firewall that DROPs.

    A listener that never accepts, with its accept queue filled by a few
    connections of our own: Linux then drops further SYNs without an answer
    (the client retransmits), on loopback too.
    """
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        for _ in range(4):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            fillers.append(s)
            s.setblocking(False)
            try:
                s.connect(srv.getsockname())
            except BlockingIOError:
                pass
        yield int(srv.getsockname()[1])
    finally:
        for s in fillers:
            s.close()
        srv.close()


class ServerThread:
    """Serve an ASGI app with uvicorn on 127.0.0.1 in a background thread.

    ``with ServerThread(app) as srv: srv.url`` → ``"http://127.0.0.1:PORT"``.
    The listening socket is bound before the thread starts, so the port
    (``port``, ``url``) is never raced. ``start()`` returns once uvicorn serves
    (lifespan startup done); ``stop()`` lets requests in flight finish for up
    to ``graceful_timeout`` seconds, cancels the rest, and joins the thread.
    Extra keyword arguments go to ``uvicorn.Config``.
    """

    def __init__(self, app: Any, *, lifespan: str = "auto", log_level: str = "warning",
                 graceful_timeout: float = 1.0, start_timeout: float = 10.0, **config: Any):
        self.app = app
        self.host = "127.0.0.1"
        self.port = 0
        # ws="none": no websockets import (its deprecation warnings would be errors);
        # log_config=None: leave the process's logging configuration alone.
        self._config = dict(lifespan=lifespan, log_level=log_level, log_config=None,
                            access_log=False, ws="none",
                            timeout_graceful_shutdown=graceful_timeout, **config)
        self._start_timeout = start_timeout
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.server: uvicorn.Server | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ServerThread:
        """Start serving; raise RuntimeError if uvicorn did not come up in time."""
        if self._thread is not None:
            raise RuntimeError("ServerThread already started")
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only
        # when the listening socket says it is TCP; without it every keep-alive
        # request waits ~40 ms on Nagle and delayed ACKs.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.bind((self.host, 0))
        self.port = int(self._sock.getsockname()[1])
        self.server = server = uvicorn.Server(
            uvicorn.Config(self.app, host=self.host, port=self.port, **self._config))
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [self._sock]},
                                        name=f"uvicorn-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn did not start on {self.url}")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Shut uvicorn down and join its thread. Idempotent."""
        thread, self._thread = self._thread, None
        if thread is not None and self.server is not None:
            self.server.should_exit = True
            thread.join(timeout)
            if thread.is_alive():
                self.server.force_exit = True
                thread.join(timeout)
            if thread.is_alive():
                raise RuntimeError(f"uvicorn on {self.url} did not stop")
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

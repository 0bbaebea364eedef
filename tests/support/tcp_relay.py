"""A TCP relay in front of a local server that can be cut off: a store that goes away.

``TcpRelay(port)`` listens on loopback (``url``) and relays each connection to
``127.0.0.1:port``, one thread per direction. ``cut()`` resets every relayed
connection and answers each new one with a reset (a host that is down, as a
client sees it: "connection refused" or "connection reset"). ``stall()`` keeps
every connection open and relays nothing more (a network partition, a black
hole: the client sees only its own timeouts). ``mend()`` resets what was
stalled and relays again.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


class TcpRelay:
    def __init__(self, port: int) -> None:
        self._target = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._down = False
        self._stalled = False
        self._held: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="tcp-relay", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        with self._lock:
            self._down = True
            live, self._open = self._open, set()
        for s in live:
            _reset(s)

    def stall(self) -> None:
        with self._lock:
            self._stalled = True

    def mend(self) -> None:
        with self._lock:
            self._down = False
            was_stalled, self._stalled = self._stalled, False
            held, self._held = self._held, []
            if was_stalled:  # what went silent stays silent: reset, as a dead peer is
                held += self._open
                self._open = set()
        for s in held:
            _reset(s)

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()

    def __enter__(self) -> TcpRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                down, stalled = self._down, self._stalled
                if stalled and not down:
                    self._held.append(client)  # accepted, never answered
            if down:
                _reset(client)
                continue
            if stalled:
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._open.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if self._stalled:  # swallowed: the other side hears nothing more
                    continue
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _reset(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    with contextlib.suppress(OSError):
        s.close()

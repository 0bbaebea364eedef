"""Accepting connections for the threaded test servers, and closing with nothing left open.

``FakeUpstream``, ``RawServer`` and ``ForwardProxy`` stop while a client may
still be connecting (a call cancelled half-way, a test that stops its upstream
mid-flight). ``asyncio.Server.close()`` cannot do that cleanly: a connection
accepted in the loop tick before ``close()`` gets its transport a tick later,
``Server._attach()`` asserts, and the half-built transport is garbage collected
in some later test as ``ResourceWarning: unclosed transport`` (CPython
gh-109564, open; seen here on 3.11). ``Listener`` accepts in a reader callback
and gives every accepted socket to a task it tracks from that moment, so
``close()`` can cancel every handler, started or not, and close every socket.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Listener:
    """Serve ``handler(reader, writer)`` for each connection to ``host:port``.

    ``start()`` (in the loop that serves) binds and listens; port 0 picks a
    free port, then ``port`` says which. A connection's transport is aborted
    when its handler returns or raises. ``await close()`` stops accepting,
    cancels every handler and returns once every accepted socket is closed.
    ``limit`` is the ``StreamReader`` buffer limit; ``ssl_context`` makes it TLS.
    """

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0, *,
                 ssl_context: ssl.SSLContext | None = None, limit: int = 1 << 16,
                 backlog: int = 100):
        self.host, self.port = host, port
        self._handler = handler
        self._ssl = ssl_context
        self._limit = limit
        self._backlog = backlog
        self._sock: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._accepted: set[socket.socket] = set()  # until the handler's task is done

    def start(self) -> Listener:
        """Bind and listen; connections are served from the next loop tick."""
        loop = asyncio.get_running_loop()
        # IPPROTO_TCP as asyncio's own servers do: accepted sockets inherit it, and
        # only then does asyncio set TCP_NODELAY on them (no Nagle delay per write).
        family, type_, proto, _, addr = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP,
            flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, type_, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(self._backlog)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self.port = int(sock.getsockname()[1])
        loop.add_reader(sock.fileno(), self._accept, sock)
        return self

    def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(self._backlog):
            try:
                conn, _ = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            conn.setblocking(False)
            # Tracked before anything can be cancelled: close() finds it either way.
            self._accepted.add(conn)
            task = loop.create_task(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            reader = asyncio.StreamReader(limit=self._limit)
            protocol = asyncio.StreamReaderProtocol(reader)
            try:
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn,
                                                                  ssl=self._ssl)
            except OSError:  # the client left, or its TLS handshake failed
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            try:
                await self._handler(reader, writer)
            finally:
                transport.abort()
        finally:
            # Closing the socket a transport already aborted is a no-op for it.
            self._accepted.discard(conn)
            conn.close()

    async def close(self) -> None:
        """Stop accepting, cancel every handler, close every accepted socket. Idempotent."""
        sock, self._sock = self._sock, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A task cancelled before its first step never ran its ``finally``.
        for conn in self._accepted:
            conn.close()
        self._accepted.clear()


class ListenerThread:
    """A ``Listener`` serving ``handler`` on an event loop in a thread of its own, from
    ``__enter__`` to ``__exit__``; ``port`` is the one it listens on once entered."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", *,
                 ssl_context: ssl.SSLContext | None = None, name: str = "test server"):
        self.host, self.port = host, 0
        self._handler = handler
        self._ssl = ssl_context
        self._name = name
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def __enter__(self) -> ListenerThread:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError(f"{self._name} did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(5)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        listener = Listener(self._handler, self.host, 0, ssl_context=self._ssl)
        self.port = listener.start().port
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await listener.close()

"""``humpyard serve``: the serve loop (``serve`` under ``run_loop``), and its HTTP
protocol: uvicorn's, with a response's head and body sent in one write.

``serve`` loads the configuration, builds the app, installs the reload triggers
(SIGHUP, ``reload_poll_secs``) and runs uvicorn until it stops; ``humpyard
serve`` and ``humpyard demo`` both run it.

uvicorn writes a response's status line and headers to the socket as soon as
the app sends ``http.response.start``, and the body when it sends the body: two
``send`` system calls, and two wake-ups of the client, for every buffered
answer; each ``send`` is a measurable share of the gateway's own time
(docs/decisions/0003-performance.md, "Round 2"). ``HeadHoldingTransport``
keeps a response head back until the next write, which it joins to it, or until
the end of the current event-loop turn (a stream's head goes out before its first
event has arrived, as before). Everything else passes straight through.

``ConnectionGuard`` bounds the client connections before the app sees a request
(``[server]``; docs/security.md, "Client connections";
docs/decisions/0011-client-connections.md): at most ``max_connections`` open (a
503 beyond), a request head complete within ``header_timeout_secs`` and at most
``max_header_bytes`` long (a 431, counted while reading), idle keep-alive
connections closed after ``keepalive_timeout_secs``. ``serve`` owns SIGINT and
SIGTERM unless its caller does: a stop drains the log and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

log = logging.getLogger("humpyard")
T = TypeVar("T")

_HEAD_START = b"HTTP/1.1 "
_HEAD_END = b"\r\n\r\n"


class HeadHoldingTransport:
    """A transport wrapper that holds a response head back until the body's write."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data[:9] == _HEAD_START and data[-4:] == _HEAD_END:
            self._held = bytes(data)
            self._loop.call_soon(self._release)
        elif data:
            self._transport.write(data)

    def writelines(self, lines: Any) -> None:
        self.write(b"".join(lines))

    def _release(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._release()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


LINGER_SECS = 1.0
"""How long a refused connection keeps reading (and dropping) what the client still
sends after its answer: closing a socket with unread bytes sends a reset, and the
client would see the reset instead of the answer."""
LOG_EVERY_SECS = 10.0
"""At most one WARNING per this many seconds about connections refused at the cap."""
MAX_NOFILE = 65536
"""``serve`` raises its soft open-files limit up to the hard limit, at most to this."""


def _refusal(status: bytes, code: str, message: str) -> bytes:
    body = (b'{"error":{"message":"' + message.encode() + b'","type":"invalid_request_error",'
            b'"code":"' + code.encode() + b'"}}')
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
            + body)


def raise_open_files_limit(limit: int = MAX_NOFILE) -> int:
    """Raise the soft open-files limit towards the hard one (at most ``limit``);
    the soft limit in force afterwards."""
    import resource
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # no such limit here
        return limit
    want = limit if hard == resource.RLIM_INFINITY else min(hard, limit)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (OSError, ValueError):
            pass
    return limit if soft == resource.RLIM_INFINITY else int(soft)


def connection_cap(configured: int | None, nofile: int) -> int:
    """Client connections ``serve`` keeps open at most: ``configured`` (``[server]
    max_connections``) or, by default, the open-files limit ``nofile`` less a reserve
    (a quarter of it, at least 64) for upstream sockets, the ledger and connections
    being refused; never more than that safe figure."""
    safe = max(8, nofile - max(64, nofile // 4))
    return safe if configured is None else min(configured, safe)


class ConnectionGuard:
    """What bounds the client connections of one ``serve``: at most ``cap()`` open
    (beyond it a 503 and ``connection: close``), a request head complete within
    ``header_timeout_secs`` (``sweep``), at most ``max_header_bytes`` of it read
    (else a 431), ``keepalive_timeout_secs`` between requests; ``[server]``, read
    afresh from ``settings()`` so a reload applies to new connections and heads."""

    def __init__(self, settings: Callable[[], Any], nofile: int,
                 refused: Any = None, now: Callable[[], float] | None = None) -> None:
        self.settings = settings
        self.nofile = nofile
        self.refused = refused  # the humpyard_connections_refused_total counter, if any
        self.open: set[Any] = set()  # accepted connections (protocols), not refused ones
        # Connections refused at the cap, still draining, oldest first.
        self.lingering: dict[Any, None] = {}
        self._cap_for: tuple[Any, int] = (None, 0)
        self._unlogged = 0
        self._logged_at = -LOG_EVERY_SECS
        self._now = now or (lambda: asyncio.get_running_loop().time())

    def cap(self) -> int:
        spec = self.settings()
        seen, cap = self._cap_for
        if spec is not seen:
            cap = connection_cap(spec.max_connections, self.nofile)
            if spec.max_connections is not None and cap < spec.max_connections:
                log.warning("[server] max_connections = %d is above what the open-files limit "
                            "(%d) leaves room for; using %d", spec.max_connections,
                            self.nofile, cap)
            self._cap_for = (spec, cap)
        return cap

    def count(self, reason: str) -> None:
        if self.refused is not None:
            self.refused.inc(reason=reason)

    def over_cap(self) -> None:
        """Count a connection refused at the cap; a WARNING at most every ``LOG_EVERY_SECS``."""
        self.count("max_connections")
        self._unlogged += 1
        now = self._now()
        if now - self._logged_at >= LOG_EVERY_SECS:
            log.warning("refused %d client connection(s) with 503: %d open, at the [server] "
                        "max_connections cap of %d (open-files limit %d)", self._unlogged,
                        len(self.open), self.cap(), self.nofile)
            self._unlogged = 0
            self._logged_at = now

    def expire_heads(self, now: float) -> None:
        """Close every connection whose request head is older than the header timeout."""
        limit = self.settings().header_timeout_secs
        for conn in [c for c in self.open if c.head_since is not None
                     and now - c.head_since > limit]:
            conn.head_timed_out()

    async def sweep(self) -> None:
        """``expire_heads`` a few times per header timeout (at least once a second)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, self.settings().header_timeout_secs / 4))
            self.expire_heads(loop.time())


def protocol_class(guard: ConnectionGuard | None = None) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol (h11 when httptools is missing), head-holding;
    with ``guard``, the httptools protocol keeps to its limits (``ConnectionGuard``)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:  # httptools is not installed: uvicorn's h11 protocol, unguarded
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]
        guard = None

    class HeadHoldingProtocol(Base):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(HeadHoldingTransport(transport, self.loop))  # type: ignore[arg-type]

    if guard is None:
        return HeadHoldingProtocol
    return _guarded(HeadHoldingProtocol, guard)


def _guarded(base: type[Any], guard: ConnectionGuard) -> type[asyncio.Protocol]:
    class GuardedProtocol(base):  # type: ignore[valid-type, misc]
        """``base`` within ``guard``'s limits. ``head_since``: when the request head
        being read began (the connection's start for the first), None between heads;
        ``head_bytes``: bytes received since then; ``refused``: answered and draining."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            spec = guard.settings()
            self.timeout_keep_alive = spec.keepalive_timeout_secs
            self.max_head = spec.max_header_bytes
            self.head_since: float | None = None
            self.head_bytes = 0
            self.refused = False
            self._linger: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(guard.open) >= guard.cap():
                self.refused = True
                self.transport = transport
                guard.over_cap()
                if len(guard.lingering) >= max(16, guard.nofile // 8):
                    # Refusing many at once: the oldest refused one has had its answer.
                    oldest = next(iter(guard.lingering))
                    del guard.lingering[oldest]
                    oldest.transport.close()
                guard.lingering[self] = None
                self._answer_and_close(_refusal(
                    b"503 Service Unavailable", "too_many_connections",
                    "too many open connections; retry later"))
                return
            guard.open.add(self)
            self.head_since = self.loop.time()
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._linger is not None:
                self._linger.cancel()
                self._linger = None
            guard.lingering.pop(self, None)
            if self not in guard.open:
                return
            guard.open.discard(self)
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return  # answered already: what follows is dropped
            n = len(data)
            if self.head_bytes + n > self.max_head and self._at_head():
                # A read that may hold a whole oversized head (reads are up to
                # 256 KiB): measure the head up to its end before parsing any of it.
                end = data.find(b"\r\n\r\n")
                size = (self.head_bytes if self.head_since is not None else 0) + (
                    end + 4 if end >= 0 else n)
                if size > self.max_head:
                    self._head_too_large()
                    return
            super().data_received(data)
            if self.head_since is not None and not self.transport.is_closing():
                self.head_bytes += n
                if self.head_bytes > self.max_head:
                    self._head_too_large()

        def _at_head(self) -> bool:
            """Whether what arrives now is (part of) a request head, not a body."""
            cycle = self.cycle
            return self.head_since is not None or cycle is None or cycle.response_complete

        def on_message_begin(self) -> None:
            if self.head_since is None:
                self.head_since = self.loop.time()
            self.head_bytes = 0
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self.head_since = None
            self.head_bytes = 0
            super().on_headers_complete()

        def _head_too_large(self) -> None:
            guard.count("headers_too_large")
            limit = self.max_head
            self._stop_reading(_refusal(
                b"431 Request Header Fields Too Large", "headers_too_large",
                f"request head: more than {limit} bytes (the line and headers together)"))

        def head_timed_out(self) -> None:
            guard.count("header_timeout")
            if self.head_bytes or (self.cycle is not None and not self.cycle.response_complete):
                self._stop_reading(_refusal(b"408 Request Timeout", "request_timeout",
                                            "the request head did not arrive in time"))
            else:  # nothing sent since the connection (or the last answer): just close
                self.head_since = None
                self.transport.close()

        def _stop_reading(self, answer: bytes) -> None:
            """Answer (unless a response is under way, then just close) and drain."""
            self.head_since = None
            self.refused = True
            if self.cycle is not None and not self.cycle.response_complete:
                self.transport.close()
                return
            self._answer_and_close(answer)

        def _answer_and_close(self, answer: bytes) -> None:
            transport = self.transport
            transport.write(answer)
            try:
                transport.write_eof()
            except (NotImplementedError, AttributeError, RuntimeError, OSError):
                transport.close()
                return
            self._linger = self.loop.call_later(LINGER_SECS, transport.close)

    return GuardedProtocol


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop when it is installed, else on asyncio's own loop.

    uvicorn's ``loop=`` setting only applies to ``Server.run``; we drive
    ``Server.serve`` ourselves, so the loop is chosen here.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def notifying_server(config: Any, on_ready: Callable[[], None] | None, *,
                     signals: bool = True) -> Any:
    """A ``uvicorn.Server`` that calls ``on_ready`` once it listens (after lifespan startup).

    With ``signals=False`` it leaves SIGINT and SIGTERM alone and stops only when told
    (``should_exit``): several servers in one process must not each take the signal
    handler over from the one before and hand the signal back on the way out."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if signals:
                with super().capture_signals():
                    yield
            else:
                yield

    return Server(config)


async def serve(config_path: str, host: str, port: int, *, sock: socket.socket | None = None,
                on_ready: Callable[[], None] | None = None,
                stop: asyncio.Event | None = None) -> None:
    """Serve the gateway on ``config_path`` at ``host:port`` until SIGINT or SIGTERM;
    SIGHUP and ``reload_poll_secs`` reload the file. ``ConfigError`` if the file is
    invalid at start.

    ``sock``, an already bound socket, is served instead of binding ``host:port``
    (``humpyard demo`` binds every port before it starts anything); ``on_ready``
    is called once the gateway listens. Given ``stop``, the caller owns SIGINT and
    SIGTERM and the gateway stops (gracefully) once the event is set; without it,
    ``serve`` owns them: the first stops it gracefully (the lifespan closes the
    ledger writer, the log is drained) and ``serve`` returns, so the process exits
    0 rather than by the signal; a second one stops it without waiting for open
    requests."""
    import uvicorn

    from humpyard import telemetry
    from humpyard.config import load_config
    from humpyard.http.app import create_app
    from humpyard.logsink import BufferedStderr, flush_periodically
    from humpyard.reload import Reloader
    loop = asyncio.get_running_loop()
    server: Any = None
    own_signals = stop is None
    if stop is None:
        stop = asyncio.Event()
        _own_stop_signals(loop, stop, lambda: server)
    cfg = load_config(config_path)
    for w in cfg.warnings:
        log.warning("%s", w)
    app = create_app(cfg)
    gw = app.state.gateway
    gw.spans = telemetry.from_environ(os.environ)  # None unless OTEL_* asks for traces
    reloader = Reloader(config_path, lambda: gw.config, gw.swap_config)
    try:
        loop.add_signal_handler(signal.SIGHUP, reloader.reload)
    except (NotImplementedError, AttributeError):
        pass
    guard = ConnectionGuard(lambda: gw.config.server, raise_open_files_limit(),
                            gw.metrics.connections_refused)
    # No proxy-header rewriting (humpyard never uses the client's address) and no
    # "server: uvicorn" header: less work and less to leak on every request.
    server = notifying_server(uvicorn.Config(
        app, host=host, port=port, access_log=False, log_config=None,
        timeout_keep_alive=int(cfg.server.keepalive_timeout_secs) or 1,
        proxy_headers=False, server_header=False, http=protocol_class(guard),
        ws="none"),  # no WebSocket routes: an upgrade must not leave the guarded protocol
        on_ready, signals=False)
    tasks = [asyncio.create_task(flush_periodically(h)) for h in logging.getLogger().handlers
             if isinstance(h, BufferedStderr)]
    tasks.append(asyncio.create_task(_exit_on(stop, server)))
    tasks.append(asyncio.create_task(guard.sweep()))
    if cfg.reload_poll_secs > 0:
        tasks.append(asyncio.create_task(_poll_config(reloader, gw)))
    log.info("humpyard serving on http://%s:%d (config %s; at most %d client connections)",
             host, port, config_path, guard.cap())
    # What exists now lives as long as the process: keep it out of the collector's
    # scans, which otherwise walk every module and config object now and then.
    gc.collect()
    gc.freeze()
    try:
        await server.serve(sockets=[sock] if sock is not None else None)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if getattr(server, "force_exit", False):
            await _finish_forced(server)
        gw.writer.close()  # written out already, unless the lifespan failed: a no-op
        if own_signals:
            log.info("humpyard stopped")
            _drain_logs()


def _own_stop_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event,
                      server: Callable[[], Any]) -> None:
    """SIGINT and SIGTERM set ``stop``; a second one also tells ``server()`` to stop
    without waiting for the requests still open."""
    def on_signal() -> None:
        if stop.is_set() and server() is not None:
            server().force_exit = True
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal)
        except (NotImplementedError, AttributeError, RuntimeError):  # not the main thread
            pass


async def _finish_forced(server: Any) -> None:
    """After a forced stop (a second signal), which leaves the requests still open
    running and skips the lifespan's shutdown: cancel them, then shut the app down
    (the gateway closes its ledger writer, upstream client and store)."""
    tasks = list(server.server_state.tasks)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    lifespan = getattr(server, "lifespan", None)
    done = getattr(lifespan, "shutdown_event", None)
    if done is not None and not done.is_set():
        await lifespan.shutdown()  # type: ignore[union-attr]


def _drain_logs() -> None:
    from humpyard.logsink import BufferedStderr
    for h in logging.getLogger().handlers:
        if isinstance(h, BufferedStderr):
            h.drain()


async def _exit_on(stop: asyncio.Event, server: Any) -> None:
    await stop.wait()
    server.should_exit = True


async def _poll_config(reloader: object, gw: object) -> None:
    while True:
        await asyncio.sleep(gw.config.reload_poll_secs)  # type: ignore[attr-defined]
        reloader.poll()  # type: ignore[attr-defined]

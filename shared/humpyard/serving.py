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

``protocol_class(guard)`` adds the client-connection limits of ``[server]``
(``guarded.py``). ``serve`` owns SIGINT and SIGTERM unless its caller does:
a stop drains the log and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable, Collection, Coroutine, Iterator
from typing import Any, TypeVar

from humpyard.connections import ConnectionGuard
from humpyard.errors import RequestError
from humpyard.guarded import guarded
from humpyard.open_files import raise_open_files_limit
from humpyard.stopping import exit_on, finish_forced, own_stop_signals

log = logging.getLogger("humpyard")
T = TypeVar("T")

GC_THRESHOLDS = (100_000, 20, 10)
"""``gc.set_threshold`` while serving (Python's default: 700, 10, 10). The young
count is objects made less objects freed (of any age), so the open streams' live
state, not the requests' churn, is what reaches it; a full collection comes after
as much net growth as at (10_000, 20, 100), young ones a tenth as often (ADR 0003,
"The young generation's threshold")."""

_HEAD_START = b"HTTP/1.1 "
_HEAD_END = b"\r\n\r\n"


class HeadHoldingTransport:
    """A transport wrapper that holds a response head back until the body's write,
    and tells one watcher (``watch_lost``) when the connection is lost."""

    __slots__ = ("_transport", "_loop", "_held", "_on_lost", "body_cut", "closing")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._on_lost: Callable[[], None] | None = None
        # Set by the connection guard (``guarded.py``) when it ended the request's
        # body and answered it (a timeout, a framing the parser refused): the error the
        # intake's body reader raises, so the record says what the client was told
        # (``http/body.py``).
        self.body_cut: RequestError | None = None
        # Set by the connection guard: the server's first close of this connection
        # goes through it, which may make it linger (a half-close, the client's late
        # bytes read and dropped: ``guarded.py``, ``_closed_by_server``).
        self.closing: Callable[[], None] | None = None

    def watch_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once when the connection is lost (after the server's own
        ``connection_lost``), unless ``unwatch_lost`` comes first. One watcher at a
        time: a request's ``ClientWatch`` (``http/reply.py``)."""
        self._on_lost = callback

    def unwatch_lost(self, callback: Callable[[], None]) -> None:
        if self._on_lost == callback:
            self._on_lost = None

    def lost(self) -> None:
        callback, self._on_lost = self._on_lost, None
        if callback is not None:
            callback()

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
        closing, self.closing = self.closing, None
        if closing is not None:
            closing()
        else:
            self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


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
            self.holding = HeadHoldingTransport(transport, self.loop)
            super().connection_made(self.holding)  # type: ignore[arg-type]

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            self.holding.lost()

    if guard is None:
        return HeadHoldingProtocol
    return guarded(HeadHoldingProtocol, guard)


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


def bound_port(server: Any) -> int | None:
    """The TCP port a started ``uvicorn.Server`` listens on (None before it listens)."""
    for listener in getattr(server, "servers", ()):
        for sock in listener.sockets or ():
            return int(sock.getsockname()[1])
    return None


async def serve(config_path: str, host: str, port: int, *, sock: socket.socket | None = None,
                on_ready: Callable[[], None] | None = None,
                stop: asyncio.Event | None = None, surfaces: Collection[str] | None = None,
                store: Any = None, worker_fd: int | None = None,
                worker_state: str | None = None, worker_dir: str | None = None,
                worker_index: int = 0, worker_instance: str | None = None,
                worker_beat: int | None = None) -> None:
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
    requests.

    ``surfaces`` (default: all) is what of the route table is served (``humpyard
    console``: the admin API and the console, no client path); ``store``, a
    ``StoreSpec``, replaces the file's ``[store]`` (``console --stack``).

    ``worker_fd`` (a worker of ``serve --workers N``, ``workers.py``): serve the
    listening socket the parent passed at that descriptor, on the state file shared
    with the other workers (``worker_state``: the parent's private file, when the
    configuration names no ledger), keep its metrics' snapshot in the run's
    directory ``worker_dir`` as worker ``worker_index`` (``/metrics`` answers every
    worker's: ``metrics/sharing.py``), hold budget leases and limit slots in the file
    as ``worker_instance`` (the parent gives them back if the worker dies), write a
    byte on the pipe ``worker_beat`` every second from the event loop (the parent
    replaces a worker silent too long), and stop when the parent is gone: the worker's
    side of it is ``worker_side.py``."""
    import uvicorn

    from humpyard import telemetry
    from humpyard.config import load_config
    from humpyard.http.app import CLIENT, SURFACES, create_app
    from humpyard.logpipe import EXIT_WAIT_SECS
    from humpyard.logsink import BufferedStderr, drain_all, flush_periodically
    from humpyard.reload import Reloader
    from humpyard.store import file_on_disk
    from humpyard.worker_side import (
        beat,
        shared_store,
        snapshot_metrics,
        stop_when_orphaned,
        write_snapshot,
    )
    loop = asyncio.get_running_loop()
    server: Any = None
    own_signals = stop is None
    if stop is None:
        stop = asyncio.Event()
        own_stop_signals(loop, stop, lambda: server)
    published = None
    if worker_dir is not None:  # the parent's checked configuration, never the file
        from humpyard.published_config import PublishedConfig
        published = PublishedConfig(worker_dir, config_path)
        cfg = published.load()
    else:
        cfg = load_config(config_path)
    for w in cfg.warnings:
        log.warning("%s", w)
    from humpyard import fleet  # [store]: docs/configuration.md
    if store is not None:
        cfg = fleet.with_store(cfg, store)
    surfaces = SURFACES if surfaces is None else surfaces
    if worker_fd is not None:  # a worker of serve --workers N (workers.py)
        sock = socket.socket(fileno=worker_fd)
    backend = fleet.backend_of(cfg)
    if worker_fd is not None and backend != "dynamodb":
        # the SQLite file shared as live state; on DynamoDB a worker is one serve process
        from humpyard.gateway import Gateway
        app = create_app(cfg, gateway=Gateway(cfg, shared_store(cfg, worker_state),
                                              instance=worker_instance), surfaces=surfaces)
    elif CLIENT not in surfaces and backend == "sqlite" and file_on_disk(
            cfg.ledger.path if cfg.ledger is not None else None):
        # humpyard console: serves no requests, so it shows the breakers and latency of
        # the file (those of serve --workers on it; empty when none runs)
        app = create_app(cfg, shared_store(cfg, None), surfaces=surfaces)
    else:
        gateway = fleet.serve_gateway(cfg, instance=worker_instance)
        app = create_app(cfg, gateway=gateway, surfaces=surfaces)
    gw = app.state.gateway
    gw.spans = telemetry.from_environ(os.environ)  # None unless OTEL_* asks for traces
    if worker_fd is not None and worker_index != 0:
        gw.quota.follows = True  # worker 0 polls the quota sources for every worker
    shared_metrics = None
    if worker_dir is not None:  # /metrics answers for every worker (metrics/sharing.py)
        from humpyard.metrics.sharing import WorkerMetrics
        shared_metrics = WorkerMetrics(worker_dir, worker_index, gw.metrics.metrics)
        try:
            shared_metrics.adopt()  # the counts of the worker this one replaces, if any
            app.state.shared_metrics = shared_metrics
        except OSError as e:  # the run's directory is gone: /metrics answers for this one
            log.warning("metrics of the other workers unavailable: %s", e)
            shared_metrics = None
    if published is None:
        reloader = Reloader(config_path, lambda: gw.config, gw.swap_config)
    else:  # a worker reloads what its parent published (workers.py)
        reloader = Reloader(config_path, lambda: gw.config, gw.swap_config,
                            load=published.load, watch=published)
    try:  # a worker's SIGHUP: the parent published; loaded once, whoever sees it first
        loop.add_signal_handler(signal.SIGHUP,
                                reloader.reload if published is None else reloader.poll)
    except (NotImplementedError, AttributeError):
        pass
    if published is not None:
        reloader.poll()  # one published while this worker started (its SIGHUP ignored)
    guard = ConnectionGuard(lambda: gw.config.server, raise_open_files_limit(),
                            gw.metrics.connections_refused)
    def ready() -> None:  # the port it listens on, which --port 0 left to the kernel
        log.info("humpyard serving on http://%s:%d (config %s; at most %d client "
                 "connections)", f"[{host}]" if ":" in host else host,  # an IPv6 address
                 bound_port(server) or port, config_path, guard.cap())
        if on_ready is not None:
            on_ready()

    # No proxy-header rewriting (humpyard never uses the client's address) and no
    # "server: uvicorn" header: less work and less to leak on every request.
    server = notifying_server(uvicorn.Config(
        app, host=host, port=port, access_log=False, log_config=None,
        timeout_keep_alive=int(cfg.server.keepalive_timeout_secs) or 1,
        proxy_headers=False, server_header=False, http=protocol_class(guard),
        ws="none"),  # no WebSocket routes: an upgrade must not leave the guarded protocol
        ready, signals=False)
    sinks = [h for h in logging.getLogger().handlers if isinstance(h, BufferedStderr)]
    for h in sinks:  # lines a stalled log reader cost (logpipe.py), counted from now on
        h.out.counter = gw.metrics.log_lines_dropped
        if h.out.dropped:
            gw.metrics.log_lines_dropped.inc(h.out.dropped)
    tasks = [asyncio.create_task(flush_periodically(h)) for h in sinks]
    tasks.append(asyncio.create_task(
        exit_on(stop, server, lambda: gw.config.server.stop_timeout_secs)))
    tasks.append(asyncio.create_task(guard.sweep()))
    if cfg.reload_poll_secs > 0 and published is None:  # a worker's parent watches
        tasks.append(asyncio.create_task(_poll_config(reloader, gw)))
    if worker_fd is not None:
        tasks.append(asyncio.create_task(stop_when_orphaned(os.getppid(), stop)))
    if worker_beat is not None:
        tasks.append(asyncio.create_task(beat(worker_beat)))
    if shared_metrics is not None:
        tasks.append(asyncio.create_task(snapshot_metrics(shared_metrics)))
    # What exists now lives as long as the process: keep it out of the collector's
    # scans, which otherwise walk every module and config object now and then.
    gc.collect()
    gc.freeze()
    # A request frees what it made by reference counting (no cycles on the served
    # path); the collector need not look at the young objects after every 700
    # allocations, which under hundreds of open streams promoted and re-walked their
    # live state (ADR 0003, "Garbage collection").
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        await server.serve(sockets=[sock] if sock is not None else None)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if getattr(server, "force_exit", False):
            await finish_forced(server)
        gw.writer.close()  # written out already, unless the lifespan failed: a no-op
        if shared_metrics is not None:
            write_snapshot(shared_metrics)  # this worker's last counts
        if own_signals:
            log.info("humpyard stopped")
            drain_all(wait=EXIT_WAIT_SECS)


async def _poll_config(reloader: object, gw: object) -> None:
    while True:
        await asyncio.sleep(gw.config.reload_poll_secs)  # type: ignore[attr-defined]
        reloader.poll()  # type: ignore[attr-defined]

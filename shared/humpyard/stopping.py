"""How ``humpyard serve`` stops: SIGTERM or SIGINT stops it gracefully, waiting for
the requests still open at most ``[server] stop_timeout_secs``; past that, or at a
second signal, the requests still open are stopped, each recorded as a 503
(docs/decisions/0033-a-bounded-stop.md)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Any

log = logging.getLogger("humpyard")

_asked: list[int] = []  # the stop signals that came before serve owned them


def hold_stop_signals() -> None:
    """Until ``own_stop_signals`` takes them over (or the parent of ``serve --workers``
    sets its own), the first SIGINT or SIGTERM is only remembered: ``serve`` stops
    through its graceful path as soon as it serves (``asked_early``), so a startup is
    never cut at whatever line it had reached (before, a ``KeyboardInterrupt`` there
    could end the process by SIGINT, or log a cancelled lifespan's traceback). A
    second one interrupts whatever runs, for a startup that hangs."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _held)


def _held(signum: int, frame: object) -> None:
    if _asked:
        raise KeyboardInterrupt
    _asked.append(signum)


def asked_early() -> bool:
    """Whether a stop signal came while they were held (``hold_stop_signals``)."""
    return bool(_asked)


def own_stop_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event,
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
    if asked_early():  # it came while serve was starting: stop as soon as it serves
        stop.set()


async def finish_forced(server: Any) -> None:
    """After a forced stop (a second signal, or ``stop_timeout_secs`` passed), which
    leaves the requests still open running and skips the lifespan's shutdown: cancel
    them as stopped by the server (each is recorded as a 503 and its client answered
    one, or its stream ended: ``recording.SERVER_STOPPED``), then shut the app down
    (the gateway closes its ledger writer, upstream client and store)."""
    from humpyard.recording import SERVER_STOPPED
    tasks = list(server.server_state.tasks)
    for t in tasks:
        t.cancel(msg=SERVER_STOPPED)
    await asyncio.gather(*tasks, return_exceptions=True)
    lifespan = getattr(server, "lifespan", None)
    done = getattr(lifespan, "shutdown_event", None)
    if done is not None and not done.is_set():
        await lifespan.shutdown()  # type: ignore[union-attr]


async def exit_on(stop: asyncio.Event, server: Any, limit: Callable[[], float]) -> None:
    """Stop ``server`` once ``stop`` is set, waiting for the requests still open at
    most ``limit()`` seconds (``[server] stop_timeout_secs``); then stop them."""
    await stop.wait()
    server.should_exit = True
    secs = limit()
    await asyncio.sleep(secs)
    if not server.force_exit:  # still waiting (for requests, or connections to close)
        if server.server_state.tasks:
            log.warning("%d request(s) still open %g s after the stop ([server] "
                        "stop_timeout_secs); stopping them, each recorded as a 503",
                        len(server.server_state.tasks), secs)
        server.force_exit = True

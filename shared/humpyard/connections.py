"""The client connections of ``humpyard serve``, bounded before the app sees a request.

``ConnectionGuard`` holds the limits of ``[server]`` (docs/security.md, "Client
connections"; docs/decisions/0011-client-connections.md): at most
``max_connections`` open (a 503 beyond, never a reset), a request head complete
within ``header_timeout_secs`` and at most ``max_header_bytes`` long (a 431,
counted while reading), its body complete within ``body_timeout_secs`` of the head
(a 408), an answer the client does not take for ``send_timeout_secs`` cut (the
connection closed), idle keep-alive connections closed after
``keepalive_timeout_secs``.
``guarded.guarded(base, guard)`` makes uvicorn's httptools protocol keep to
them; ``serving.protocol_class`` applies it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httptools

from humpyard.logsink import Sampled
from humpyard.open_files import connection_cap

log = logging.getLogger("humpyard")

LOG_EVERY_SECS = 10.0
"""At most one WARNING per this many seconds about connections refused at the cap, and
one about requests that are not HTTP/1.1 (``logsink.Sampled``)."""


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
        clock = now or (lambda: asyncio.get_running_loop().time())
        self._over_cap = Sampled(clock, LOG_EVERY_SECS)
        self._malformed = Sampled(clock, LOG_EVERY_SECS)

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

    def malformed(self, reason: str, error: Exception) -> None:
        """Count a request that is not HTTP/1.1; a WARNING at most every
        ``LOG_EVERY_SECS``, never a trace (a client can send these at will). A parser
        callback that raised (uvicorn's, on ``CONNECT host:port``) is at DEBUG with
        its trace."""
        self.count("malformed")
        if isinstance(error, httptools.HttpParserCallbackError):
            log.debug("a parser callback failed on a request", exc_info=error)
        if n := self._malformed.due():
            log.warning("refused %d request(s) that are not HTTP/1.1 (the last: %s)", n,
                        reason)

    def over_cap(self) -> None:
        """Count a connection refused at the cap; a WARNING at most every ``LOG_EVERY_SECS``."""
        self.count("max_connections")
        if n := self._over_cap.due():
            log.warning("refused %d client connection(s) with 503: %d open, at the [server] "
                        "max_connections cap of %d (open-files limit %d)", n,
                        len(self.open), self.cap(), self.nofile)

    def expire(self, now: float) -> None:
        """Close every connection whose request head is older than the header timeout,
        whose request body is still arriving longer than the body timeout after its
        head, or whose answer the client has not taken for the send timeout."""
        spec = self.settings()
        heads, bodies, sends = (spec.header_timeout_secs, spec.body_timeout_secs,
                                spec.send_timeout_secs)
        for conn in [c for c in self.open if c.head_since is not None
                     and now - c.head_since > heads]:
            conn.head_timed_out()
        for conn in [c for c in self.open if c.body_since is not None
                     and now - c.body_since > bodies]:
            conn.body_timed_out(bodies)
        for conn in [c for c in self.open if c.stalled_since is not None
                     and now - c.stalled_since > sends]:
            conn.send_timed_out()

    async def sweep(self) -> None:
        """``expire`` a few times per timeout (at least once a second)."""
        loop = asyncio.get_running_loop()
        while True:
            spec = self.settings()
            await asyncio.sleep(min(1.0, spec.header_timeout_secs / 4,
                                    spec.body_timeout_secs / 4, spec.send_timeout_secs / 4))
            self.expire(loop.time())

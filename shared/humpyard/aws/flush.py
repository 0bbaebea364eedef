"""Per-request durability and metrics in Lambda: ``FlushMiddleware``.

A Lambda instance may be frozen the moment its response is complete, and
never thawed again. So before the LAST body message of every HTTP response
goes out, the middleware awaits ``flush()`` — the instance's pending ledger
writes and its metrics, printed as EMF when due (``Instance.flush``) — and
only then forwards the message. The same holds for streamed answers under
the Lambda Web Adapter: the stream's last chunk waits for the flush, the
earlier ones do not. A request that ends without a last body message (an
error, a client gone) is flushed when the app returns.

The request id is issued here, stamped with ``now`` (the gateway's clock,
so the id carries the request's time: ADR 0019), before the app sees it.
The correlation id of the instance's logger is the humpyard request id
(the ``x-humpyard-request-id`` response header) for the duration of the
request. The id is only known from the app's answer, unless the app adopts
the one offered in ``scope["state"]["humpyard_request_id"]``: once a
response shows that it does, later requests carry the id from their first
log line; otherwise it is set when the response starts.

``flush`` must not raise; if it does, the error is logged and the response
goes out regardless.

Lifespan events (uvicorn under the Web Adapter) are answered here and never
reach the app: the app's own lifespan starts the long-lived process's
background work (quota polling, retention), which in Lambda belongs to the
scheduled poller and DynamoDB's TTL. On shutdown ``on_shutdown`` runs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from humpyard.records import new_request_id

log = logging.getLogger("humpyard.aws")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REQUEST_ID_HEADER = b"x-humpyard-request-id"
STATE_KEY = "humpyard_request_id"


class FlushMiddleware:
    """Wrap an ASGI app so every HTTP response is flushed before its last byte."""

    def __init__(self, app: ASGIApp, flush: Callable[[], Awaitable[None]],
                 set_correlation_id: Callable[[str | None], None] | None = None,
                 on_shutdown: Callable[[], Awaitable[None]] | None = None,
                 before_request: Callable[[], object] | None = None,
                 now: Callable[[], float] | None = None) -> None:
        self.app = app
        self._before = before_request
        self._flush = flush
        self._correlate = set_correlation_id or (lambda _v: None)
        self._on_shutdown = on_shutdown
        self._now = now  # the gateway's clock: the request id carries its time (ADR 0019)
        self._adopts: bool | None = None  # does the app use the request id it is offered?

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._before is not None:
            self._before()  # e.g. a configuration reload when due
        rid = new_request_id(self._now() if self._now is not None else None)
        scope.setdefault("state", {})[STATE_KEY] = rid
        self._correlate(rid if self._adopts else None)
        flushed = False

        async def send_flushed(message: Message) -> None:
            nonlocal flushed
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", ()):
                    if name.lower() == REQUEST_ID_HEADER:
                        answered = value.decode("latin-1")
                        self._adopts = answered == rid
                        self._correlate(answered)
            elif (message["type"] == "http.response.body" and not message.get("more_body")
                  and not flushed):
                flushed = True
                await self._safe_flush()
            await send(message)

        try:
            await self.app(scope, receive, send_flushed)
        finally:
            if not flushed:
                await self._safe_flush()
            self._correlate(None)

    async def _safe_flush(self) -> None:
        try:
            await self._flush()
        except Exception:  # a failed flush must not cost the client its answer
            log.exception("flush after the request failed")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._on_shutdown is not None:
                    try:
                        await self._on_shutdown()
                    except Exception:
                        log.exception("shutdown failed")
                await send({"type": "lifespan.shutdown.complete"})
                return

"""``create_app``: the one Starlette app for ``humpyard serve``, Lambda and tests."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from humpyard.clock import Clock
from humpyard.config.spec import Config
from humpyard.errors import HumpyardError
from humpyard.gateway import Gateway
from humpyard.http import admin
from humpyard.http.chat import Endpoint, chat_completions
from humpyard.http.errors import error_response
from humpyard.store import Store

if TYPE_CHECKING:
    import httpx

    from humpyard.upstream.transport import FastTransport


async def not_found(request: Request, exc: Exception) -> Response:
    return error_response(HumpyardError(f"no such path: {request.method} {request.url.path}",
                                        status=404, code="not_found"))


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    return error_response(HumpyardError(
        f"method {request.method} is not allowed on {request.url.path}",
        status=405, code="method_not_allowed"))


def create_app(config: Config, store: Store | None = None,
               transport: FastTransport | httpx.AsyncBaseTransport | None = None,
               clock: Clock | None = None, *, rng: random.Random | None = None,
               gateway: Gateway | None = None) -> Starlette:
    """The gateway app. ``store``, ``transport``, ``clock`` and ``rng`` are the seams.

    The app's lifespan runs the gateway's background work (quota polling)
    and closes it (writer, upstream client, store) on shutdown; in Lambda
    (lifespan off) the instance keeps them while warm and the scheduled
    poller function polls instead.
    """
    gw = gateway or Gateway(config, store, transport=transport, clock=clock, rng=rng)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = asyncio.create_task(gw.run_background(stop))
        try:
            yield
        finally:
            stop.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await gw.aclose()

    routes = [
        Route("/v1/chat/completions", Endpoint(chat_completions), methods=["POST"]),
        *admin.routes(),
    ]
    app = GatewayApp(routes=routes, lifespan=lifespan,
                     exception_handlers={404: not_found, 405: method_not_allowed})
    app.state.gateway = gw
    return app


class GatewayApp(Starlette):
    """Starlette, with the two client paths dispatched before its middleware and router.

    A ``POST`` to a path whose route is a plain-ASGI ``Endpoint`` goes straight to it
    (the endpoints answer every error themselves, so the error middleware has nothing
    to add); everything else, including other methods on those paths, is Starlette's.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._fast: dict[str, Endpoint] = {
            r.path: r.endpoint for r in self.routes
            if isinstance(r, Route) and isinstance(r.endpoint, Endpoint)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            endpoint = self._fast.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                return await endpoint(scope, receive, send)
        await super().__call__(scope, receive, send)

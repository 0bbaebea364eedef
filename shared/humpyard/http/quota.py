"""``GET /v1/quota`` and ``GET /v1/quota/history``: provider usage windows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from humpyard.errors import RequestError
from humpyard.http.body import finite
from humpyard.http.errors import json_response
from humpyard.http.guard import gateway, require_key


def routes(guarded: Callable[..., Any]) -> list[Route]:
    @guarded
    async def quota(request: Request) -> Response:
        require_key(request)
        gw = gateway(request)
        return json_response(gw.quota.view(gw.clock.now()))

    @guarded
    async def history(request: Request) -> Response:
        require_key(request)
        gw = gateway(request)
        q = request.query_params
        try:
            since = finite(q["since"], "since") if "since" in q else None
            limit = min(max(int(q.get("limit", "500")), 1), 5000)
        except ValueError:
            raise RequestError("since and limit must be numbers") from None
        return json_response(gw.quota.history(provider=q.get("provider"), since=since,
                                              limit=limit))

    return [Route("/v1/quota", quota, methods=["GET"]),
            Route("/v1/quota/history", history, methods=["GET"])]

"""``GET /v1/quota`` and ``GET /v1/quota/history``: provider usage windows (an
``admin`` key's: they are the operator's provider accounts)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from humpyard.http.body import query_count, query_number
from humpyard.http.errors import json_response
from humpyard.http.guard import gateway, guarded, require_admin


@guarded
async def quota(request: Request) -> Response:
    require_admin(request, "provider quota")
    gw = gateway(request)
    return json_response(await gw.reads.run(gw.quota.view, gw.clock.now()))


@guarded
async def quota_history(request: Request) -> Response:
    require_admin(request, "provider quota")
    gw = gateway(request)
    q = request.query_params
    since = query_number(q, "since")
    limit = query_count(q, "limit", 500, 5000)
    return json_response(await gw.reads.run(gw.quota.history, provider=q.get("provider"),
                                            since=since, limit=limit))

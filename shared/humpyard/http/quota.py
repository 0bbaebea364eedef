"""``GET /v1/quota`` and ``GET /v1/quota/history``: provider usage windows (an
``admin`` key's: they are the operator's provider accounts)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from humpyard.errors import RequestError
from humpyard.http.body import finite
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
    try:
        since = finite(q["since"], "since") if "since" in q else None
        limit = min(max(int(q.get("limit", "500")), 1), 5000)
    except ValueError:
        raise RequestError("since and limit must be numbers") from None
    return json_response(await gw.reads.run(gw.quota.history, provider=q.get("provider"),
                                            since=since, limit=limit))

"""``POST /v1/route/explain``: what a request would do, with no upstream call.

It runs the same planning code as a real request, for the calling key only.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from humpyard.allowance import limited
from humpyard.errors import RequestError
from humpyard.flow import is_subagent
from humpyard.http.body import read_json
from humpyard.http.errors import json_response
from humpyard.http.guard import gateway, guarded, require_key
from humpyard.planning.explain import explain
from humpyard.planning.types import RequestFacts
from humpyard.sessions import session_id

CREDENTIALS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization"})
FIELDS = frozenset({"model", "headers", "subagent", "stream", "prompt_tokens", "tools",
                    "images", "max_tokens"})


def facts_from(body: Any, key_id: str | None) -> RequestFacts:
    """Explain's description of a request → planner facts; errors name the field."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    unknown = set(body) - FIELDS
    if unknown:
        raise RequestError(f"unknown fields: {sorted(unknown)} (known: {sorted(FIELDS)})")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("model: required, a non-empty string")
    headers = body.get("headers") or {}
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise RequestError("headers: must be an object of string values")
    lowered = {k.lower(): v for k, v in headers.items() if k.lower() not in CREDENTIALS}
    for name in ("subagent", "stream", "tools", "images"):
        if not isinstance(body.get(name, False), bool):
            raise RequestError(f"{name}: must be a boolean")
    tokens = body.get("prompt_tokens")
    if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool)
                               or tokens < 0):
        raise RequestError("prompt_tokens: must be a non-negative integer")
    max_tokens = body.get("max_tokens")  # the output bound a budget reservation uses
    if max_tokens is not None and (not isinstance(max_tokens, int)
                                   or isinstance(max_tokens, bool) or max_tokens < 0):
        raise RequestError("max_tokens: must be a non-negative integer")
    # Without a "subagent" field the headers decide, as on a real request.
    subagent = body["subagent"] if "subagent" in body else is_subagent(lowered)
    return RequestFacts(model=model, key_id=key_id, headers=lowered,
                        stream=body.get("stream", False), tools=body.get("tools", False),
                        images=body.get("images", False), subagent=subagent,
                        prompt_tokens=tokens, prompt_tokens_low=tokens,
                        session_id=session_id(lowered), max_tokens=max_tokens)


def recent_by_target(gw: Any, now: float) -> dict[str, dict[str, Any]]:
    gw.writer.flush(timeout=1.0)
    return {g["key"]: {"attempts": g["requests"], "failure_rate": g["failure_rate"],
                       "p50_latency_ms": g["p50_latency_ms"]}
            for g in gw.store.stats("target", now - 86400, now)}


@guarded
async def explain_route(request: Request) -> Response:
    key = require_key(request)
    gw = gateway(request)
    facts = facts_from(await read_json(request, 1024 * 1024), key.id if key else None)
    now = gw.clock.now()
    views = {k: v.to_dict() for k, v in gw.health.snapshot(now).items()}
    recent = await gw.reads.run(recent_by_target, gw, now)  # the store, off the loop
    answer = explain(facts, gw.snapshot(now), gw.config, now,
                     recent=recent, health_views=views,
                     policy=gw.policy)
    # The key's per-key limits now (allowance.py): what the next request would meet.
    answer["limits"] = ((await gw.allowance.state_shared(key, now)).to_dict()
                        if key is not None and limited(key) else None)
    return json_response(answer)

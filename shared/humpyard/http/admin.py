"""Read and admin APIs: models, health, decisions, stats, config, metrics.

Every handler here requires a key when the gateway has keys. A key without
``admin`` sees only its own decisions and stats, the health of the targets its
routes use, and gets 403 from config and metrics (``guard.scope``,
``guard.require_admin``). Overrides, explain and quota live in their own
modules; ``http/app.py`` lists the paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from humpyard.config.spec import Config, KeySpec, RouteSpec
from humpyard.errors import HumpyardError, RequestError, UnknownModel
from humpyard.http.body import finite, query_count, query_number
from humpyard.http.errors import json_response
from humpyard.http.guard import gateway, guarded, require_admin, require_key, scope
from humpyard.metrics import prometheus
from humpyard.planning.select import PICKER_PREFIX, requested_route

T = TypeVar("T")

DAY = 86400.0
MAX_WINDOW = 3660 * DAY  # ten years: past any retention, and what a store can index
SERIES = ("hour", "day")


def _model_entry(route: RouteSpec, config: Config) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": route.name, "object": "model", "created": 0, "owned_by": "humpyard",
        "humpyard": {"type": route.type, "targets": list(route.all_targets),
                     "implicit": route.implicit}}
    entry.update(_metadata(route, config))
    return entry


def _metadata(route: RouteSpec, config: Config) -> dict[str, Any]:
    """What a client sizes its prompts by, for whichever target answers: the smallest
    context window and output limit the route's endpoints declare (as ``context_window``
    and OpenRouter's ``context_length``), and the capabilities every endpoint declares
    (docs/clients.md, "Model metadata")."""
    endpoints = [ep for name in route.all_targets if name in config.targets
                 for ep in config.targets[name].endpoints]
    out: dict[str, Any] = {}
    windows = [ep.context_window for ep in endpoints if ep.context_window]
    if windows:
        out["context_window"] = out["context_length"] = min(windows)
    limits = [ep.max_output_tokens for ep in endpoints if ep.max_output_tokens]
    if limits:
        out["max_output_tokens"] = min(limits)
    if endpoints:
        out["capabilities"] = {
            "tools": all(ep.tools is True for ep in endpoints),
            "vision": all(ep.vision is True for ep in endpoints),
            "reasoning": all(ep.reasoning is True for ep in endpoints)}
    return out


def _kept_by_claude_code(model: str) -> bool:
    """Whether Claude Code's model picker keeps an id (it keeps only Claude's)."""
    lowered = model.lower()
    return "claude" in lowered or "anthropic" in lowered


def _picker_entry(route: RouteSpec, config: Config) -> dict[str, Any] | None:
    """``anthropic/<route>`` for a route whose every endpoint serves a Claude model and
    whose own name Claude Code's picker would drop (docs/clients.md, "Models in
    Claude Code's picker"); None for any other route."""
    if _kept_by_claude_code(route.name):
        return None
    models = [ep.model for name in route.all_targets if name in config.targets
              for ep in config.targets[name].endpoints]
    if not models or not all(_kept_by_claude_code(m) for m in models):
        return None
    entry = _model_entry(route, config)
    entry["id"] = PICKER_PREFIX + route.name
    entry["humpyard"]["route"] = route.name
    return entry


@guarded
async def models(request: Request) -> Response:
    """``GET /v1/models``: the routes (and bare targets) the calling key may use, and
    each one that ends on Claude models again as ``anthropic/<route>``."""
    key = require_key(request)
    gw = gateway(request)
    data = []
    for name, r in gw.config.routes.items():
        if key is None or key.may_use(name):
            data.append(_model_entry(r, gw.config))
            picker = _picker_entry(r, gw.config)
            if picker is not None:
                data.append(picker)
    return json_response({"object": "list", "data": data})


@guarded
async def model(request: Request) -> Response:
    """``GET /v1/models/{model_id}``: one route or bare target the calling key may use;
    404 ``unknown_model`` for any other name (one the key may not use included, so
    a key learns nothing about routes it cannot call)."""
    asked = request.path_params["model_id"]
    if not asked:  # ``/v1/models/``: a path, answered as any other unknown one (app.py)
        raise HTTPException(404)
    key = require_key(request)
    gw = gateway(request)
    name = requested_route(asked, gw.config.routes)
    route = gw.config.routes.get(name)
    if route is None or (key is not None and not key.may_use(name)):
        shown = asked if len(asked) <= 80 and asked.isprintable() else "the requested model"
        raise UnknownModel(f"no such model: {shown!r} is not a route or target this key "
                           "may use (GET /v1/models lists them)")
    entry = _picker_entry(route, gw.config) if name != asked else None
    return json_response(entry or _model_entry(route, gw.config))


async def root(request: Request) -> Response:
    """``HEAD /`` (Claude Code's preflight) and ``GET /``: the gateway is up. No key
    needed, nothing from the configuration shown."""
    return json_response({"object": "humpyard", "status": "ok"})


FLUSH_WAIT_SECS = 2.0
"""How long a ledger read waits for the writer to commit what was recorded before it
(so a decision just answered is listed), in the read's thread; past it, the read goes
on with what is committed."""


def read_after_flush(gw: Any, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """``fn(*args, **kw)`` once the writer has written what was recorded so far (or
    ``FLUSH_WAIT_SECS`` passed). Blocking: run it on ``gw.reads``, never on the loop."""
    gw.writer.flush(timeout=FLUSH_WAIT_SECS)
    return fn(*args, **kw)


def _visible_targets(key: KeySpec | None, config: Config) -> frozenset[str] | None:
    """The targets of the routes a key without ``admin`` may use; None: every target."""
    if scope(key) is None or key is None or key.allowed_routes is None:
        return None
    return frozenset(t for name, r in config.routes.items() if key.may_use(name)
                     for t in r.all_targets)


@guarded
async def health(request: Request) -> Response:
    """``GET /v1/health``: every endpoint's breaker and readiness, and each target
    (for a key without ``admin``, the targets of the routes it may use)."""
    key = require_key(request)
    gw = gateway(request)
    now = gw.clock.now()
    views = gw.health.snapshot(now)
    visible = _visible_targets(key, gw.config)
    endpoints = []
    targets = []
    for tname, t in gw.config.targets.items():
        if visible is not None and tname not in visible:
            continue
        states = []
        for ep in t.endpoints:
            v = views.get(ep.key) or gw.health.view(ep.key, now)
            states.append(v.state)
            endpoints.append({
                "target": tname, "provider": ep.provider, "model": ep.model,
                "state": v.state, "consecutive_failures": v.consecutive_failures,
                "cooldown_remaining_ms": v.cooldown_remaining_ms,
                "cooldown_source": v.cooldown_source,
                "readiness": gw.readiness.status(ep.provider)})
        fig = gw.latency.get(tname)
        targets.append({"target": tname, "class": t.class_,
                        "cold": all(s == "cooling_down" for s in states),
                        "current_latency_ms": round(fig.ms, 2) if fig else None,
                        "latency_samples": fig.samples if fig else 0})
    return json_response({"endpoints": endpoints, "targets": targets})


@guarded
async def decisions(request: Request) -> Response:
    """``GET /v1/decisions``: newest first, filtered, paged with ``cursor``; a key
    without ``admin`` lists only its own (asking for another key's finds none)."""
    own = scope(require_key(request))
    gw = gateway(request)
    q = request.query_params
    limit = query_count(q, "limit", 50, 1000)
    since = query_number(q, "since")
    key_filter = q.get("key") or None
    if own is not None:
        if key_filter not in (None, own):
            return json_response({"decisions": [], "next_cursor": None})
        key_filter = own
    try:
        rows, cursor = await gw.reads.run(
            read_after_flush, gw, gw.store.list_decisions,
            route=q.get("route"), rule=q.get("rule"), outcome=q.get("outcome"),
            key_id=key_filter, since=since, limit=limit, cursor=q.get("cursor"))
    except ValueError:
        raise RequestError("cursor: not a cursor this gateway issued") from None
    return json_response({"decisions": rows, "next_cursor": cursor})


@guarded
async def decision(request: Request) -> Response:
    """``GET /v1/decisions/{request_id}``; another key's decision is 404 to a key
    without ``admin``, the same answer as an id that does not exist."""
    own = scope(require_key(request))
    gw = gateway(request)
    d = await gw.reads.run(read_after_flush, gw, gw.store.get_decision,
                           request.path_params["request_id"])
    if d is None or (own is not None and d.get("key_id") != own):
        raise HumpyardError("no such decision", status=404, code="not_found")
    return json_response(d)


@guarded
async def stats(request: Request) -> Response:
    """``GET /v1/stats?group_by=route|target|provider|key&window_secs=86400``, with
    ``key=<id>`` for one key's requests and ``series=hour|day`` for each group's
    buckets over time. A key without ``admin`` sees only its own requests."""
    own = scope(require_key(request))
    gw = gateway(request)
    q = request.query_params
    group_by = q.get("group_by", "route")
    if group_by not in ("route", "target", "provider", "key"):
        raise RequestError(f"group_by: must be route, target, provider or key, got {group_by!r}")
    series = q.get("series") or None
    if series is not None and series not in SERIES:
        raise RequestError(f"series: must be hour or day, got {series!r}")
    key_filter = q.get("key") or None
    others = own is not None and key_filter not in (None, own)  # finds none
    if own is not None:
        key_filter = own
    try:
        window = finite(request.query_params.get("window_secs", str(DAY)), "window_secs")
    except ValueError:
        raise RequestError("window_secs: must be a number") from None
    if window <= 0:
        raise RequestError(f"window_secs: must be positive, got {window:g}")
    window = min(window, MAX_WINDOW)
    now = gw.clock.now()
    groups = [] if others else await gw.reads.run(
        read_after_flush, gw, gw.store.stats, group_by, now - window, now,
        key_id=key_filter, series=series)
    if group_by == "target":
        for g in groups:
            fig = gw.latency.get(g["key"])
            g["current_latency_ms"] = round(fig.ms, 2) if fig else None
            g["latency_samples"] = fig.samples if fig else 0
    out: dict[str, Any] = {"group_by": group_by, "window_secs": window, "groups": groups}
    if key_filter is not None:
        out["key"] = key_filter
    if series is not None:
        out["series"] = series
    return json_response(out)


@guarded
async def config_view(request: Request) -> Response:
    """``GET /v1/config``: the loaded configuration, overrides labelled, no secrets
    (an ``admin`` key's: provider URLs and every key's budget are in it)."""
    require_admin(request, "the configuration")
    gw = gateway(request)
    cfg = gw.config
    data = cfg.public_view()
    snap = gw.snapshot()
    labels: dict[str, list[dict[str, Any]]] = {}
    for ov in snap.overrides:
        if ov.stale:
            continue
        if ov.kind == "disable_target":
            labels.setdefault(ov.subject, []).append({"override_id": ov.id, "kind": ov.kind})
        elif ov.kind == "drain_provider":
            for tname, t in cfg.targets.items():
                if all(e.provider == ov.subject for e in t.endpoints):
                    labels.setdefault(tname, []).append({"override_id": ov.id,
                                                         "kind": ov.kind})
    for tname, tdata in data.get("targets", {}).items():
        if tname in labels:
            tdata["overridden_by"] = labels[tname]
    data["source"] = cfg.source
    data["digest"] = cfg.digest
    return json_response(data)


@guarded
async def metrics(request: Request) -> Response:
    """``GET /metrics``: Prometheus text (an ``admin`` key's: every key's usage)."""
    require_admin(request, "the metrics")
    gw = gateway(request)
    gw.refresh_gauges()
    shared = getattr(request.app.state, "shared_metrics", None)
    if shared is not None:  # a worker of serve --workers N: every worker's counts
        text = await gw.reads.run(shared.render)  # files: off the loop
    else:
        text = prometheus.render(gw.metrics.metrics.collect())
    return PlainTextResponse(text, media_type=prometheus.CONTENT_TYPE)

"""``create_app``: the one Starlette app for ``humpyard serve``, Lambda and tests.

``route_table()`` is every path the app serves, each tagged with its surface:

- ``client``: what agents, SDKs and CI jobs call with a client key (and the
  key-less probes ``/healthz`` and ``/readyz``);
- ``admin``: what operators call (decisions, stats, health, config, overrides,
  quota, metrics); behind IAM as well in AWS (docs/deploy.md);
- ``console``: the operator's page and the API description it reads.

``create_app(..., surfaces=...)`` serves only the surfaces asked for (a Lambda
function serves its own); everything else is humpyard's JSON 404.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import AsyncIterator, Collection, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from humpyard.clock import Clock
from humpyard.config.spec import Config
from humpyard.errors import HumpyardError
from humpyard.gateway import Gateway
from humpyard.http import admin, explain, messages, openapi, overrides, probes, quota, ui
from humpyard.http.bedrock import BEDROCK_INVOKE, BEDROCK_STREAM
from humpyard.http.chat import OPENAI_CHAT
from humpyard.http.errors import error_response
from humpyard.http.intake import ClientPath
from humpyard.http.messages import ANTHROPIC_MESSAGES
from humpyard.http.responses import RESPONSES
from humpyard.recording import record_refusal
from humpyard.store import Store

if TYPE_CHECKING:
    import httpx

    from humpyard.upstream.transport import FastTransport

CLIENT, ADMIN, CONSOLE = "client", "admin", "console"
SURFACES = frozenset({CLIENT, ADMIN, CONSOLE})


def route_table() -> list[tuple[str, Route]]:
    """Every path the app serves, with the surface it belongs to."""
    return [
        # -- client API ---------------------------------------------------------------
        (CLIENT, Route("/v1/chat/completions", ClientPath(OPENAI_CHAT), methods=["POST"])),
        (CLIENT, Route("/v1/messages", ClientPath(ANTHROPIC_MESSAGES), methods=["POST"])),
        (CLIENT, Route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"])),
        (CLIENT, Route("/v1/responses", ClientPath(RESPONSES), methods=["POST"])),
        # Bedrock's InvokeModel (http/bedrock.py): Claude Code with CLAUDE_CODE_USE_BEDROCK
        (CLIENT, Route("/model/{model}/invoke", ClientPath(BEDROCK_INVOKE), methods=["POST"])),
        (CLIENT, Route("/model/{model}/invoke-with-response-stream",
                       ClientPath(BEDROCK_STREAM), methods=["POST"])),
        (CLIENT, Route("/v1/models", admin.models, methods=["GET"])),
        (CLIENT, Route("/v1/models/{model_id:path}", admin.model, methods=["GET"])),
        (CLIENT, Route("/", admin.root, methods=["HEAD", "GET"])),  # clients' preflight
        (CLIENT, Route("/v1/route/explain", explain.explain_route, methods=["POST"])),
        # probes: no key, nothing from the configuration (http/probes.py); on AWS the
        # gateway function serves them (template.yaml's catch-all route)
        (CLIENT, Route("/healthz", probes.healthz, methods=["GET", "HEAD"])),
        (CLIENT, Route("/readyz", probes.readyz, methods=["GET", "HEAD"])),
        # -- admin API ----------------------------------------------------------------
        (ADMIN, Route("/v1/health", admin.health, methods=["GET"])),
        (ADMIN, Route("/v1/decisions", admin.decisions, methods=["GET"])),
        (ADMIN, Route("/v1/decisions/{request_id}", admin.decision, methods=["GET"])),
        (ADMIN, Route("/v1/stats", admin.stats, methods=["GET"])),
        (ADMIN, Route("/v1/config", admin.config_view, methods=["GET"])),
        (ADMIN, Route("/v1/overrides", overrides.list_overrides, methods=["GET"])),
        (ADMIN, Route("/v1/overrides", overrides.create_override, methods=["POST"])),
        (ADMIN, Route("/v1/overrides/audit", overrides.override_audit, methods=["GET"])),
        (ADMIN, Route("/v1/overrides/{id}", overrides.delete_override, methods=["DELETE"])),
        (ADMIN, Route("/v1/quota", quota.quota, methods=["GET"])),
        (ADMIN, Route("/v1/quota/history", quota.quota_history, methods=["GET"])),
        (ADMIN, Route("/metrics", admin.metrics, methods=["GET"])),
        # -- console: the page loads without a key; its API calls send one -----------
        *((CONSOLE, route) for route in ui.routes()),  # /ui, /ui/{asset}
        (CONSOLE, Route("/openapi.json", openapi.openapi_json, methods=["GET"])),
    ]


async def not_found(request: Request, exc: Exception) -> Response:
    """404 for a path no route serves: counted, and recorded within the allowance
    for refusals (``refused_per_minute``)."""
    raw = request.scope.get("raw_path")
    asked = raw.decode("latin-1") if raw else request.url.path  # as the client wrote it
    path = "".join(c if " " <= c <= "~" else "?" for c in asked[:200])
    meant = _meant(request)
    hint = f" (did you mean {meant}?)" if meant else ""
    err = HumpyardError(f"no such path: {request.method} {path}{hint}", status=404,
                        code="not_found")
    rid = record_refusal(request.app.state.gateway.services, err)
    return error_response(err, shape=_shape(request), headers={"x-humpyard-request-id": rid})


def _shape(request: Request) -> str:
    """The error shape of the protocol whose paths ``request`` is on (Anthropic's under
    ``/v1/messages``, the Responses API's under ``/v1/responses``, Bedrock's under
    ``/model/``: boto3 reads only its own), else OpenAI's."""
    path = request.scope["path"]
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/v1/responses"):
        return "responses"
    if path.startswith("/model/"):
        return "bedrock"
    return "openai"


def _meant(request: Request) -> str | None:
    """The path a route serves that differs from the one asked only by a trailing
    ``/``. Such a path is answered 404 naming it, not redirected (Starlette's 307,
    off in ``create_app``): an SDK that follows no redirects raised a bare 307, and
    the OpenAI API itself answers it 404 (docs/decisions/0034-http-conventions.md)."""
    path = request.scope["path"]
    if path == "/" or len(path) > 200:
        return None
    other = path.rstrip("/") if path.endswith("/") else path + "/"
    scope = {**request.scope, "path": other}
    for route in request.app.routes:
        if isinstance(route, Route) and route.matches(scope)[0] is not Match.NONE:
            return other
    return None


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    """A 405 with ``Allow``: every method the path takes, over all its routes
    (Starlette's names only the first route's: ``/v1/overrides`` has two)."""
    allowed = sorted({method for route in request.app.routes if isinstance(route, Route)
                      and route.methods and route.matches(request.scope)[0] is not Match.NONE
                      for method in route.methods})
    err = HumpyardError(f"method {request.method} is not allowed on {request.url.path}",
                        status=405, code="method_not_allowed")
    rid = record_refusal(request.app.state.gateway.services, err)  # as a 404 is
    return error_response(err, shape=_shape(request), headers={
        "allow": ", ".join(allowed), "x-humpyard-request-id": rid})


def create_app(config: Config, store: Store | None = None,
               transport: FastTransport | httpx.AsyncBaseTransport | None = None,
               clock: Clock | None = None, *, rng: random.Random | None = None,
               gateway: Gateway | None = None,
               surfaces: Collection[str] = SURFACES) -> Starlette:
    """The gateway app. ``store``, ``transport``, ``clock`` and ``rng`` are the seams;
    ``surfaces`` picks what of ``route_table()`` is served.

    The app's lifespan runs the gateway's background work (quota polling)
    and closes it (writer, upstream client, store) on shutdown; in Lambda
    (lifespan off) the instance keeps them while warm and the scheduled
    poller function polls instead.
    """
    unknown = set(surfaces) - SURFACES
    if unknown:
        raise ValueError(f"unknown surfaces {sorted(unknown)} (known: {sorted(SURFACES)})")
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

    routes = [route for surface, route in route_table() if surface in surfaces]
    app = GatewayApp(routes=routes, lifespan=lifespan,
                     exception_handlers={404: not_found, 405: method_not_allowed})
    app.router.redirect_slashes = False  # a 404 naming the path meant (``_meant``)
    app.state.gateway = gw
    return app


class GatewayApp(Starlette):
    """Starlette, with the client paths dispatched before its middleware and router.

    A ``POST`` to a path served by a plain-ASGI ``ClientPath`` goes straight to it
    (a client path answers every error itself, so the error middleware has
    nothing to add); everything else, including other methods on those paths,
    is Starlette's. Paths are matched after exactly one decode, segment by
    segment (``named_by_segments``): an encoded ``/`` inside a segment is not a
    separator, so ``/v1%2Fhealth`` names nothing (a 404), while a model id such
    as ``org%2Fname`` in ``/v1/models/{id}`` is that one segment. A client path
    with parameters (Bedrock's ``/model/{model}/invoke``) is matched on the raw
    path first, so an inference profile's ARN, whose ``/`` its clients encode,
    is one ``model``.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        clients: list[tuple[str, ClientPath]] = [
            (r.path, r.endpoint) for r in self.routes
            if isinstance(r, Route) and isinstance(r.endpoint, ClientPath)]
        self._fast: dict[str, ClientPath] = {path: endpoint for path, endpoint in clients
                                             if "{" not in path}
        self._shaped = [(segment_pattern(path), endpoint) for path, endpoint in clients
                        if "{" in path]
        # the fixed start of each (``/model/``): other paths never pay for a pattern
        self._shaped_starts = tuple({path[:path.index("{")] for path, _ in clients
                                     if "{" in path})
        self._remainders = remainder_prefixes(r for r in self.routes if isinstance(r, Route))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if (self._shaped_starts and scope["path"].startswith(self._shaped_starts)
                    and scope["method"] == "POST" and not scope.get("root_path")):
                shaped = self._match_shaped(raw or scope["path"].encode("utf-8"))
                if shaped is not None:
                    scope["app"] = self
                    scope["path_params"], path_endpoint = shaped
                    return await path_endpoint(scope, receive, send)
            if raw and b"%" in raw and not named_by_segments(raw, self._remainders):
                scope["path"] = "/\x00"  # matches no route: humpyard's JSON 404
            elif scope["method"] == "POST" and not scope.get("root_path"):
                endpoint = self._fast.get(scope["path"])
                if endpoint is not None:
                    scope["app"] = self
                    return await endpoint(scope, receive, send)
        await super().__call__(scope, receive, send)


    def _match_shaped(self, raw: bytes) -> tuple[dict[str, str], ClientPath] | None:
        """A client path with parameters (``/model/{model}/invoke``) matched on the raw
        path, each parameter one segment decoded once: an ARN's encoded ``/`` stays in
        its segment."""
        for pattern, endpoint in self._shaped:
            found = pattern.fullmatch(raw)
            if found is not None:
                return {name: unquote_to_bytes(value).decode("utf-8", "replace")
                        for name, value in found.groupdict().items()}, endpoint
        return None


def segment_pattern(path: str) -> re.Pattern[bytes]:
    """A route path with ``{name}`` segments as a pattern over a raw path, each
    parameter one whole segment (no ``/``): ``/model/{model}/invoke``."""
    out = []
    for seg in path.strip("/").split("/"):
        if seg.startswith("{") and seg.endswith("}") and ":" not in seg:
            out.append(b"(?P<" + seg[1:-1].encode() + b">[^/?#]+)")
        else:
            out.append(re.escape(seg.encode()))
    return re.compile(b"/" + b"/".join(out))


_ENCODED_SEPARATOR = re.compile(rb"%(2f|5c)", re.IGNORECASE)


def remainder_prefixes(routes: Iterable[Route]) -> tuple[tuple[bytes, ...], ...]:
    """The fixed leading segments of every route whose last parameter takes the rest
    of the path (``{name:path}``): ``/v1/models/{model_id:path}`` → ``(b"v1", b"models")``."""
    out = []
    for r in routes:
        segments = r.path.strip("/").split("/")
        if segments and segments[-1].endswith(":path}") and not any(
                "{" in seg for seg in segments[:-1]):
            out.append(tuple(seg.encode() for seg in segments[:-1]))
    return tuple(out)


def named_by_segments(raw: bytes, remainders: tuple[tuple[bytes, ...], ...]) -> bool:
    """Whether the raw path ``raw`` can name a route when segments are decoded once:
    an encoded ``/`` or ``\\`` may only sit in the one segment a remainder parameter
    takes (after its route's fixed segments, which equal the route's own)."""
    if not _ENCODED_SEPARATOR.search(raw):
        return True
    segments = raw.lstrip(b"/").split(b"/")
    for prefix in remainders:
        n = len(prefix)
        if len(segments) == n + 1 and tuple(segments[:n]) == prefix:
            return True
    return False

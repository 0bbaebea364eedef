"""A simulated OpenAI-compatible provider, for demos, tests and benchmarks.

``create_simulator_app(profile)`` is an ASGI app that speaks enough of the
OpenAI Chat Completions API for real SDKs and the gateway: buffered JSON and
``stream: true`` SSE in OpenAI's exact chunk shapes, tool calls, usage.
Answers are deterministic: ``"[sim:<model>] you said: <last user text>"``;
a coding agent's instruction such as "create hello.txt containing hi" is
answered with a call of the agent's own write, patch or shell tool, and the
tool's result with a short text (``simulate/agent.py``).

Profiles (chat completions only; ``/health`` follows ``POST /_sim/health``):

=========  ==================================================================
``ok``     always answers
``slow``   every answer waits 200-800 ms first
``flaky``  per request, from the (seedable) random source: 15% 500, 10% 429
           (``Retry-After: 3``, body "try again in 2.5s"), 15% answers after
           300-1500 ms, the rest answer at once
``down``   every chat request is a 503
``zero``   no work beyond parsing: a fixed answer from cached bytes, so the
           simulator is never the bottleneck of a benchmark
=========  ==================================================================

Every chat response carries ``x-sim-outcome`` (``ok``, ``slow``,
``server_error``, ``rate_limited``, ``down``). Delays go through the injected
``Clock``, so tests pass a ``FakeClock`` and never sleep.

Routes: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``,
``POST /_sim/health`` (``{"ready": bool}``), ``GET /_sim/stats``.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from humpyard.clock import Clock, SystemClock
from humpyard.protocols import sse
from humpyard.simulate.agent import agent_call, done_text, finished
from humpyard.simulate.wire import (
    ChunkBuilder,
    ToolCall,
    completion_body,
    encode_event,
    error_body,
    usage_dict,
)

PROFILES = ("ok", "slow", "flaky", "down", "zero")
ZERO_TEMPLATES = 64
"""The ``zero`` profile's answers kept ready, one per (model, stream, usage)."""
DEFAULT_MODEL = "sim-model"
FLAKY_SERVER_ERROR = 0.15
FLAKY_RATE_LIMITED = 0.10
FLAKY_SLOW = 0.15
RATE_LIMIT_MESSAGE = "Rate limit reached. Please try again in 2.5s."
_ECHO_LIMIT = 80


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one chat request will get: a ``kind`` and a delay before the answer."""

    kind: str  # "ok" | "slow" | "server_error" | "rate_limited" | "down"
    delay_s: float = 0.0


def draw_outcome(profile: str, rng: random.Random) -> Outcome:
    """Draw the outcome of one request; the same seed gives the same sequence.

    ``flaky`` draws one ``rng.random()`` per request, plus one ``rng.uniform``
    for a slow answer; ``slow`` draws one ``rng.uniform``; the others draw nothing.
    """
    if profile in ("ok", "zero"):
        return Outcome("ok")
    if profile == "down":
        return Outcome("down")
    if profile == "slow":
        return Outcome("slow", rng.uniform(0.2, 0.8))
    if profile == "flaky":
        r = rng.random()
        if r < FLAKY_SERVER_ERROR:
            return Outcome("server_error")
        if r < FLAKY_SERVER_ERROR + FLAKY_RATE_LIMITED:
            return Outcome("rate_limited")
        if r < FLAKY_SERVER_ERROR + FLAKY_RATE_LIMITED + FLAKY_SLOW:
            return Outcome("slow", rng.uniform(0.3, 1.5))
        return Outcome("ok")
    raise ValueError(f"unknown simulator profile {profile!r}; expected one of {PROFILES}")


# -- what to answer -------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _truncate(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ECHO_LIMIT else text[: _ECHO_LIMIT - 3] + "..."


def _placeholder(schema: dict[str, Any]) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    return {"string": "sim", "integer": 1, "number": 1, "boolean": True,
            "array": [], "object": {}}.get(schema.get("type", "string"), "sim")


def _chosen_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    """The tool the answer should call, or None for a text answer."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((t for t in tools if (t.get("function") or {}).get("name") == name), tools[0])
    last = body["messages"][-1]
    asked = last.get("role") == "user" and "use a tool" in _text_of(last.get("content")).lower()
    return tools[0] if asked or choice == "required" else None


def _tool_arguments(tool: dict[str, Any]) -> str:
    params = (tool.get("function") or {}).get("parameters") or {}
    props = params.get("properties") or {}
    args = {name: _placeholder(props.get(name) or {}) for name in params.get("required") or []}
    return json.dumps(args)


def _answer_text(model: str, messages: list[dict[str, Any]]) -> str:
    last = messages[-1]
    if last.get("role") == "tool" or finished(messages):
        return done_text(model, messages)
    user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    said = _truncate(_text_of(user.get("content"))) if user else ""
    return f"[sim:{model}] you said: {said}"


# -- the app --------------------------------------------------------------------


_P_MARK, _T_MARK = 7777777771, 7777777773  # token counts patched into cached bodies


def _zero_template(model: str, stream: bool, include_usage: bool) -> tuple[bytes, bool]:
    """The ``zero`` profile's body for one request shape, and whether it holds usage.

    With usage, the bytes are a ``%``-template taking (prompt_tokens, total_tokens).
    """
    text, ident = f"[sim:{model}] ok", "chatcmpl-sim-zero"
    usage = {"prompt_tokens": _P_MARK, "completion_tokens": 2, "total_tokens": _T_MARK}
    if stream:
        builder = ChunkBuilder(id=ident, model=model, created=0, include_usage=include_usage)
        data = b"".join(encode_event(c) for c in builder.answer(usage=usage, text=text))
        data += sse.DONE
    else:
        data = json.dumps(completion_body(id=ident, model=model, created=0, usage=usage,
                                          text=text), separators=(",", ":")).encode()
    has_usage = include_usage or not stream
    if has_usage:
        data = data.replace(b"%", b"%%")
        data = data.replace(str(_P_MARK).encode(), b"%d").replace(str(_T_MARK).encode(), b"%d")
    return data, has_usage


class _CountRequests:
    """ASGI wrapper counting every HTTP request by path."""

    def __init__(self, app: ASGIApp, counts: Counter[str]):
        self.app, self.counts = app, counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.counts[scope["path"]] += 1
        await self.app(scope, receive, send)


class _Simulator:
    def __init__(self, profile: str, model_name: str | None, delay_ms: float,
                 rng: random.Random, clock: Clock):
        self.profile, self.model_name, self.delay_s = profile, model_name, delay_ms / 1000
        self.rng, self.clock = rng, clock
        self.ready = True
        self.counts: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self._seq = 0
        self._zero_cache: dict[tuple[str, bool, bool], tuple[bytes, bool]] = {}

    def _fail(self, outcome: Outcome) -> Response | None:
        hdr = {"x-sim-outcome": outcome.kind}
        if outcome.kind == "server_error":
            body = {"error": {"message": "simulated upstream failure", "type": "server_error"}}
            return JSONResponse(body, 500, headers=hdr)
        if outcome.kind == "rate_limited":
            body = error_body(RATE_LIMIT_MESSAGE, "rate_limit_error", "rate_limit_exceeded")
            return JSONResponse(body, 429, headers={**hdr, "retry-after": "3"})
        if outcome.kind == "down":
            body = error_body("simulated provider is down", "server_error")
            return JSONResponse(body, 503, headers=hdr)
        return None

    async def chat(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) \
                or not body["messages"] or not all(isinstance(m, dict) for m in body["messages"]):
            err = error_body("'messages' must be a non-empty array of objects",
                             "invalid_request_error", "invalid_request")
            return JSONResponse(err, 400)
        outcome = draw_outcome(self.profile, self.rng)
        self.outcomes[outcome.kind] += 1
        if self.delay_s + outcome.delay_s > 0:
            await self.clock.sleep(self.delay_s + outcome.delay_s)
        failed = self._fail(outcome)
        if failed is not None:
            return failed
        model = self.model_name or str(body.get("model") or DEFAULT_MODEL)
        stream = body.get("stream") is True
        include_usage = stream and bool((body.get("stream_options") or {}).get("include_usage"))
        headers = {"x-sim-outcome": outcome.kind}
        if self.profile == "zero":
            return self._zero(model, stream, include_usage, len(raw) // 4, headers)

        self._seq += 1
        ident, created = f"chatcmpl-sim{self._seq:06d}", int(self.clock.now())
        asked = agent_call(body)  # a coding agent's task, done with one of its tools
        tool = None if asked is not None else _chosen_tool(body)
        call = text = None
        if asked is not None:
            call = ToolCall(f"call_sim{self._seq:06d}", asked.name, asked.arguments_json())
            completion_tokens = max(1, len(call.arguments) // 4)
        elif tool is not None:
            name = str((tool.get("function") or {}).get("name") or "tool")
            call = ToolCall(f"call_sim{self._seq:06d}", name, _tool_arguments(tool))
            completion_tokens = max(1, len(call.arguments) // 4)
        else:
            text = _answer_text(model, body["messages"])
            completion_tokens = len(text.split())
        messages_bytes = len(json.dumps(body["messages"], separators=(",", ":")).encode())
        usage = usage_dict(max(1, messages_bytes // 4), completion_tokens)
        if not stream:
            payload = completion_body(id=ident, model=model, created=created, usage=usage,
                                      text=text, tool_call=call)
            return JSONResponse(payload, headers=headers)
        builder = ChunkBuilder(id=ident, model=model, created=created, include_usage=include_usage)
        chunks = builder.answer(usage=usage, text=text, tool_call=call)

        async def events() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield encode_event(chunk)
            yield sse.DONE

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={**headers, "cache-control": "no-cache"})

    def _zero(self, model: str, stream: bool, include_usage: bool, prompt_tokens: int,
              headers: dict[str, str]) -> Response:
        """The benchmark answer: cached bytes with the token counts filled in."""
        key = (model, stream, include_usage)
        cached = self._zero_cache.get(key)
        if cached is None:
            if len(self._zero_cache) >= ZERO_TEMPLATES:  # a client naming model after model
                self._zero_cache.clear()
            cached = self._zero_cache[key] = _zero_template(model, stream, include_usage)
        template, has_usage = cached
        body = template % (prompt_tokens, prompt_tokens + 2) if has_usage else template
        media = "text/event-stream" if stream else "application/json"
        return Response(body, media_type=media, headers=headers)

    async def models(self, request: Request) -> Response:
        model = self.model_name or DEFAULT_MODEL
        return JSONResponse({"object": "list", "data": [
            {"id": model, "object": "model", "created": 0, "owned_by": "humpyard-sim"},
        ]})

    async def health(self, request: Request) -> Response:
        if self.ready:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "unavailable"}, 503)

    async def set_health(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("ready"), bool):
            return JSONResponse(error_body("expected {\"ready\": true|false}",
                                           "invalid_request_error"), 400)
        self.ready = body["ready"]
        return JSONResponse({"ready": self.ready})

    async def stats(self, request: Request) -> Response:
        return JSONResponse({"profile": self.profile, "requests": dict(self.counts),
                             "outcomes": dict(self.outcomes)})


def create_simulator_app(
    profile: str = "ok", *, model_name: str | None = None, delay_ms: float = 0,
    seed: int | None = None, rng: random.Random | None = None, clock: Clock | None = None,
) -> Starlette:
    """Build a simulated provider (see the module docstring for its behaviour).

    ``model_name`` fixes the model in answers and ``/v1/models`` (default: echo
    the request's model). ``delay_ms`` is added before every chat answer,
    errors included. Randomness comes from ``rng`` or ``random.Random(seed)``
    (give at most one). ``clock`` provides ``sleep`` and ``created`` times.
    State (readiness, counters, the random sequence) lives in this app only.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown simulator profile {profile!r}; expected one of {PROFILES}")
    if rng is not None and seed is not None:
        raise ValueError("give either seed or rng, not both")
    sim = _Simulator(profile, model_name, delay_ms, rng or random.Random(seed),
                     clock or SystemClock())
    routes = [
        Route("/v1/chat/completions", sim.chat, methods=["POST"]),
        Route("/v1/models", sim.models, methods=["GET"]),
        Route("/health", sim.health, methods=["GET"]),
        Route("/_sim/health", sim.set_health, methods=["POST"]),
        Route("/_sim/stats", sim.stats, methods=["GET"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(_CountRequests, counts=sim.counts)])


def run_simulator(host: str = "127.0.0.1", port: int = 9001, profile: str = "ok",
                  **kw: Any) -> None:
    """Serve ``create_simulator_app(profile, **kw)`` with uvicorn until interrupted."""
    app = create_simulator_app(profile, **kw)
    uvicorn.run(app, host=host, port=port, access_log=False, lifespan="off")

"""Optional AWS X-Ray tracing through Powertools' ``Tracer`` (``HUMPYARD_TRACING``).

Deprecated: the X-Ray SDK's support ends on 2027-02-25. Traces go through
OpenTelemetry instead when the stack sets ``OpenTelemetryLayerArn`` (the ADOT
layer; ``humpyard/telemetry.py``), which also turns this path off; it stays
for stacks deployed with ``Tracing=Active`` and no layer, and is to be
removed before that date (docs/decisions/0015-opentelemetry.md).

With ``HUMPYARD_TRACING=true`` (the template's ``Tracing: Active``, which
also turns on the functions' and the API stage's own tracing) every HTTP
request is one subsegment ``## <METHOD> <path>`` annotated with the
humpyard ``route``, ``target`` and ``status`` of its answer; the ledger
flush before the last byte is a subsegment ``## ledger flush`` inside it;
and botocore is patched, so each DynamoDB, Secrets Manager or S3 call is a
subsegment of its own. Response bodies are never recorded (they hold
prompts and answers).

Off (the default) nothing here imports the X-Ray SDK: ``tracer`` returns
None and the instance wraps nothing (docs/deploy.md, "Tracing", gives the
measured import cost when on).

Where the trace comes from: a Mangum function runs inside Lambda's Python
runtime, which sets ``_X_AMZN_TRACE_ID`` for each invocation, as the X-Ray
SDK expects. The stream function's app runs in its own process under the
Lambda Web Adapter, which passes the trace as the ``x-amzn-trace-id``
request header instead; ``TracingMiddleware(adopt_trace_header=True)`` copies
it into ``_X_AMZN_TRACE_ID`` before the request (Lambda runs one request
at a time per instance, so the process-wide variable is the request's).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer

    from humpyard.aws.env import LambdaEnv

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TRACE_HEADER = b"x-amzn-trace-id"
TRACE_ENV = "_X_AMZN_TRACE_ID"
# Response headers humpyard answers with, recorded as searchable annotations.
ANNOTATED = {b"x-humpyard-route": "route", b"x-humpyard-target": "target"}
MAX_NAME = 200  # X-Ray's limit on a subsegment name


def tracer(env: LambdaEnv) -> Tracer | None:
    """The instance's ``Tracer`` when ``env.tracing`` is on (botocore patched), else None."""
    if not env.tracing:
        return None
    from aws_lambda_powertools import Tracer

    return Tracer(service=env.service, patch_modules=("botocore",))


class TracingMiddleware:
    """Wrap an ASGI app so each HTTP request is one X-Ray subsegment (module docstring)."""

    def __init__(self, app: ASGIApp, tracer: Tracer, *, adopt_trace_header: bool) -> None:
        self.app = app
        self.tracer = tracer
        self.adopt_trace_header = adopt_trace_header

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.adopt_trace_header:
            for name, value in scope.get("headers", ()):
                if name.lower() == TRACE_HEADER:
                    os.environ[TRACE_ENV] = value.decode("latin-1")
                    break
        name = f"## {scope['method']} {scope['path']}"[:MAX_NAME]
        async with self.tracer.provider.in_subsegment_async(name=name) as subsegment:
            async def traced_send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])  # numbers.Number, which mypy cannot see
                    subsegment.put_annotation("status", status)  # type: ignore[arg-type]
                    for header, value in message.get("headers", ()):
                        label = ANNOTATED.get(header.lower())
                        if label is not None:
                            subsegment.put_annotation(label, value.decode("latin-1"))
                await send(message)

            await self.app(scope, receive, traced_send)


async def traced(tracer: Tracer | None, name: str, work: Callable[[], Awaitable[None]]) -> None:
    """Await ``work()`` inside a subsegment ``name`` when tracing, plainly otherwise."""
    if tracer is None:
        await work()
        return
    async with tracer.provider.in_subsegment_async(name=name):
        await work()

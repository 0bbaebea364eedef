"""Optional OpenTelemetry traces, built from each request's record when it closes.

Off unless the standard OpenTelemetry environment asks for OTLP traces
(``enabled``): ``OTEL_TRACES_EXPORTER`` names ``otlp``, or
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
set, or the AWS Distro for OpenTelemetry (ADOT) Lambda layer wraps the
runtime (``AWS_LAMBDA_EXEC_WRAPPER=/opt/otel-instrument``);
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turns it off.
Off, nothing here imports ``opentelemetry`` and the gateway's ``spans`` is
None, so the request path pays one attribute test (docs/operations.md,
"Traces", gives the measured import times).

On, ``from_environ`` returns a ``Spans`` that ``recording.py`` hands each
closed record to (``emit``). Nothing on the request path is instrumented:
the spans are made afterwards, from what the record holds, with the times
the request and each attempt really started and ended:

- one ``SERVER`` span per request, named ``chat <model asked>``, child of the
  client's W3C ``traceparent`` when it sent one (else of the current span:
  the ADOT layer's invocation span on Lambda);
- one ``CLIENT`` span per upstream call (every attempt, failed ones too),
  named ``chat <upstream model>``; an endpoint skipped without a call is an
  event on the request span instead.

Both carry the OpenTelemetry GenAI semantic-convention attributes
(``gen_ai.operation.name``, ``gen_ai.provider.name`` and the older
``gen_ai.system``, ``gen_ai.request.model``, ``gen_ai.response.model``,
``gen_ai.usage.input_tokens``/``output_tokens``,
``gen_ai.response.finish_reasons``) and humpyard's own: ``humpyard.route``,
``humpyard.rule``, ``humpyard.target``, ``humpyard.provider``,
``humpyard.decision_id`` (the ledger's request id: ``humpyard decisions``
and the console find it) and ``humpyard.outcome``. Never a prompt, an
answer or a key.

Export is the SDK's OTLP/HTTP exporter configured by the standard variables
(``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_BSP_*``), batched on the SDK's own thread. When a tracer provider is
already installed (the ADOT layer's), it is used as it is.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from humpyard.records import Attempt, Call, Served

log = logging.getLogger("humpyard.telemetry")

ADOT_WRAPPER = "/opt/otel-instrument"
OPERATION = "chat"  # every client protocol humpyard serves is a chat completion
DEFAULT_SERVICE = "humpyard"
_NS = 1_000_000_000


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks for OTLP traces (module docstring)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    if "none" in exporters:
        return False
    return ("otlp" in exporters
            or bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
            or bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            or environ.get("AWS_LAMBDA_EXEC_WRAPPER") == ADOT_WRAPPER)


def from_environ(environ: Mapping[str, str]) -> Spans | None:
    """A ``Spans`` when ``environ`` enables traces, else None (and no import).

    A missing OpenTelemetry SDK is logged once and leaves tracing off: the
    gateway serves either way (``pip install 'humpyard[otel]'``)."""
    if not enabled(environ):
        return None
    try:
        return Spans(_provider(environ))
    except ImportError as e:
        log.warning("OpenTelemetry traces asked for but the SDK is not installed (%s); "
                    "install humpyard[otel]. Tracing stays off.", e)
        return None


def _provider(environ: Mapping[str, str]) -> Any:
    """The tracer provider: the one already installed (the ADOT layer's), else a new
    SDK provider exporting OTLP/HTTP protobuf in batches."""
    from opentelemetry import trace

    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider) and \
            type(current).__name__ != "NoOpTracerProvider":
        return current
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or \
        environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol != "http/protobuf":
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported; exporting "
                    "http/protobuf", protocol)
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES;
    # without a service name the SDK's "unknown_service" becomes "humpyard".
    resource = Resource.create({} if environ.get("OTEL_SERVICE_NAME")
                               else {SERVICE_NAME: DEFAULT_SERVICE})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


class Spans:
    """Turns closed request records into spans (module docstring)."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        from humpyard import __version__

        self.provider = provider
        self.tracer = provider.get_tracer("humpyard", __version__)
        self._kind = SpanKind
        self._status = Status
        self._code = StatusCode
        self._propagator = TraceContextTextMapPropagator()
        self._set_span = set_span_in_context

    def emit(self, call: Call, decision: Mapping[str, Any], served: Served | None,
             *, wall_now: float, mono_now: float) -> None:
        """The spans of one closed request: ``decision`` is its record, ``wall_now``
        and ``mono_now`` the gateway clock's time and monotonic time now."""
        # From the record's own timer (call.ts is reset when the request is planned):
        # the request arrived this long before now.
        end = wall_now
        start = end - max(0.0, time.perf_counter() - call.started)
        parent = None
        if "traceparent" in call.headers:
            parent = self._propagator.extract(call.headers)
        attrs = _request_attributes(call, decision, served)
        span = self.tracer.start_span(f"{OPERATION} {decision.get('model') or 'unknown'}",
                                      context=parent, kind=self._kind.SERVER,
                                      attributes=attrs, start_time=_ns(start))
        status = int(decision.get("status") or 0)
        if status >= 500 or decision.get("outcome") in ("failed", "stream_broken"):
            span.set_status(self._status(self._code.ERROR, str(decision.get("error") or "")))
        ctx = self._set_span(span)
        answering = call.attempts.index(served.attempts[-1]) if (
            served is not None and served.attempts
            and served.attempts[-1] in call.attempts) else None
        stream = bool(decision.get("stream"))
        for i, a in enumerate(call.attempts):
            if a.skipped or a.started is None:
                span.add_event("humpyard.attempt.skipped", {
                    "humpyard.target": a.target, "humpyard.provider": a.provider,
                    "humpyard.skipped": a.skipped or "not_called"}, timestamp=_ns(start))
                continue
            a_start = wall_now - (mono_now - a.started)
            a_end = a_start + (a.latency_ms or 0.0) / 1000
            if i == answering and stream:
                a_end = end  # a relayed stream is read until the request ends
            self._attempt(ctx, a, served if i == answering else None,
                          max(a_start, start), min(max(a_end, a_start), end))
        span.end(end_time=_ns(end))

    def _attempt(self, ctx: Any, a: Attempt, served: Served | None, start: float,
                 end: float) -> None:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.provider.name": a.provider,
            "gen_ai.system": a.provider,
            "gen_ai.request.model": a.model,
            "humpyard.target": a.target,
            "humpyard.provider": a.provider,
        }
        if a.status is not None:
            attrs["http.response.status_code"] = a.status
        if a.class_:
            attrs["humpyard.class"] = a.class_
        if a.purpose:
            attrs["humpyard.purpose"] = a.purpose
        if a.resend:
            attrs["humpyard.resend"] = True
        if a.failure_class:
            attrs["error.type"] = a.failure_class
            attrs["humpyard.failure_class"] = a.failure_class
        if served is not None:
            attrs.update(_response_attributes(served))
        span = self.tracer.start_span(f"{OPERATION} {a.model}", context=ctx,
                                      kind=self._kind.CLIENT, attributes=attrs,
                                      start_time=_ns(start))
        if a.failure_class:
            span.set_status(self._status(self._code.ERROR, a.error or a.failure_class))
        span.end(end_time=_ns(end))

    def flush(self, timeout_ms: int = 2000) -> None:
        """Export what is pending (Lambda: before the instance may be frozen)."""
        force = getattr(self.provider, "force_flush", None)
        if force is not None:
            force(timeout_ms)


def _ns(seconds: float) -> int:
    return int(seconds * _NS)


def _request_attributes(call: Call, decision: Mapping[str, Any],
                        served: Served | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": OPERATION,
        "humpyard.decision_id": decision["request_id"],
        "humpyard.protocol": call.protocol,
        "humpyard.outcome": decision["outcome"],
        "http.response.status_code": int(decision.get("status") or 0),
    }
    for name, key in (("gen_ai.request.model", "model"), ("humpyard.route", "route"),
                      ("humpyard.rule", "rule"), ("humpyard.target", "target"),
                      ("humpyard.provider", "provider"), ("humpyard.key_id", "key_id")):
        value = decision.get(key)
        if value:
            attrs[name] = str(value)
    if decision.get("stream"):
        attrs["humpyard.stream"] = True
    if decision.get("provider"):
        attrs["gen_ai.provider.name"] = attrs["gen_ai.system"] = decision["provider"]
    usage = decision.get("usage")
    if usage:
        attrs["gen_ai.usage.input_tokens"] = usage["input_tokens"]
        attrs["gen_ai.usage.output_tokens"] = usage["output_tokens"]
    if served is not None:
        attrs.update(_response_attributes(served))
    if decision.get("outcome") not in ("ok", None):
        attrs["error.type"] = str(decision["outcome"])
    return attrs


def _response_attributes(served: Served) -> dict[str, Any]:
    """The response model, token counts and finish reasons of an answer, as far as the
    record knows them (a relayed stream's finish reason is not kept)."""
    attrs: dict[str, Any] = {"gen_ai.response.model": served.endpoint.model}
    if served.usage:
        from humpyard.ledger.decision import token_counts
        tokens = token_counts(served.usage)
        attrs["gen_ai.usage.input_tokens"] = tokens.input
        attrs["gen_ai.usage.output_tokens"] = tokens.output
    reasons = _finish_reasons(served)
    if reasons:
        attrs["gen_ai.response.finish_reasons"] = reasons
    body = served.body
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        attrs["gen_ai.response.model"] = body["model"]
    return attrs


def _finish_reasons(served: Served) -> tuple[str, ...]:
    body: Any = served.body
    if body is None and served.body_bytes is not None:
        try:
            body = json.loads(served.body_bytes)
        except ValueError:
            return ()
    if not isinstance(body, dict):
        return ()
    choices = body.get("choices")
    if isinstance(choices, list):
        return tuple(str(c["finish_reason"]) for c in choices
                     if isinstance(c, dict) and c.get("finish_reason"))
    reason = body.get("stop_reason")  # an Anthropic message relayed as it came
    return (str(reason),) if isinstance(reason, str) else ()

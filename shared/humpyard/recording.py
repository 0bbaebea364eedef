"""The one owner of a request's decision record.

The intake opens the record as soon as a request arrives::

    async with recording(gw, call) as rec:  # gw: services.RequestServices
        ...  # authenticate, decode, serve, send the answer

and whatever happens inside the block — an answer sent, a stream ended or
broken, a refusal, an error, the client gone — the record is written exactly
once, when the block ends (or earlier, with ``rec.close``, where the answer
must wait for it: ``gw.record_before_reply`` in Lambda). Closing builds the
decision (``ledger/decision.py``), hands it to the store's writer, adds the
request's spend to its key's budget, and moves the per-request metrics.
Recording never raises: a failure to record is logged, never answered.

A client that leaves (``client_left``, told by the intake's ``ClientWatch``) is
recorded as 499 ``client_closed`` whatever the block did after, with the
attempts made so far; a stream that ended without the upstream's usage (the
client left, the stream broke, or the upstream never sent it) is charged an
estimate: the prompt estimate and the text relayed so far
(``ledger.decision.stream_usage``), marked ``usage_estimated``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

from humpyard.errors import HumpyardError, UpstreamError
from humpyard.jsonfast import dumps_text
from humpyard.ledger.decision import build_decision, stream_usage, token_counts
from humpyard.ledger.periods import period_key
from humpyard.logsink import info_line
from humpyard.metrics.translation import note_kind
from humpyard.planning.estimate import relayed_text_bytes, relayed_text_bytes_raw
from humpyard.planning.policy import output_bound
from humpyard.planning.types import Plan
from humpyard.records import Call, Served, new_request_id
from humpyard.services import RequestServices

log = logging.getLogger("humpyard.request")

CLIENT_GONE = HumpyardError("the client went away before the answer was complete",
                            status=499, code="client_closed")
INTERNAL = HumpyardError("internal error; see the gateway log")
SERVER_STOPPED = HumpyardError("the gateway stopped before the answer was complete; "
                               "retry", status=503, code="server_stopping")
"""The record of a request the server stopped (``[server] stop_timeout_secs`` after
SIGTERM, or a second signal), and the message its task is cancelled with."""


def stopped(e: BaseException) -> bool:
    """Whether a cancellation is the server stopping (``task.cancel(SERVER_STOPPED)``),
    not the client leaving."""
    return bool(e.args) and e.args[0] is SERVER_STOPPED


class Recording:
    """The open record of one ``Call``; ``close`` writes it, once.

    ``answered(served)`` marks a buffered answer ready (its latency is taken
    then); ``watch(served)`` wraps a stream so the record learns whether it
    broke, how much text it relayed and whether it reached its end, and the
    upstream connection is released when it ends; ``client_left(phase)`` marks
    the request as abandoned by its client.
    """

    __slots__ = ("gw", "call", "served", "stream_error", "replying", "closed", "gone",
                 "relayed", "finished")

    def __init__(self, gw: RequestServices, call: Call) -> None:
        self.gw = gw
        self.call = call
        self.served: Served | None = None
        self.stream_error: str | None = None
        self.replying = False  # the answer is being sent: a failure now is the client's
        self.closed = False
        self.gone: str | None = None  # the phase in which the client left
        self.relayed = 0  # bytes of answer text a stream relayed (an estimate's input)
        self.finished = False  # the relayed stream reached its end

    def client_left(self, phase: str) -> None:
        """The client went away while the request was in ``phase`` (``waiting``,
        ``hold_back`` or ``relaying``): the record says 499 ``client_closed``."""
        self.gone = phase

    def answered(self, served: Served) -> None:
        """A target answered ``served`` (buffered: its latency ends now)."""
        self.served = served
        self.call.attempts = served.attempts
        if served.events is None:
            self.call.answered = time.perf_counter()

    async def watch(self, served: Served) -> AsyncGenerator[Any, None]:
        """``served.events``, relayed; a break is noted for the record, the upstream
        connection is released at the end, and in Lambda the record is written
        before the stream's last bytes go out."""
        self.answered(served)
        events = served.events
        assert events is not None
        try:
            async for batch in events:
                for ev in batch:  # what the answer said so far, should its usage not come
                    self.relayed += relayed_text_bytes(ev.data)
                yield batch
            self.finished = True
        except HumpyardError as e:
            self.stream_error = e.message
            raise
        except Exception as e:  # a transport failure after the first content
            self.stream_error = str(e) or type(e).__name__
            raise
        finally:
            await served.aclose()
            if self.gw.record_before_reply:
                self.close(status=200)

    async def __aenter__(self) -> Recording:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, e: BaseException | None,
                        tb: object) -> None:
        if self.gone is not None:
            self.close(status=CLIENT_GONE.status, error=CLIENT_GONE)
        elif isinstance(e, asyncio.CancelledError) and stopped(e):
            # before the answer or in the middle of its stream: it did not complete
            self.close(status=SERVER_STOPPED.status, error=SERVER_STOPPED)
        elif e is None or self.replying:
            self.close(status=200)  # the block sent the answer: recording never delays it
        elif isinstance(e, HumpyardError):
            self.close(status=e.status, error=e)
        elif isinstance(e, asyncio.CancelledError):
            self.close(status=CLIENT_GONE.status, error=CLIENT_GONE)
        else:
            self.close(status=500, error=INTERNAL)

    def close(self, *, status: int, error: HumpyardError | None = None) -> None:
        """Write the decision, spend and metrics, once; later calls do nothing. Never raises."""
        if self.closed:
            return
        self.closed = True
        if self.gone is not None:  # however the block ended after, the client had left
            status, error = CLIENT_GONE.status, CLIENT_GONE
        decision = None
        try:
            usage, estimated = self._usage()
            decision = _write(self.gw, self.call, status, self.served, error,
                              self.stream_error, usage, estimated)
            if self.gone is not None:
                self.gw.metrics.client_disconnects.inc(phase=self.gone)
        except Exception:  # recording must never break a response
            log.exception("could not record decision request_id=%s", self.call.request_id)
        finally:  # budget reservation and per-key limits given back, once (allowance.py)
            settle, self.call.settle = self.call.settle, None
            if settle is not None:
                try:
                    settle(decision)
                except Exception:
                    log.exception("could not settle request_id=%s", self.call.request_id)

    def _usage(self) -> tuple[dict[str, int] | None, bool]:
        """The answer's usage, and whether it is estimated: a stream that did not
        reach its end, or ended without usage, is charged what it relayed; a buffered
        answer without usage, the text it holds (it used to cost nothing)."""
        served = self.served
        if served is None:
            return None, False
        if served.events is None:
            if _counted(served.usage):
                return served.usage, False
            return self._estimate(served, _answer_text_bytes(served)), True
        if self.finished and served.usage:
            return served.usage, False
        return self._estimate(served, self.relayed), True

    def _estimate(self, served: Served, text_bytes: int) -> dict[str, int]:
        call = self.call
        prompt = call.plan.prompt_tokens if call.plan is not None else None
        if prompt is None and call.facts is not None:
            prompt = call.facts.prompt_tokens
        bound = output_bound(served.endpoint, call.facts.max_tokens) \
            if call.facts is not None and call.facts.max_tokens is not None else None
        return stream_usage(served.usage, prompt or 0, text_bytes, bound)


def _counted(usage: dict[str, int]) -> bool:
    """The upstream counted the answer's tokens (an answer with none stated, or every
    count 0, is one it did not: a prompt is never 0 tokens)."""
    got = token_counts(usage) if usage else None
    return got is not None and (got.input > 0 or got.output > 0)


def _answer_text_bytes(served: Served) -> int:
    """About how many bytes of answer text a buffered answer holds (as a stream's
    relayed text is counted: ``planning.estimate``)."""
    if served.body_bytes is not None:
        return relayed_text_bytes_raw(served.body_bytes)
    if served.body is not None:
        return relayed_text_bytes(dumps_text(served.body))
    return 0


def recording(gw: RequestServices, call: Call) -> Recording:
    """Open ``call``'s record: ``async with recording(gw, call) as rec: ...``.

    The record is written when the block ends, however it ends: a
    ``HumpyardError`` is recorded with its status, any other exception as a
    500, a cancellation as 499 (the client gone) or 503 (the server stopping), and
    the exception then propagates. A block that ends normally, or fails while
    the answer is being sent (``replying``: the answer was given, the client
    is gone), records 200 with what ``answered``/``watch`` saw, unless the
    client was seen leaving (``client_left``): then 499.
    """
    return Recording(gw, call)


def record_refusal(gw: RequestServices, error: HumpyardError, protocol: str = "http") -> str:
    """Record a request refused before any client path took it (an unknown path, a
    Lambda function's boundary): counted, and written within ``refused_per_minute``.
    Its request id, for the answer's ``x-humpyard-request-id``."""
    now = gw.clock.now()
    call = Call(request_id=new_request_id(now), config=gw.config, key=None, headers={},
                body={}, protocol=protocol, ts=now)
    Recording(gw, call).close(status=error.status, error=error)
    return call.request_id


def _write(gw: RequestServices, call: Call, status: int, served: Served | None,
           error: HumpyardError | None, stream_error: str | None,
           usage: dict[str, int] | None = None,
           usage_estimated: bool = False) -> dict[str, Any] | None:
    if call.plan is None and error is not None and 400 <= status < 500:
        # Refused before routing: counted always, written within the allowance.
        gw.metrics.refused.inc(reason=error.code)
        if not gw.refusals.allow(gw.clock.monotonic()):
            return None
    latency_ms = ((call.answered or time.perf_counter()) - call.started) * 1000
    cost = 0.0
    if served is not None and usage and served.endpoint.priced:
        cost = served.endpoint.cost_usd(*token_counts(usage))
    decision = build_decision(call, status=status, served=served, error=error,
                              stream_error=stream_error, latency_ms=latency_ms, cost_usd=cost,
                              usage=usage, usage_estimated=usage_estimated)
    gw.writer.submit_decision(decision)
    if gw.spans is not None:  # OpenTelemetry traces, built from the record (telemetry.py)
        try:
            gw.spans.emit(call, decision, served, wall_now=gw.clock.now(),
                          mono_now=gw.clock.monotonic())
        except Exception:
            log.exception("could not emit spans request_id=%s", call.request_id)
    if cost and call.key is not None and call.key.budget is not None:
        gw.state.add_spend(call.key.id, period_key(call.key.budget.period, call.ts), cost)
    _count(gw, call, decision, status, error, latency_ms)
    return decision


def _count(gw: RequestServices, call: Call, decision: dict[str, Any], status: int,
           error: HumpyardError | None, latency_ms: float) -> None:
    m = gw.metrics
    plan = call.plan
    if plan is not None:
        _count_removals(gw, plan)
        if isinstance(error, UpstreamError) and plan.removed("classes"):
            m.fallback_blocked.inc(route=plan.route)
    route = decision.get("route") or "-"
    target = decision.get("target") or "-"
    m.requests.inc(route=route, target=target, status=str(status))
    if decision["usage"] is not None:
        _count_usage(gw, call, route, target, decision["usage"], decision["cost_usd"])
    m.request_duration.observe(latency_ms / 1000, route=route)
    for note in decision["notes"]:  # what translating and fitting could not carry as sent
        # (the decoder's notes and the answering attempt's: metrics/translation.py)
        m.translation_drops.inc(protocol=call.protocol, what=note_kind(note))
    upstream_ms = sum(a.latency_ms or 0 for a in call.attempts)
    if not call.facts or not call.facts.stream:
        m.gateway_overhead.observe(max(0.0, latency_ms - upstream_ms) / 1000)
    for a in call.attempts:
        if not a.skipped:
            m.upstream_attempts.inc(target=a.target, provider=a.provider,
                                    outcome="cancelled" if a.cancelled
                                    else "ok" if a.failure_class is None
                                    else a.failure_class)
    if decision["outcome"] in ("failed", "stream_broken"):
        log.warning("request failed request_id=%s route=%s rule=%s target=%s provider=%s "
                    "status=%s ms=%.1f outcome=%s error=%s", call.request_id, route,
                    decision.get("rule") or "-", target, decision.get("provider") or "-",
                    status, latency_ms, decision["outcome"], decision.get("error"))
    elif call.config.log_requests and log.isEnabledFor(logging.INFO):
        info_line(log, "request request_id=%s route=%s rule=%s target=%s provider=%s "
                  "status=%s ms=%.1f outcome=%s", call.request_id, route,
                  decision.get("rule") or "-", target, decision.get("provider") or "-",
                  status, latency_ms, decision["outcome"])


USAGE_KINDS = (("input", "input_tokens"), ("output", "output_tokens"),
               ("cache_read", "cache_read_tokens"), ("cache_write", "cache_write_tokens"))


def _count_usage(gw: RequestServices, call: Call, route: str, target: str, usage: dict[str, Any],
                 cost: float) -> None:
    """The answer's tokens and cost, by key id, route and target (series keyed by
    tuple: no label dict per request)."""
    kid = call.key.id if call.key is not None else "-"
    tokens = gw.metrics.tokens
    for kind, name in USAGE_KINDS:
        n = usage[name]
        if n:
            tokens.add((kid, route, target, kind), n)
    if cost:
        gw.metrics.cost_usd.add((kid, route, target), cost)


def _count_removals(gw: RequestServices, plan: Plan) -> None:
    for r in plan.removals:
        if r.step == "health":
            gw.metrics.health_skips.inc(route=plan.route, target=r.target)
        elif r.step == "capability":
            gw.metrics.capability_skips.inc(route=plan.route, target=r.target, reason=r.reason)

"""One client request through the gateway: facts → plan → execute → record.

Both client protocols (OpenAI chat, Anthropic messages) come here with an
OpenAI chat body; ``serve`` returns a ``Served`` (buffered body or event
stream) or raises a ``HumpyardError``. Every request, failed and refused ones
too, leaves exactly one decision in the ledger (``finish``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from humpyard.config.names import CREDENTIAL_HEADERS
from humpyard.config.spec import KeySpec
from humpyard.errors import BudgetExhausted, ForbiddenError, HumpyardError, UpstreamError
from humpyard.executor.tiered import run_tiered
from humpyard.gateway import Gateway
from humpyard.ledger.decision import build_decision
from humpyard.ledger.periods import period_key, seconds_left
from humpyard.planning.estimate import analyse_request
from humpyard.planning.plan import plan as make_plan
from humpyard.planning.types import Plan, RequestFacts
from humpyard.protocols.sse import SSEEvent
from humpyard.records import Call, Served
from humpyard.sessions import session_id

log = logging.getLogger("humpyard.request")

TRUE = frozenset({"1", "true", "yes"})


_ID_PREFIX = os.urandom(6).hex()  # per process: ids from two instances never collide
_ID_COUNTER = itertools.count(1)


def new_request_id() -> str:
    """A unique request id: a random per-process prefix and a counter.

    Not a secret, so no per-request entropy is drawn (``uuid4`` reads the OS's
    random source on every call, which costs a system call here)."""
    return f"req_{_ID_PREFIX}{next(_ID_COUNTER):012x}"


def facts_for(call: Call) -> RequestFacts:
    """The planner's view of the request; credential headers are dropped here."""
    body = call.body
    headers = {k: v for k, v in call.headers.items() if k not in CREDENTIAL_HEADERS}
    shape = analyse_request(body)
    sub = headers.get("x-humpyard-subagent") or headers.get("x-switchyard-subagent") or ""
    return RequestFacts(
        model=body["model"], key_id=call.key.id if call.key else None, headers=headers,
        stream=bool(body.get("stream")), tools=shape.tools, images=shape.images,
        subagent=sub.strip().lower() in TRUE, prompt_tokens=shape.high,
        prompt_tokens_low=shape.low,
        session_id=session_id(headers))


async def serve(gw: Gateway, call: Call) -> Served:
    """Plan and execute ``call``; on any error the decision is recorded before raising.

    A stream is recorded when it ends, once its last bytes are sent (before them
    when ``gw.record_before_reply``). A buffered answer is recorded by the caller
    with ``finish`` once it has been sent (in a ``finally``), so that recording
    does not delay the client; its latency is taken when the answer was ready.
    """
    call.ts = gw.clock.now()
    try:
        call.facts = facts = facts_for(call)
        snapshot = gw.snapshot(call.ts)
        # Seeded routes draw from their own source in route_rngs (the planner keeps it).
        call.plan = make_plan(facts, snapshot, call.config, call.ts, gw.rng, policy=gw.policy,
                              route_rngs=gw.route_rngs)
        _count_removals(gw, call.plan)
        if call.plan.tiers:
            served = await run_tiered(gw.tiered, gw.executor, call.plan, call.config, call.body,
                                      facts.headers, facts.session_id, stream=facts.stream,
                                      wanted_usage=_wants_usage(call.body))
        else:
            served = await gw.executor.run(call.plan, call.config, call.body,
                                           stream=facts.stream,
                                           wanted_usage=_wants_usage(call.body))
    except HumpyardError as e:
        if isinstance(e, BudgetExhausted) and call.key and call.key.budget:
            e.retry_after = seconds_left(call.key.budget.period, call.ts)
        call.plan = call.plan or getattr(e, "plan", None)
        call.attempts = getattr(e, "attempts", call.attempts)
        _blocked(gw, call, e)
        finish(gw, call, status=e.status, error=e)
        raise
    except Exception:
        # A bug, not a decision: still leave exactly one record for the request.
        finish(gw, call, status=500, error=HumpyardError("internal error; see the gateway log"))
        raise
    call.attempts = served.attempts
    if served.events is not None:
        served.events = _recorded_stream(gw, call, served, served.events)
    else:
        call.answered = time.perf_counter()
    return served


def _wants_usage(body: Mapping[str, Any]) -> bool:
    opts = body.get("stream_options")
    return bool(isinstance(opts, dict) and opts.get("include_usage"))


async def _recorded_stream(gw: Gateway, call: Call, served: Served,
                           events: AsyncIterator[list[SSEEvent]],
                           ) -> AsyncIterator[list[SSEEvent]]:
    broken: str | None = None
    try:
        async for batch in events:
            yield batch
    except HumpyardError as e:
        broken = e.message
        raise
    except Exception as e:  # a transport failure after the first content
        broken = str(e) or type(e).__name__
        raise
    finally:
        await served.aclose()
        if gw.record_before_reply:
            finish(gw, call, status=200, served=served, stream_error=broken)
        else:  # after the stream's last bytes have been sent, as for a buffered answer
            asyncio.get_running_loop().call_soon(
                lambda: finish(gw, call, status=200, served=served, stream_error=broken))


def _count_removals(gw: Gateway, plan: Plan) -> None:
    for r in plan.removals:
        if r.step == "health":
            gw.metrics.health_skips.inc(route=plan.route, target=r.target)
        elif r.step == "capability":
            gw.metrics.capability_skips.inc(route=plan.route, target=r.target, reason=r.reason)


def _blocked(gw: Gateway, call: Call, e: HumpyardError) -> None:
    plan = call.plan
    if isinstance(e, UpstreamError) and plan is not None and plan.removed("classes"):
        gw.metrics.fallback_blocked.inc(route=plan.route)


def finish(gw: Gateway, call: Call, *, status: int, served: Served | None = None,
           error: HumpyardError | None = None, stream_error: str | None = None) -> None:
    """Record the decision (once), spend and metrics. Never raises."""
    if call.recorded:
        return
    call.recorded = True
    try:
        _finish(gw, call, status, served, error, stream_error)
    except Exception:  # recording must never break a response
        log.exception("could not record decision request_id=%s", call.request_id)


def _finish(gw: Gateway, call: Call, status: int, served: Served | None,
            error: HumpyardError | None, stream_error: str | None) -> None:
    latency_ms = ((call.answered or time.perf_counter()) - call.started) * 1000
    usage = dict(served.usage) if served else {}
    cost = 0.0
    if served is not None and usage:
        cost = served.endpoint.cost_usd(int(usage.get("prompt_tokens", 0) or 0),
                                        int(usage.get("completion_tokens", 0) or 0))
    decision = build_decision(call, status=status, served=served, error=error,
                              stream_error=stream_error, latency_ms=latency_ms, cost_usd=cost)
    gw.writer.submit_decision(decision)
    if cost and call.key is not None and call.key.budget is not None:
        gw.add_spend(call.key.id, period_key(call.key.budget.period, call.ts), cost)
    route = decision.get("route") or "-"
    target = decision.get("target") or "-"
    gw.metrics.requests.inc(route=route, target=target, status=str(status))
    gw.metrics.request_duration.observe(latency_ms / 1000, route=route)
    upstream_ms = sum(a.latency_ms or 0 for a in call.attempts)
    if not call.facts or not call.facts.stream:
        gw.metrics.gateway_overhead.observe(max(0.0, latency_ms - upstream_ms) / 1000)
    for a in call.attempts:
        if not a.skipped:
            gw.metrics.upstream_attempts.inc(target=a.target, provider=a.provider,
                                             outcome="ok" if a.failure_class is None
                                             else a.failure_class)
    # One line per request at DEBUG: the decision in the ledger is the record, and
    # formatting a log line costs more than the rest of the gateway's own work.
    if decision["outcome"] in ("failed", "stream_broken"):
        log.warning("request failed request_id=%s route=%s status=%s error=%s",
                    call.request_id, route, status, decision.get("error"))
    elif log.isEnabledFor(logging.DEBUG):
        log.debug("request request_id=%s route=%s rule=%s target=%s status=%s outcome=%s "
                  "ms=%.1f", call.request_id, route, decision.get("rule"), target, status,
                  decision.get("outcome"), latency_ms)


def check_route_allowed(key: KeySpec | None, route: str) -> None:
    if key is not None and not key.may_use(route):
        raise ForbiddenError(f"key {key.id!r} may not use route {route!r}")

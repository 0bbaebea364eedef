"""One client request through the gateway: facts → plan → execute.

Every client protocol (OpenAI chat, Anthropic messages, Responses) comes here with an
OpenAI chat body; ``serve`` returns a ``Served`` (buffered body or event
stream) or raises a ``HumpyardError``. It records nothing: the intake opens
the request's record (``recording.py``) around it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from humpyard.allowance import Hold, limit_headers, limited
from humpyard.config.names import CREDENTIAL_HEADERS
from humpyard.errors import BudgetExhausted, BudgetUnknown, HumpyardError, RateLimited
from humpyard.executor.count import count_upstream
from humpyard.executor.tiered import run_tiered
from humpyard.ledger.periods import seconds_left
from humpyard.planning.estimate import analyse_request
from humpyard.planning.plan import plan as make_plan
from humpyard.planning.policy import worst_cost
from humpyard.planning.types import Plan, RequestFacts, StateSnapshot
from humpyard.records import Call, Native, Served
from humpyard.services import RequestServices
from humpyard.sessions import session_id

TRUE = frozenset({"1", "true", "yes"})
CLAUDE_CODE_AGENT = "x-claude-code-agent-id"
"""Claude Code sends this header on its subagents' calls only (docs/routing.md)."""


def is_subagent(headers: Mapping[str, str]) -> bool:
    """Whether the client marked the request as a sub-agent's: ``x-humpyard-subagent``
    (or ``x-switchyard-subagent``) when present decides; otherwise Claude Code's
    ``x-claude-code-agent-id`` marks one."""
    sub = headers.get("x-humpyard-subagent") or headers.get("x-switchyard-subagent")
    if sub is not None:
        return sub.strip().lower() in TRUE
    return bool(headers.get(CLAUDE_CODE_AGENT, "").strip())


def facts_for(call: Call) -> RequestFacts:
    """The planner's view of the request; credential headers are dropped here."""
    body = call.body
    headers = {k: v for k, v in call.headers.items() if k not in CREDENTIAL_HEADERS}
    shape = analyse_request(body)
    return RequestFacts(
        model=body["model"], key_id=call.key.id if call.key else None, headers=headers,
        stream=bool(body.get("stream")), tools=shape.tools, images=shape.images,
        subagent=is_subagent(headers), prompt_tokens=shape.high,
        prompt_tokens_low=shape.low,
        session_id=session_id(headers), max_tokens=_max_tokens(body))


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


async def serve(gw: RequestServices, call: Call) -> Served:
    """Plan ``call`` and execute the plan: the answer (a buffered body or an event
    stream still to be relayed), or a ``HumpyardError``.

    What was decided and tried is left on ``call`` (``facts``, ``plan``,
    ``attempts``) for the record, whichever way this ends (a cancellation too:
    the attempts are appended to ``call.attempts`` as they are made); recording
    is the caller's (``recording.py``). ``gw`` is the gateway's request side
    (``services.RequestServices``).
    """
    call.ts = gw.clock.now()
    try:
        call.facts = facts = facts_for(call)
        hold = await _admit(gw, call, facts)
        snapshot = gw.state.snapshot(call.ts)
        # Seeded routes draw from their own source in route_rngs (the planner keeps it).
        call.plan = make_plan(facts, snapshot, call.config, call.ts, gw.rng, policy=gw.policy,
                              route_rngs=gw.route_rngs)
        if hold is not None and call.key is not None and call.key.budget is not None:
            await _reserve(gw, call, hold, facts, snapshot)
        native = _native(call)
        if call.plan.tiers:
            served = await run_tiered(gw.tiered, gw.executor, call.plan, call.config, call.body,
                                      facts.headers, facts.session_id, stream=facts.stream,
                                      wanted_usage=_wants_usage(call.body), native=native,
                                      attempts=call.attempts)
        else:
            served = await gw.executor.run(call.plan, call.config, call.body,
                                           stream=facts.stream,
                                           wanted_usage=_wants_usage(call.body), native=native,
                                           attempts=call.attempts)
    except HumpyardError as e:
        if isinstance(e, BudgetExhausted) and call.key and call.key.budget:
            e.retry_after = seconds_left(call.key.budget.period, call.ts)
        call.plan = call.plan or getattr(e, "plan", None)
        call.attempts = getattr(e, "attempts", call.attempts)
        raise
    call.attempts = served.attempts
    call.native = served.native
    return served


async def _reserve(gw: RequestServices, call: Call, hold: Hold, facts: RequestFacts,
                   snapshot: StateSnapshot) -> None:
    """Reserve the plan's largest worst case against the key's budget. With no await
    since the snapshot, nothing else was admitted in between; across instances the
    reservation comes from this instance's lease of the budget (``leases.py``), and
    when the budget has no room left for it anywhere the request is planned again as
    for a spent budget: free targets only, else ``BudgetExhausted``. So is a request
    whose key's spend this process has never read while the store cannot be reached,
    else ``BudgetUnknown`` (503): a spend of 0 is not assumed."""
    key = call.key
    assert key is not None and key.budget is not None and call.plan is not None
    usd = max((worst_cost(t.endpoints, facts) for t in call.plan.targets), default=0.0)
    unknown: BudgetUnknown | None = None
    try:
        if await gw.allowance.reserve_budget(
                hold, key, usd, call.ts,
                spend_read=lambda: gw.state.spend_known(key.id, call.ts)):
            return
    except BudgetUnknown as e:
        unknown = e
    # No room left anywhere: what the key spent stays as read, the rest is held by
    # requests in flight (here and on other processes), so a refusal says so and the
    # decision lists the budget's removals.
    spent = snapshot.spend_usd.get(key.id, 0.0)
    held = replace(snapshot, reserved_usd={
        **snapshot.reserved_usd, key.id: max(key.budget.usd - spent, 0.0)})
    try:
        call.plan = make_plan(facts, held, call.config, call.ts, gw.rng, policy=gw.policy,
                              route_rngs=gw.route_rngs)
    except BudgetExhausted as e:
        call.plan = getattr(e, "plan", None) or call.plan
        if unknown is not None:
            raise unknown from None
        raise


async def _admit(gw: RequestServices, call: Call, facts: RequestFacts) -> Hold | None:
    """Take the request's share of its key's limits (``RateLimited`` beyond one) and
    leave on ``call`` how to give it back when the record closes (``recording.py``);
    the tokens an answer used count against its provider's ``tpm_limit`` then too."""
    key = call.key
    keyed = key is not None and (key.budget is not None or limited(key))
    if not keyed and not gw.provider_tpm:
        return None
    hold: Hold | None = None
    if key is not None and keyed:
        tokens = (facts.prompt_tokens or 0) + (facts.max_tokens or 0)
        try:
            hold, state = await gw.allowance.admit_shared(key, tokens, call.ts)
        except RateLimited as e:
            call.limit_headers = limit_headers(getattr(e, "state", None), call.protocol)
            raise
        call.limit_headers = limit_headers(state, call.protocol)
    allowance, pacing, config, clock = gw.allowance, gw.pacing, call.config, gw.clock

    def settle(decision: Mapping[str, Any] | None) -> None:
        usage = decision.get("usage") if decision else None
        if usage:
            used: int | None = int(usage.get("input_tokens") or 0) + int(
                usage.get("output_tokens") or 0)
        else:  # answered without usage: keep the estimate; refused or failed: none used
            used = None if decision and decision.get("status") == 200 else 0
        if hold is not None:
            allowance.settle(hold, used)
        provider = config.providers.get(decision.get("provider") or "") if decision else None
        if used and provider is not None and provider.tpm_limit is not None:
            pacing.count(provider.name, None, provider.tpm_limit, clock.now(), tokens=used)

    call.settle = settle
    return hold


def plan_only(gw: RequestServices, call: Call) -> Plan:
    """Plan ``call`` as a real request, making no random draws (as explain does, so
    counting never moves a seeded route's sequence) and executing nothing."""
    call.ts = gw.clock.now()
    call.facts = facts_for(call)
    call.plan = make_plan(call.facts, gw.state.snapshot(call.ts), call.config, call.ts, gw.rng,
                          policy=gw.policy, route_rngs=gw.route_rngs, explore=False)
    return call.plan


async def count_tokens(gw: RequestServices, call: Call) -> int | None:
    """The serving upstream's own count of ``call``'s prompt, or None: when the
    request would be refused, its first endpoint cannot count (only Anthropic
    upstreams can) or the count failed (``executor/count.py``)."""
    native = _native(call)
    if native is None:
        return None
    try:
        plan = plan_only(gw, call)
    except HumpyardError:
        return None
    return await count_upstream(gw.executor, plan, call.config, native)


NATIVE_PROTOCOLS = {"anthropic": "anthropic", "bedrock": "anthropic"}
"""Client protocols an upstream may speak too, so the client's body can go through: the
client protocol → the protocol its (prepared) body is in. A Bedrock InvokeModel client's
body is an Anthropic Messages body once its intake has prepared it (http/bedrock.py)."""


def _native(call: Call) -> Native | None:
    """The client's own request, for an upstream speaking its protocol (docs/clients.md)."""
    native = NATIVE_PROTOCOLS.get(call.protocol)
    if native is not None and isinstance(call.original, dict):
        return Native(native, call.original, call.headers)
    return None


def _wants_usage(body: Mapping[str, Any]) -> bool:
    opts = body.get("stream_options")
    return bool(isinstance(opts, dict) and opts.get("include_usage"))

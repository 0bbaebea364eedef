"""Serving a ``stage_router`` / ``llm_classifier`` route through the Switchyard adapter.

The adapter decides between the efficient and capable tiers (making judge
calls when the algorithm asks); every upstream call it needs goes through
the gateway's own executor, so health, readiness, failover and the ledger
apply to judge calls too. Its attempts are recorded on the request's
decision with ``purpose``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

from humpyard.config.spec import Config
from humpyard.errors import NoEligibleTarget
from humpyard.executor.walk import Executor
from humpyard.planning.types import Plan
from humpyard.protocols.openai import completion_to_chunks
from humpyard.protocols.sse import DONE, SSEEvent, encode
from humpyard.records import Attempt, Native, Served


def _subplan(plan: Plan, names: tuple[str, ...]) -> Plan:
    by_name = {t.name: t for t in plan.targets}
    targets = tuple(by_name[n] for n in names if n in by_name)
    if not targets:
        raise NoEligibleTarget(f"route {plan.route!r} has no eligible target left")
    return replace(plan, targets=targets)


async def _as_events(completion: dict[str, Any]) -> AsyncIterator[list[SSEEvent]]:
    batch = []
    for chunk in completion_to_chunks(completion):
        data = json.dumps(chunk, separators=(",", ":"))
        batch.append(SSEEvent(data=data, wire=encode(data)))
    batch.append(SSEEvent(data="[DONE]", wire=DONE))
    yield batch


async def run_tiered(router: Any, executor: Executor, plan: Plan, config: Config,
                     body: dict[str, Any], headers: Mapping[str, str], session_id: str | None,
                     *, stream: bool, wanted_usage: bool, native: Native | None = None,
                     attempts: list[Attempt] | None = None) -> Served:
    """Let Switchyard pick the tier, then serve: its answer, or the selected targets.

    The tiers' own calls (judges, the efficient try) send the chat body; only
    the final walk over the selected targets may send ``native``. Every attempt
    is appended to ``attempts`` (when given) as it is made, however this ends."""
    attempts = [] if attempts is None else attempts
    answered: list[Served] = []

    async def call_target(targets: tuple[str, ...], call_body: dict, *, purpose: str) -> dict:
        sub = _subplan(plan, targets)
        call_body = {**call_body, "model": call_body.get("model") or targets[0]}
        call_body.pop("stream", None)
        call_body.pop("stream_options", None)
        made: list[Attempt] = []
        try:
            served = await executor.run(sub, config, call_body, stream=False, attempts=made)
        finally:  # answered, failed or cancelled: the attempts are the request's
            attempts.extend(_tagged(made, purpose))
        answered.append(served)
        assert served.body is not None
        return served.body

    route = config.routes[plan.route]
    outcome = await router.route(route, plan.tiers, body, headers, session_id, call_target)
    if outcome.response is not None and answered:
        served = replace(answered[-1], attempts=attempts, body=outcome.response, body_bytes=None)
        if stream:
            served.events = _as_events(outcome.response)
            served.body = None
        return served
    final = await executor.run(_subplan(plan, outcome.selected), config, body,
                               stream=stream, wanted_usage=wanted_usage, native=native,
                               attempts=attempts)
    return final  # its attempts (and a failure's) are ``attempts``, the tiers' first


def _tagged(items: list[Attempt], purpose: str) -> list[Attempt]:
    for a in items:
        a.purpose = purpose
    return items

"""Counting a prompt's tokens at the upstream that would serve it.

``POST /v1/messages/count_tokens`` is answered by the provider itself when
the request's plan (made as for a real request, without random draws) puts
an endpoint first whose protocol can count (Anthropic Messages:
``{base_url}/messages/count_tokens``; Bedrock: CountTokens for a Claude model).
Anything else — another protocol, a
failed or slow call, an answer without a count — gives None and the caller
answers with the gateway's own estimate (docs/clients.md, "Anthropic
upstreams"). A count is side traffic: it is not recorded as a decision and
never moves an endpoint's health.
"""

from __future__ import annotations

import asyncio
import json
import logging

from humpyard.config.spec import Config
from humpyard.executor.walk import ERROR_BODY_LIMIT, Executor
from humpyard.planning.types import Plan
from humpyard.records import Native
from humpyard.redact import redact
from humpyard.upstream.errors import TransportFailure

log = logging.getLogger("humpyard.executor")

COUNT_TIMEOUT_SECS = 10.0
"""The longest a count may take (less when the provider's ``timeout_secs`` is shorter)."""


async def count_upstream(ex: Executor, plan: Plan, config: Config, native: Native) -> int | None:
    """The first planned endpoint's own count of ``native``'s prompt, or None."""
    if not plan.targets:
        return None
    order = ex.admission.endpoint_order(plan.targets[0], [])
    if not order:
        return None
    ep = order[0]
    provider = config.providers[ep.provider]
    proto = ex.upstreams[provider.protocol]
    req = proto.prepare_count(native, ep, provider)
    path = None if req is None else req.path or proto.count_path
    if req is None or path is None:
        return None
    try:
        async with asyncio.timeout(min(provider.timeout_secs, COUNT_TIMEOUT_SECS)):
            resp = await ex.client.open(provider, path, req.payload,
                                        extra_headers=req.headers)
            try:
                raw = await resp.read(ERROR_BODY_LIMIT)
            finally:
                await resp.aclose()
    except TimeoutError:
        log.info("token count at %s timed out; answering the estimate", ep.key)
        return None
    except TransportFailure as e:
        log.info("token count at %s failed (%s); answering the estimate", ep.key,
                 redact(e.message, ex.client.secrets_for(provider)))
        return None
    if resp.status != 200:
        log.info("token count at %s answered %d; answering the estimate", ep.key, resp.status)
        return None
    try:
        data = json.loads(raw)
        tokens = data.get("input_tokens", data.get("inputTokens"))  # Bedrock: inputTokens
    except (ValueError, AttributeError):
        tokens = None
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        log.info("token count at %s gave no input_tokens; answering the estimate", ep.key)
        return None
    return tokens

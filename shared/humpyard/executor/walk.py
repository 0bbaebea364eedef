"""The executor: walks a ``Plan`` and returns the first answer, or the last error.

Order of work for one request::

    for each planned target (members, then the guarded tail):
        crossing into it is allowed only if the previous failure's class is in
        fallback_on (or the tail's ``on`` when entering the tail)
        for each endpoint (warm first; cold ones only when the target is cold):
            readiness: an unready endpoint is skipped, costing nothing
            admission: one probe per cooldown end (``executor/admission.py``)
            1 + max_retries attempts; each failure is classified and recorded
    when the last failure never reached the wire, re-dial it on the ladder
    within the provider's connect_retry_window_secs (see ``Executor._resend``)

A failure of class ``request`` (400, 422, …) stops everything at once. So does a
cancellation (the client left: ``http/reply.ClientWatch``): the attempt in flight
is marked ``cancelled``, its connection closed and its slot freed, the endpoint's
breaker is not told, and no further attempt starts.

How an attempt is spoken (the body sent, the answer read, the stream held
back, the error classified) is the provider's upstream protocol's
(``executor/upstreams.py``); the walk is the same for every protocol.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from humpyard.clock import Clock
from humpyard.config.spec import Config, EndpointSpec, ProviderSpec
from humpyard.errors import UpstreamError
from humpyard.executor.admission import LEASE, Admission, Place, planned_attempt
from humpyard.executor.upstreams import UpstreamProtocol, upstream_protocols
from humpyard.health.breaker import clamp_retry_after
from humpyard.health.pacing import Pacing
from humpyard.health.retry_after import parse_retry_after
from humpyard.planning.types import Plan, PlannedTarget
from humpyard.records import Attempt, Native, Served
from humpyard.redact import redact
from humpyard.upstream.classify import (
    BODY_HEAD_BYTES,
    Classification,
    FailureClass,
    classify_failure,
    classify_status,
)
from humpyard.upstream.client import UpstreamClient
from humpyard.upstream.errors import ConnectFailure, ReadTimeout, TransportFailure
from humpyard.upstream.resend import redials
from humpyard.upstream.response import UpstreamResponse

log = logging.getLogger("humpyard.executor")
routability_log = logging.getLogger("humpyard.routability")

RETRYABLE = frozenset({FailureClass.RATE_LIMIT, FailureClass.TIMEOUT,
                       FailureClass.SERVER_ERROR, FailureClass.CONNECTION})
ERROR_BODY_LIMIT = 64 * 1024
NOT_AN_ANSWER = "upstream answered 200 with a body that is not {}"
NOT_A_STREAM = "upstream answered 200 with a JSON body, not the event stream asked for"


@dataclass
class Failure:
    """The last failure seen, carried to the client when nothing answers."""

    status: int
    message: str
    failure_class: str
    never_delivered: bool = False
    retry_after: float | None = None
    started: float = 0.0  # clock.monotonic() when the failed call began


class Executor:
    """Holds the per-process pieces an attempt needs; ``run`` walks one plan."""

    def __init__(self, client: UpstreamClient, health: Any, readiness: Any, clock: Clock,
                 rng: random.Random, on_latency: Callable[[str, float], None] | None = None,
                 on_event: Callable[..., None] | None = None):
        self.client = client
        self.health = health
        self.readiness = readiness
        self.clock = clock
        self.rng = rng
        self.on_latency = on_latency or (lambda target, ms: None)
        self.on_event = on_event or (lambda *a, **k: None)
        self.upstreams = upstream_protocols(clock)
        self.admission = Admission(health, clock)
        self.pacing: Pacing | None = None  # provider pacing (health/pacing.py), if kept

    async def run(self, plan: Plan, config: Config, body: dict[str, Any], *,
                  stream: bool, wanted_usage: bool = True,
                  native: Native | None = None,
                  attempts: list[Attempt] | None = None) -> Served:
        """Serve ``body`` from the plan's targets; raise ``UpstreamError`` if none answer.

        ``body`` is the OpenAI chat request; its ``model`` is replaced per
        endpoint. ``native`` is the client's own request, sent instead to an
        upstream that speaks the client's protocol. The raised error carries
        ``attempts`` for the ledger; ``attempts``, when given, is the list they
        are appended to as they are made (so a cancelled walk leaves them too).
        """
        attempts = [] if attempts is None else attempts
        last: Failure | None = None
        last_ep: tuple[PlannedTarget, EndpointSpec] | None = None
        prev: PlannedTarget | None = None
        for ti, target in enumerate(plan.targets):
            if last is not None and prev is not None:
                gate = plan.tail_on if (target.tail and not prev.tail) else plan.fallback_on
                if last.failure_class not in gate:
                    break
            prev = target
            order = self.admission.endpoint_order(target, attempts)
            for i, ep in enumerate(order):
                provider = config.providers[ep.provider]
                if not await self.readiness.is_ready(provider.name, provider.base_url,
                                                     provider.health_path):
                    attempts.append(planned_attempt(target, ep, skipped="skipped_unavailable"))
                    continue
                place = Place(plan, ti, order, i, last.failure_class if last else None)
                answer = self.admission.admit(ep, target, place)
                admitted = (await self.admission.lease(ep, target, place)
                            if answer == LEASE else answer)
                if admitted is None:
                    attempts.append(planned_attempt(target, ep,
                                                   skipped=self.admission.skip_reason(ep)))
                    continue
                for _ in range(1 + provider.max_retries):
                    try:
                        result = await self._attempt(target, ep, provider, body, stream, native,
                                                     attempts, wanted_usage, probe=admitted)
                    except BaseException:
                        if admitted:  # cancelled mid-probe: let the next request probe
                            self.health.release_probe(ep.key, self.clock.now())
                        raise
                    admitted = False  # the lease is settled by the first attempt
                    if isinstance(result, Served):
                        return result
                    last, last_ep, cls = result
                    if cls.failure_class == FailureClass.REQUEST or not cls.next_endpoint:
                        if cls.failure_class == FailureClass.REQUEST:
                            raise self._error(last, attempts)
                        break
                    if cls.failure_class not in RETRYABLE or attempts[-1].retry_after_ms:
                        break
                if last is not None and last.failure_class == FailureClass.REQUEST:
                    break
        if last is not None and last.never_delivered and last_ep is not None:
            served = await self._resend(last_ep, config, body, stream, native, attempts,
                                        wanted_usage, last)
            if isinstance(served, Served):
                return served
            last = served
        if last is None:
            last = Failure(503, "no endpoint of the route could be tried", "unavailable")
        raise self._error(last, attempts)

    async def _attempt(self, target: PlannedTarget, ep: EndpointSpec, provider: ProviderSpec,
                       body: dict[str, Any], stream: bool, native: Native | None,
                       attempts: list[Attempt], wanted_usage: bool, *, probe: bool = False,
                       connect_timeout: float | None = None,
                       ) -> Served | tuple[Failure, tuple[PlannedTarget, EndpointSpec],
                                           Classification]:
        att = planned_attempt(target, ep)
        attempts.append(att)
        proto = self.upstreams[provider.protocol]
        req = proto.prepare(body, ep, provider, stream, native)
        att.notes = req.notes
        started = att.started = self.clock.monotonic()
        resp: UpstreamResponse | None = None
        try:
            async with asyncio.timeout(provider.timeout_secs):
                resp = await self.client.open(provider, req.path or proto.path, req.payload,
                                              extra_headers=req.headers,
                                              connect_timeout=connect_timeout, stream=stream)
                att.status = resp.status
                if self.pacing is not None:  # what the upstream says is left of its limits
                    self._pace(provider, ep, resp.headers)
                if resp.status == 200:
                    served = await self._answer(resp, target, ep, provider, stream, att,
                                                attempts, started, wanted_usage, proto,
                                                req.native)
                    if isinstance(served, Served):
                        if stream:
                            resp = None  # the relayed stream owns it now
                        return served
                    failure, cls = served
                else:
                    raw = await resp.read(ERROR_BODY_LIMIT)
                    failure, cls = self._http_failure(resp, raw, ep, proto)
        except asyncio.CancelledError:
            # The request was cancelled (its client left): the attempt is recorded as
            # cancelled, never as a failure (it says nothing about the endpoint), and
            # the walk ends here; ``finally`` closes the connection, freeing its slot.
            att.cancelled = True
            att.latency_ms = (self.clock.monotonic() - started) * 1000
            raise
        except TimeoutError:  # the whole call's bound (timeout_secs), however it was spent
            failure, cls = self._transport_failure(
                ReadTimeout(f"timeout after {provider.timeout_secs:g}s {_addr(provider)}"), ep)
        except TransportFailure as tf:
            failure, cls = self._transport_failure(tf, ep)
        finally:
            if resp is not None:
                await resp.aclose()
        att.latency_ms = (self.clock.monotonic() - started) * 1000
        failure.started = started
        att.failure_class = str(cls.failure_class)
        # Upstreams may quote the request's Authorization header in their errors.
        failure.message = redact(failure.message, self.client.secrets_for(provider))
        att.error = failure.message
        if failure.retry_after is not None:  # as honoured: the cooldown it sets (health/)
            att.retry_after_ms = round(
                clamp_retry_after(failure.retry_after, self.health.settings) * 1000)
            att.stated_retry_after_ms = round(failure.retry_after * 1000)
        if cls.counts_for_health:
            self.health.record_failure(ep.key, self.clock.now(), failure.retry_after)
        elif probe:  # an answer that says nothing about the endpoint: the next request probes
            self.health.release_probe(ep.key, self.clock.now())
        return failure, (target, ep), cls

    async def _answer(self, resp: UpstreamResponse, target: PlannedTarget, ep: EndpointSpec,
                      provider: ProviderSpec, stream: bool, att: Attempt,
                      attempts: list[Attempt], started: float, wanted_usage: bool,
                      proto: UpstreamProtocol,
                      native: bool) -> Served | tuple[Failure, Classification]:
        if stream and _is_json(resp):
            # A JSON body where an event stream was asked for: an error object
            # (or a buffered answer the client cannot take); either way, fail over.
            raw = await resp.read(ERROR_BODY_LIMIT)
            msg = _error_message(raw, json_only=True) or NOT_A_STREAM
            cls = classify_status(502, b"")
            return Failure(502, msg, str(cls.failure_class)), cls
        relayed = proto.relayed if native else None
        if stream:
            head = await proto.hold_back(resp, native=native, wanted_usage=wanted_usage,
                                         secrets=self.client.secrets_for(provider),
                                         model=ep.model, claude=ep.claude,
                                         limits=provider.limits)
            if head.error is not None:
                cls = head.classification or classify_status(502, b"")
                return Failure(head.status, head.error, str(cls.failure_class)), cls
            ms = (self.clock.monotonic() - started) * 1000
            att.latency_ms = ms
            self._success(target, ep, ms)
            return Served(target=target.name, endpoint=ep, status=200, attempts=attempts,
                          events=head.events, upstream_ms=ms, usage=head.usage,
                          closer=resp.aclose, native=relayed)
        raw = await resp.read(max_bytes=provider.limits.max_response_bytes)
        answer = proto.read(raw, native)
        if answer is None:
            msg = _error_message(raw, json_only=True) or NOT_AN_ANSWER.format(proto.answer)
            cls = classify_status(502, b"")
            return Failure(502, msg, str(cls.failure_class)), cls
        ms = (self.clock.monotonic() - started) * 1000
        att.latency_ms = ms
        self._success(target, ep, ms)
        return Served(target=target.name, endpoint=ep, status=200, attempts=attempts,
                      body=answer.body, body_bytes=answer.body_bytes, upstream_ms=ms,
                      usage=answer.usage, native=relayed)

    def _pace(self, provider: ProviderSpec, ep: EndpointSpec, headers: Any) -> None:
        assert self.pacing is not None
        now = self.clock.now()
        self.pacing.observe(ep.key, headers, now)
        if provider.rpm_limit is not None:
            self.pacing.count(provider.name, provider.rpm_limit, None, now, requests=1)

    def _success(self, target: PlannedTarget, ep: EndpointSpec, ms: float) -> None:
        self.health.record_success(ep.key, self.clock.now())
        self.on_latency(target.name, ms)

    def _http_failure(self, resp: UpstreamResponse, raw: bytes, ep: EndpointSpec,
                      proto: UpstreamProtocol) -> tuple[Failure, Classification]:
        head = raw[:BODY_HEAD_BYTES]
        cls = proto.classify(resp.status, head, resp.headers)
        msg = _error_message(raw) or f"upstream answered {resp.status}"
        failure = Failure(resp.status, msg, str(cls.failure_class))
        if resp.status in (429, 503):
            ra = parse_retry_after(resp.status, resp.headers, head, self.clock.now())
            if ra is not None:
                failure.retry_after = ra
                self.on_event("retry_after_honored", endpoint=ep.key)
        return failure, cls

    def _transport_failure(self, tf: TransportFailure,
                           ep: EndpointSpec) -> tuple[Failure, Classification]:
        """A call without an HTTP answer: its class says the status (502, 503 for a
        concurrency limit, 504 for a timeout) and whether a re-dial is free; only a
        connection never made is re-dialled (a slot timeout would only wait again)."""
        cls = classify_failure(tf)
        return Failure(tf.status, tf.message, str(cls.failure_class),
                       never_delivered=isinstance(tf, ConnectFailure)), cls

    async def _resend(self, where: tuple[PlannedTarget, EndpointSpec], config: Config,
                      body: dict[str, Any], stream: bool, native: Native | None,
                      attempts: list[Attempt], wanted_usage: bool,
                      last: Failure) -> Served | Failure:
        """Re-dial a never-delivered endpoint inside ``connect_retry_window_secs``.

        The window runs from the start of the failed dial, dials included
        (``upstream/resend.py``): the last dial's connect timeout is cut to
        what is left. When a re-dial happened, one ``humpyard.routability``
        line reports the dials made and the time since that first dial.
        """
        target, ep = where
        provider = config.providers[ep.provider]
        if provider.connect_retry_window_secs <= 0:
            return last
        first = last.started
        tries = 0
        result: Served | Failure = last
        for redial in redials(provider.connect_retry_window_secs, first, self.clock.monotonic,
                              self.rng, provider.connect_timeout_secs):
            await self.clock.sleep(redial.sleep)
            tries += 1
            out = await self._attempt(target, ep, provider, body, stream, native, attempts,
                                      wanted_usage, connect_timeout=redial.connect_timeout)
            attempts[-1].resend = True
            if isinstance(out, Served):
                result = out
                break
            result = out[0]
            if not result.never_delivered:
                break
        if tries:
            ms = (self.clock.monotonic() - first) * 1000
            last_msg = "ok" if isinstance(result, Served) else result.message
            routability_log.info("humpyard.routability endpoint=%s attempts=%d ms=%d last=%s",
                                 ep.key, tries + 1, ms, last_msg)
            self.on_event("routability_resend", endpoint=ep.key, attempts=tries + 1, ms=ms)
        return result

    @staticmethod
    def _error(last: Failure, attempts: list[Attempt]) -> UpstreamError:
        err = UpstreamError(last.message, status=last.status,
                            code="upstream_error", failure_class=last.failure_class)
        err.retry_after = last.retry_after
        err.attempts = attempts  # type: ignore[attr-defined]
        return err


def _addr(provider: ProviderSpec) -> str:
    return provider.base_url.split("://", 1)[-1].split("/", 1)[0]


def _is_json(resp: UpstreamResponse) -> bool:
    return resp.headers.get("content-type", "").split(";")[0].strip().lower() \
        == "application/json"


def _error_message(raw: bytes, *, json_only: bool = False) -> str | None:
    """The upstream's own error message, if its body has one. A body that is not
    JSON is the message itself, unless ``json_only`` (a 200: never echo it)."""
    try:
        data = json.loads(raw)
    except ValueError:
        if json_only:
            return None
        text = raw[:500].decode("utf-8", errors="replace").strip()
        return text or None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
        if isinstance(data.get("message"), str):
            return data["message"]
    return None

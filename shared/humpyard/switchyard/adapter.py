"""The adapter between the gateway and Switchyard's routing algorithms.

Switchyard's algorithms are sans-I/O: ``Algorithm.run_stream`` yields
``Step.CallModel`` ("call one of these models with this request") until it
yields ``Step.Done`` with a ``RoutingOutcome``. ``TieredRouter.route``
converts the client's OpenAI chat body to Switchyard's neutral request, maps
the planner's tiers to categories, serves every ``CallModel`` (judge calls
included) through the gateway's ``call_target`` — so failover, health,
readiness and the ledger apply to them — and returns a ``TieredOutcome``:
Switchyard's ``outcome.response`` when it has one, else the targets of
``selected_model_ids`` for the gateway to walk (streamed or buffered).

What each algorithm calls from inside ``route`` (nemo-switchyard 0.3.0):

- ``stage_router``: nothing (one judge call when the route names a ``judge``
  and the tool signals are inconclusive), then ``selected``;
- ``llm_classifier`` capability: one judge call, then ``selected``;
- ``llm_classifier`` escalation, latched session: nothing, ``selected`` is
  the capable tier;
- ``llm_classifier`` escalation, not latched: the efficient answer
  (buffered), then one judge call rating it; then ``response`` (that
  answer) or, when the verdict latches the session, ``selected``.

So only an unlatched escalation turn answers from inside ``route``: the
judge rates the efficient model's finished reply, which must therefore be
complete (buffered) before anyone sees it. A streaming client then gets
that reply in one piece. When the verdict latches the session, the reply is
discarded and ``selected`` names the capable tier, which streams normally.

Session state lives in the algorithm objects this router holds: per
process, so per Lambda instance in AWS, and bounded (``generations.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from humpyard.config.spec import RouteSpec
from humpyard.errors import NoEligibleTarget, UpstreamError
from humpyard.switchyard import native
from humpyard.switchyard.categories import ANSWERING, Categories, decode, targets
from humpyard.switchyard.generations import SESSIONS_KEPT, Generations
from humpyard.switchyard.neutral import (
    completion_to_neutral,
    neutral_to_completion,
    neutral_to_request,
    request_to_neutral,
)

log = logging.getLogger("humpyard.switchyard")

SESSION_HEADER = "x-switchyard-session-id"
SESSION_FINAL_HEADER = "x-switchyard-session-final"


class CallTarget(Protocol):
    """The gateway's upstream call: serve ``body`` from ``targets`` in order, buffered.

    Applies the gateway's failover, health, readiness and ledger; returns the
    OpenAI chat completion dict; raises ``UpstreamError`` when all fail.
    ``purpose`` is ``"judge"`` for a verdict and the tier name
    (``"efficient"``) for an answer Switchyard asks for while routing.
    """

    def __call__(self, targets: tuple[str, ...], body: dict[str, Any], *,
                 purpose: str) -> Awaitable[dict[str, Any]]: ...


@dataclass(slots=True)
class TieredOutcome:
    """What a tiered route decided.

    ``response``: an OpenAI chat completion already produced while routing
    (an unlatched escalation turn's efficient answer); serve it as is.
    Otherwise ``selected``: the targets to walk with the gateway's failover,
    the chosen tier first and then the other tier, as Switchyard orders them.
    ``category``: the tier that answers (``efficient`` or ``capable``).
    ``notes``: Switchyard's evidence and anything that failed open, for the
    decision record.
    """

    response: dict[str, Any] | None
    selected: tuple[str, ...]
    category: str
    notes: list[str] = field(default_factory=list)


class TieredRouter:
    """One per gateway process; holds Switchyard algorithm instances per route.

    The instances carry Switchyard's session state, so that state is per
    process (per Lambda instance in AWS), at most two generations of
    ``sessions_kept`` sessions per route (``generations.py``).
    """

    def __init__(self, *, sessions_kept: int = SESSIONS_KEPT) -> None:
        self.sessions_kept = sessions_kept
        self._algorithms: dict[str, tuple[native.AlgorithmSpec, Generations]] = {}

    def forget_routes(self, keep: set[str]) -> None:
        """Drop the algorithms (and session state) of every route not in ``keep``.

        Called on reload with the routes that survived unchanged. A kept
        route whose algorithm settings changed is rebuilt on its next request.
        """
        for name in [n for n in self._algorithms if n not in keep]:
            del self._algorithms[name]

    async def route(self, route: RouteSpec, tiers: Mapping[str, tuple[str, ...]],
                    body: dict[str, Any], headers: Mapping[str, str],
                    session_id: str | None, call_target: CallTarget) -> TieredOutcome:
        """Run the route's Switchyard algorithm for one request.

        ``tiers`` are the eligible targets per tier after the planner's policy
        (tier substitution applied); ``session_id`` is the gateway's resolved
        session. Raises ``NoEligibleTarget`` when no tier has a target, and
        ``UpstreamError`` when an answer Switchyard needed could not be had.
        """
        spec = native.AlgorithmSpec.from_route(route)
        cats = Categories.from_tiers(tiers, judge=spec.judge, configured_judge=route.judge)
        if cats.empty:
            raise NoEligibleTarget(f"route {route.name!r}: no eligible target")
        libsy = native.load()
        run = _Run(libsy, spec, cats, body, call_target, route.fallback_on)
        return await run.drive(self._algorithm(route.name, spec, libsy, session_id),
                               switchyard_headers(headers, session_id))

    def _algorithm(self, name: str, spec: native.AlgorithmSpec, libsy: Any,
                   session_id: str | None) -> Any:
        held = self._algorithms.get(name)
        if held is None or held[0] != spec:
            held = (spec, Generations(lambda: spec.build(libsy), self.sessions_kept))
            self._algorithms[name] = held
        return held[1].for_session(session_id)


def switchyard_headers(headers: Mapping[str, str], session_id: str | None) -> dict[str, str]:
    """The headers Switchyard sees: only the gateway's session, never the client's own.

    The gateway resolves the session with its own precedence and validation
    (docs/routing.md, "Sessions"), which differ from Switchyard's; credentials
    and the rest stay out of the engine.
    """
    if not session_id:
        return {}
    out = {SESSION_HEADER: session_id}
    final = next((v for k, v in headers.items() if k.lower() == SESSION_FINAL_HEADER), None)
    if final:
        out[SESSION_FINAL_HEADER] = final
    return out


class _Run:
    """One ``route`` call: drives the step stream and remembers what it served."""

    def __init__(self, libsy: Any, spec: native.AlgorithmSpec, cats: Categories,
                 body: dict[str, Any], call_target: CallTarget,
                 fallback_on: frozenset[str]) -> None:
        self.libsy, self.spec, self.cats = libsy, spec, cats
        self.body, self.call_target, self.fallback_on = body, call_target, fallback_on
        self.answers: dict[str, tuple[str, dict[str, Any]]] = {}
        self.answer_error: UpstreamError | None = None
        self.notes: list[str] = []

    async def drive(self, algorithm: Any, headers: dict[str, str]) -> TieredOutcome:
        step_type = self.libsy.Step.CallModel
        try:
            stream = algorithm.run_stream(request_to_neutral(self.body), self.cats.models(),
                                          headers=headers)
        except (self.libsy.LibsyError, ValueError) as exc:
            return self._failed(exc)
        while True:
            try:
                step = await anext(stream)
            except StopAsyncIteration:
                return self._failed(RuntimeError("the step stream ended without an outcome"))
            except (self.libsy.LibsyError, ValueError) as exc:
                return self._failed(exc)
            if isinstance(step, step_type):
                await self._serve(step.call)
            else:
                return self._finish(step.outcome)

    async def _serve(self, call: Any) -> None:
        ids = list(call.models)
        category = decode(ids[0])[0] if ids else ""
        purpose = category or "switchyard"
        if category == "judge":
            body = neutral_to_request(call.request)
        else:
            # No request rewriting is configured, so an answer is the client's body.
            body = {k: v for k, v in self.body.items() if k not in ("stream", "stream_options")}
        try:
            # Switchyard may name only the tier's first model; the rest are its failover.
            completion = await self.call_target(
                targets([*ids, *self.cats.tier(category)]), body, purpose=purpose)
        except UpstreamError as exc:
            self.notes.append(f"{purpose} call failed: {exc.message}")
            if category != "judge":  # kept without the traceback, whose frames hold this run
                self.answer_error = exc.with_traceback(None)
            call.fail(exc)
            return
        except BaseException as exc:
            call.fail(exc if isinstance(exc, Exception) else RuntimeError("request cancelled"))
            raise
        token = f"humpyard-answer-{len(self.answers)}"
        self.answers[token] = (category, completion)
        try:
            call.respond(self.libsy.LlmResponse.Agg(
                completion_to_neutral(completion, response_id=token)))
        except (TypeError, ValueError) as exc:
            self.notes.append(f"{purpose} answer unreadable by switchyard: {exc}")
            call.fail(exc)

    def _finish(self, outcome: Any) -> TieredOutcome:
        self._evidence(outcome)
        ids = [i for i in outcome.selected_model_ids if decode(i)[0] in ANSWERING]
        category = decode(ids[0])[0] if ids else self.spec.default_category
        selected = targets(ids) or self.cats.walk(category)
        answer = getattr(outcome.response, "response", None)
        if isinstance(answer, Mapping):
            kept = self.answers.get(str(answer.get("id")))
            if kept is not None:
                return TieredOutcome(kept[1], selected, kept[0], self.notes)
            completion = neutral_to_completion(answer, model=selected[0])
            return TieredOutcome(completion, selected, category, self.notes)
        return TieredOutcome(None, selected, category, self.notes)

    def _evidence(self, outcome: Any) -> None:
        meta = outcome.metadata
        if meta is None:
            return
        evidence = meta.evidence
        detail = (", ".join(f"{k}={v}" for k, v in evidence.items())
                  if isinstance(evidence, Mapping) else str(evidence or ""))
        self.notes.append(f"switchyard {meta.algorithm}: {detail}" if detail
                          else f"switchyard {meta.algorithm}")

    def _failed(self, exc: BaseException) -> TieredOutcome:
        """The run raised: an answer we could not get, or fail open to the default tier."""
        if self.answer_error is not None:
            err, self.answer_error = self.answer_error, None
            rest = tuple(t for t in self.cats.tier("capable") if t not in self.cats.efficient)
            if err.failure_class not in self.fallback_on or not rest:
                try:
                    raise err
                finally:  # neither this run nor this frame holds it once it is raised
                    del err
            self.notes.append("efficient tier failed; serving the capable tier")
            return TieredOutcome(None, rest, "capable", self.notes)
        category = self.spec.default_category
        log.warning("switchyard %s failed (%s); serving the %s tier",
                    self.spec.type, exc, category)
        self.notes.append(f"switchyard failed ({exc}); serving the {category} tier")
        return TieredOutcome(None, self.cats.walk(category), category, self.notes)

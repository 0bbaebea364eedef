"""``stage_router`` and ``llm_classifier`` routes through nemo-switchyard's real algorithms.

The adapter runs the installed Switchyard extension; only the gateway's
upstream call is replaced, by ``Upstream``, which records every call and
answers from a script. No HTTP at this level.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from humpyard.config.spec import RouteSpec
from humpyard.errors import NoEligibleTarget, UpstreamError
from humpyard.switchyard import native
from humpyard.switchyard.adapter import TieredOutcome, TieredRouter, _Run
from humpyard.switchyard.neutral import request_to_neutral

EASY = {"crux": "print a line", "primary_rule": "SUP-1",
        "capability_boundary": "supported", "p_solve": 0.9}
HARD = {"crux": "novel proof", "primary_rule": "LIM-1",
        "capability_boundary": "unsupported", "p_solve": 0.1}
ESCALATE = {"escalate": True, "reason": "the same error three times"}
CONTINUE = {"escalate": False, "reason": "tests are progressing"}

TIERS = {"efficient": ("cheap", "cheap-2"), "capable": ("deep",)}
JUDGED = {**TIERS, "judge": ("judge",)}


def completion(model: str, text: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-{model}", "object": "chat.completion", "created": 1,
            "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}


class Upstream:
    """A fake ``call_target``: records (targets, purpose, body) and answers from a script."""

    def __init__(self, verdicts: list[dict[str, Any]] | None = None,
                 fail: dict[str, UpstreamError] | None = None) -> None:
        self.verdicts = list(verdicts or [])
        self.fail = fail or {}
        self.calls: list[tuple[tuple[str, ...], str, dict[str, Any]]] = []
        self.answers: list[dict[str, Any]] = []

    async def __call__(self, targets: tuple[str, ...], body: dict[str, Any], *,
                       purpose: str) -> dict[str, Any]:
        self.calls.append((targets, purpose, body))
        if purpose in self.fail:
            raise self.fail[purpose]
        if purpose == "judge":
            return completion(targets[0], json.dumps(self.verdicts.pop(0)))
        answer = completion(targets[0], f"answer from {targets[0]}")
        self.answers.append(answer)
        return answer

    @property
    def purposes(self) -> list[str]:
        return [p for _, p, _ in self.calls]


def spec(type_: str, **kw: Any) -> RouteSpec:
    return RouteSpec(name=kw.pop("name", "auto"), type=type_, targets=(),
                     fallback_on=kw.pop("fallback_on", frozenset({"rate_limit"})),
                     efficient=("cheap", "cheap-2"), capable=("deep",), **kw)


def route(router: TieredRouter, r: RouteSpec, body: dict[str, Any], upstream: Upstream, *,
          session: str | None = None, tiers: dict[str, tuple[str, ...]] | None = None,
          headers: dict[str, str] | None = None) -> TieredOutcome:
    tiers = tiers or (JUDGED if r.type == "llm_classifier" else TIERS)
    return asyncio.run(router.route(r, tiers, body, headers or {}, session, upstream))


def chat(*messages: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    return {"model": "auto", "stream": stream, "messages": list(messages)}


USER = {"role": "user", "content": "make the tests pass"}
RUN_TESTS = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "bash", "arguments": '{"command": "python -m pytest"}'}}]}
CRASHED = {"role": "tool", "tool_call_id": "call_1",
           "content": "Traceback (most recent call last):\n  ...\nMemoryError"}
FOLLOW_UP = {"role": "user", "content": "and now the docs"}


# ------------------------------------------------------------------ stage_router


def test_stage_router_escalates_after_a_failing_tool_result_and_holds_the_session() -> None:
    router, up, r = TieredRouter(), Upstream(), spec("stage_router")

    calm = route(router, r, chat(USER), up, session="s1")
    assert (calm.category, calm.selected) == ("efficient", ("cheap", "cheap-2", "deep"))

    failing = route(router, r, chat(USER, RUN_TESTS, CRASHED), up, session="s1")
    assert failing.response is None
    assert (failing.category, failing.selected) == ("capable", ("deep", "cheap", "cheap-2"))
    assert failing.notes == ["switchyard stage_router: source=override"]

    # The next turns carry no tool failure; the session stays on capable a while.
    held = route(router, r, chat(FOLLOW_UP), up, session="s1")
    assert held.category == "capable" and "capable_hold" in held.notes[0]
    # The same turn in another session, or without one, is routine.
    assert route(router, r, chat(FOLLOW_UP), up, session="s2").category == "efficient"
    assert route(router, r, chat(FOLLOW_UP), up).category == "efficient"
    # The hold is two turns, then the default tier is back.
    assert route(router, r, chat(FOLLOW_UP), up, session="s1").category == "capable"
    assert route(router, r, chat(FOLLOW_UP), up, session="s1").category == "efficient"

    assert up.calls == []  # stage_router only selects: the gateway streams the answer


def test_capable_first_defaults_to_capable() -> None:
    out = route(TieredRouter(), spec("stage_router", mode="capable_first"), chat(USER),
                Upstream())
    assert (out.category, out.selected) == ("capable", ("deep", "cheap", "cheap-2"))


def test_tier_substitution_serves_capable_from_the_efficient_targets() -> None:
    tiers = {"efficient": ("cheap",), "capable": ("cheap",)}
    out = route(TieredRouter(), spec("stage_router"), chat(USER, RUN_TESTS, CRASHED),
                Upstream(), tiers=tiers)
    assert (out.category, out.selected) == ("capable", ("cheap",))


def test_a_stage_router_with_a_judge_asks_it_when_the_signals_are_unsure() -> None:
    up = Upstream([HARD])
    # The planner plans no judge tier for a stage_router: the configured judge is used.
    out = route(TieredRouter(), spec("stage_router", judge="judge", confidence_threshold=1.0),
                chat(USER), up, tiers=TIERS)
    assert up.purposes == ["judge"] and up.calls[0][0] == ("judge",)
    assert out.category == "capable"


# ---------------------------------------------------------- llm_classifier capability


def test_capability_judge_call_goes_through_call_target_as_a_judge() -> None:
    up = Upstream([HARD])
    out = route(TieredRouter(), spec("llm_classifier", judge="judge"), chat(USER, stream=True),
                up)
    [(targets, purpose, body)] = up.calls
    assert (targets, purpose) == (("judge",), "judge")
    assert body["stream"] is False and body["max_tokens"] == 4096
    assert body["response_format"]["json_schema"]["name"] == "CapabilityClassifierDecision"
    assert body["messages"][0]["role"] == "system"
    assert "make the tests pass" in json.dumps(body["messages"][1:])
    assert out.response is None
    assert (out.category, out.selected) == ("capable", ("deep", "cheap", "cheap-2"))
    assert "score=0.1" in out.notes[0]


def test_capability_keeps_an_easy_task_on_the_efficient_tier() -> None:
    out = route(TieredRouter(), spec("llm_classifier", judge="judge"), chat(USER),
                Upstream([EASY]))
    assert (out.category, out.selected) == ("efficient", ("cheap", "cheap-2", "deep"))


def test_capability_threshold_comes_from_confidence_threshold() -> None:
    lenient = spec("llm_classifier", judge="judge", confidence_threshold=0.05)
    assert route(TieredRouter(), lenient, chat(USER), Upstream([HARD])).category == "efficient"


def test_a_failed_judge_fails_open_to_capable() -> None:
    up = Upstream(fail={"judge": UpstreamError("judge down", status=502)})
    out = route(TieredRouter(), spec("llm_classifier", judge="judge"), chat(USER), up)
    assert out.category == "capable"
    assert out.notes[0] == "judge call failed: judge down"
    assert "fail_open" in out.notes[1]


def test_a_removed_judge_is_served_by_a_remaining_tier() -> None:
    up = Upstream([EASY])
    route(TieredRouter(), spec("llm_classifier", judge="judge"), chat(USER), up,
          tiers={**TIERS, "judge": ()})
    assert up.calls[0][:2] == (("cheap", "cheap-2"), "judge")


# --------------------------------------------------------- llm_classifier escalation


def test_escalation_latches_the_session_after_confirmations_verdicts() -> None:
    router = TieredRouter()
    r = spec("llm_classifier", judge="judge", mode="escalation", confirmations=2)
    up = Upstream([ESCALATE, ESCALATE])

    first = route(router, r, chat(USER, stream=True), up, session="s1")
    # Unlatched: the efficient answer is bought, judged, and served as is.
    assert up.purposes == ["efficient", "judge"]
    assert up.calls[0][0] == ("cheap", "cheap-2")
    assert "stream" not in up.calls[0][2]
    assert first.response is up.answers[0]
    assert first.category == "efficient"
    assert "verdict=pending" in first.notes[0]

    second = route(router, r, chat(USER), up, session="s1")
    assert up.purposes == ["efficient", "judge"] * 2
    assert second.response is None  # the efficient answer is discarded
    assert (second.category, second.selected) == ("capable", ("deep", "cheap", "cheap-2"))
    assert "verdict=escalate" in second.notes[0]

    latched = route(router, r, chat(FOLLOW_UP, stream=True), up, session="s1")
    assert len(up.calls) == 4  # no call at all: the gateway streams from capable
    assert (latched.response, latched.category) == (None, "capable")
    assert "verdict=latched" in latched.notes[0]

    other = route(router, r, chat(USER), Upstream([CONTINUE]), session="s2")
    assert other.category == "efficient"


def test_a_decline_resets_the_streak() -> None:
    router = TieredRouter()
    r = spec("llm_classifier", judge="judge", mode="escalation", confirmations=2)
    up = Upstream([ESCALATE, CONTINUE, ESCALATE])
    outs = [route(router, r, chat(USER), up, session="s1") for _ in range(3)]
    assert [o.category for o in outs] == ["efficient"] * 3


def test_without_a_session_escalation_never_latches() -> None:
    router = TieredRouter()
    r = spec("llm_classifier", judge="judge", mode="escalation")
    up = Upstream([ESCALATE] * 3)
    assert {route(router, r, chat(USER), up).category for _ in range(3)} == {"efficient"}


def test_one_confirmation_escalates_on_the_first_verdict() -> None:
    r = spec("llm_classifier", judge="judge", mode="escalation", confirmations=1)
    out = route(TieredRouter(), r, chat(USER), Upstream([ESCALATE]))
    assert (out.response, out.category) == (None, "capable")


def test_an_efficient_tier_failure_moves_to_capable_when_fallback_on_allows() -> None:
    r = spec("llm_classifier", judge="judge", mode="escalation")
    down = UpstreamError("slow down", status=429, failure_class="rate_limit")
    out = route(TieredRouter(), r, chat(USER), Upstream(fail={"efficient": down}))
    assert (out.response, out.selected, out.category) == (None, ("deep",), "capable")
    assert out.notes[-1] == "efficient tier failed; serving the capable tier"


def test_an_efficient_tier_failure_outside_fallback_on_is_the_clients_error() -> None:
    r = spec("llm_classifier", judge="judge", mode="escalation")
    bad = UpstreamError("key not allowed", status=403, failure_class="forbidden")
    with pytest.raises(UpstreamError) as raised:
        route(TieredRouter(), r, chat(USER), Upstream(fail={"efficient": bad}))
    assert raised.value is bad


def test_session_final_forgets_the_session() -> None:
    router = TieredRouter()
    r = spec("llm_classifier", judge="judge", mode="escalation", confirmations=1)
    route(router, r, chat(USER), Upstream([ESCALATE]), session="s1")
    final = {"x-switchyard-session-final": "true"}
    assert route(router, r, chat(USER), Upstream(), session="s1",
                 headers=final).category == "capable"
    assert route(router, r, chat(USER), Upstream([CONTINUE]),
                 session="s1").category == "efficient"


# ------------------------------------------------------------------ the router


def test_forget_routes_and_changed_settings_reset_session_state() -> None:
    router = TieredRouter()
    r = spec("llm_classifier", judge="judge", mode="escalation", confirmations=1)
    route(router, r, chat(USER), Upstream([ESCALATE]), session="s1")
    assert route(router, r, chat(USER), Upstream(), session="s1").category == "capable"

    router.forget_routes({"auto"})  # kept: state survives
    assert route(router, r, chat(USER), Upstream(), session="s1").category == "capable"

    router.forget_routes(set())
    assert route(router, r, chat(USER), Upstream([CONTINUE]),
                 session="s1").category == "efficient"

    route(router, r, chat(USER), Upstream([ESCALATE]), session="s1")
    changed = spec("llm_classifier", judge="judge", mode="escalation", confirmations=2)
    assert route(router, changed, chat(USER), Upstream([CONTINUE]),
                 session="s1").category == "efficient"


def test_routes_keep_separate_state() -> None:
    router = TieredRouter()
    a = spec("llm_classifier", judge="judge", mode="escalation", confirmations=1, name="a")
    b = spec("llm_classifier", judge="judge", mode="escalation", confirmations=1, name="b")
    route(router, a, chat(USER), Upstream([ESCALATE]), session="s1")
    assert route(router, b, chat(USER), Upstream([CONTINUE]),
                 session="s1").category == "efficient"


def test_no_eligible_target_is_refused_before_any_call() -> None:
    up = Upstream()
    with pytest.raises(NoEligibleTarget):
        route(TieredRouter(), spec("stage_router"), chat(USER), up,
              tiers={"efficient": (), "capable": ()})
    assert up.calls == []


def test_a_request_switchyard_cannot_read_is_served_by_the_default_tier() -> None:
    body = chat(USER)
    body["max_tokens"] = 2**70  # over u64; the gateway's validation refuses it earlier
    up = Upstream()
    out = route(TieredRouter(), spec("stage_router", mode="capable_first"), body, up)
    assert (out.category, out.selected) == ("capable", ("deep", "cheap", "cheap-2"))
    assert out.notes[0].startswith("switchyard failed (") and up.calls == []


def test_switchyard_reads_the_converted_request_unchanged() -> None:
    body = chat({"role": "system", "content": "agent"}, USER, RUN_TESTS, CRASHED,
                {"role": "user", "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]})
    body.update(tools=[{"type": "function", "function": {"name": "bash", "parameters": {}}}],
                tool_choice="auto", temperature=0.2, max_tokens=64)
    sent = request_to_neutral(body)
    libsy = native.load()
    algorithm = libsy.algorithms.stage_router(picker="efficient_first", confidence_threshold=0.5)

    async def outcome_request() -> dict[str, Any]:
        async for step in algorithm.run_stream(sent, {"efficient": ["e"], "capable": ["c"],
                                                      "any": ["e", "c"]}):
            return dict(step.outcome.request)
        raise AssertionError("no outcome")

    seen = asyncio.run(outcome_request())
    for key in ("instructions", "messages", "tools", "tool_choice", "sampling", "output",
                "reasoning", "stream"):
        assert seen[key] == sent[key], key


def test_the_process_exits_cleanly_after_using_switchyard() -> None:
    script = textwrap.dedent("""
        import asyncio, json
        from humpyard.config.spec import RouteSpec
        from humpyard.switchyard.adapter import TieredRouter

        async def call_target(targets, body, *, purpose):
            text = json.dumps({"escalate": True, "reason": "r"}) if purpose == "judge" else "x"
            return {"choices": [{"message": {"role": "assistant", "content": text}}]}

        async def main():
            router = TieredRouter()
            for kind, mode in (("stage_router", None), ("llm_classifier", "escalation")):
                r = RouteSpec(name=kind, type=kind, targets=(), fallback_on=frozenset(),
                              efficient=("e",), capable=("c",), judge="j", mode=mode)
                tiers = {"efficient": ("e",), "capable": ("c",), "judge": ("j",)}
                for _ in range(3):
                    await router.route(r, tiers, {"messages": [{"role": "user",
                                       "content": "hi"}]}, {}, "s", call_target)

        asyncio.run(main())
    """)
    shared = Path(native.__file__).parents[2]
    for _ in range(5):  # the exit race this guards against hit about one run in three
        done = subprocess.run([sys.executable, "-c", script], cwd=shared, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "Fatal Python error" not in done.stderr


def test_an_efficient_tier_failure_the_client_gets_leaves_no_cycles() -> None:
    """The tier's failure handed to the client is freed with the request, as the
    gateway's intake catches it: not held by the run or a frame that its traceback
    holds, which left both for the garbage collector."""
    r = spec("llm_classifier", judge="judge", mode="escalation")

    class Fresh(Upstream):  # a new failure per call, as a real upstream gives
        async def __call__(self, targets: tuple[str, ...], body: dict[str, Any], *,
                           purpose: str) -> dict[str, Any]:
            if purpose == "efficient":
                raise UpstreamError("key not allowed", status=403, failure_class="forbidden")
            return await super().__call__(targets, body, purpose=purpose)

    async def once() -> None:
        try:
            await TieredRouter().route(r, TIERS | {"judge": ("judge",)}, chat(USER), {}, None,
                                       Fresh())
        except UpstreamError:
            return
        raise AssertionError("the tier's failure was not the client's")

    async def run() -> collections.Counter[str]:
        await once()
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(3):
                await once()
            gc.collect()
            return collections.Counter(type(o).__name__ for o in gc.garbage
                                       if isinstance(o, UpstreamError | _Run))
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    left = asyncio.run(run())
    assert not left, f"left for the collector: {dict(left)}"


# ------------------------------------------------------------- session state bound


def test_a_latched_session_is_kept_for_a_generation_and_then_forgotten() -> None:
    """Switchyard keeps state for every session id it has seen, for ever (~650 bytes
    each: a gateway of coding agents, or one client inventing ids, grew without
    bound). A route's algorithm now keeps at most two generations of
    ``sessions_kept`` ids: a session seen in either keeps its state; once two newer
    generations have filled, it starts again."""
    router = TieredRouter(sessions_kept=3)
    r = spec("llm_classifier", judge="judge", mode="escalation", confirmations=1)
    up = Upstream([ESCALATE])
    assert route(router, r, chat(USER), up, session="s1").category == "capable"

    def latched() -> bool:
        out = route(router, r, chat(FOLLOW_UP), up, session="s1")
        return "verdict=latched" in out.notes[0]
    for i in range(2):  # the generation of s1 fills: s1, n0, n1
        route(router, r, chat(USER), Upstream([CONTINUE]), session=f"n{i}")
    assert latched()
    for i in range(2, 5):  # a newer generation fills: n2, n3, n4; s1 is in the older
        route(router, r, chat(USER), Upstream([CONTINUE]), session=f"n{i}")
    assert latched()
    route(router, r, chat(USER), Upstream([CONTINUE]), session="n5")  # a third begins
    up.verdicts.append(CONTINUE)
    out = route(router, r, chat(FOLLOW_UP), up, session="s1")
    assert "verdict=latched" not in out.notes[0] and out.category == "efficient"


def test_session_state_stays_bounded_under_new_session_ids() -> None:
    """20,000 requests, each with a session id never seen before (what a client that
    invents ids sends): the process grew ~13 MB (~650 bytes a session, for ever);
    with 500 ids a generation it stays within a few MB. (The bound is the same
    wrapper for every tiered route type; the latch test above shows it on
    ``llm_classifier``.)"""
    router = TieredRouter(sessions_kept=500)
    r = spec("stage_router")

    def rss_mb() -> float:
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 1e6

    async def run() -> float:
        up = Upstream()
        for i in range(2_000):  # more than the two generations the bound keeps
            await router.route(r, TIERS, chat(USER), {}, f"warm-{i}", up)
        before = rss_mb()
        for i in range(20_000):
            await router.route(r, TIERS, chat(USER), {}, f"session-{i:08d}-{'x' * 40}", up)
        return rss_mb() - before
    grew = asyncio.run(run())
    assert grew < 4, f"grew {grew:.1f} MB over 20,000 new sessions"

"""stage_router and llm_classifier routes through the real gateway and real sockets.

The judge's verdicts come from a fake upstream, so its calls go through the
gateway's own client: they show up in the decision's attempts with
``purpose``, and health applies to them like any other call.
"""

from __future__ import annotations

import json

import httpx

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.steps import ok

USER = {"role": "user", "content": "make the tests pass"}
RUN_TESTS = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "bash", "arguments": '{"command": "python -m pytest"}'}}]}
CRASHED = {"role": "tool", "tool_call_id": "call_1",
           "content": "Traceback (most recent call last):\n  ...\nMemoryError"}
HARD = {"crux": "novel proof", "primary_rule": "LIM-1",
        "capability_boundary": "unsupported", "p_solve": 0.1}


def cfg(eff: str, cap: str, judge: str, route: str) -> str:
    return f"""
[providers.e]
base_url = "{eff}"
[providers.c]
base_url = "{cap}"
[providers.j]
base_url = "{judge}"
[targets.cheap]
endpoints = [{{ provider = "e", model = "cheap-m" }}]
[targets.deep]
endpoints = [{{ provider = "c", model = "deep-m" }}]
[targets.judge]
endpoints = [{{ provider = "j", model = "judge-m" }}]
{route}
"""


def send(gw, messages: list, session: str, stream: bool = False) -> httpx.Response:
    with gw.client(**{"x-switchyard-session-id": session}) as c:
        return c.post("/v1/chat/completions",
                      json={"model": "auto", "messages": messages, "stream": stream})


def test_stage_router_escalates_on_a_failing_tool_result_and_holds_the_session():
    route = """
[routes.auto]
type = "stage_router"
efficient = ["cheap"]
capable = ["deep"]
"""
    with FakeUpstream() as e, FakeUpstream() as c, FakeUpstream() as j:
        with running_gateway(cfg(e.url, c.url, j.url, route)) as gw:
            assert send(gw, [USER], "s1").headers["x-humpyard-target"] == "cheap"
            r = send(gw, [USER, RUN_TESTS, CRASHED], "s1", stream=True)
            assert r.headers["x-humpyard-target"] == "deep"
            assert "data: [DONE]" in r.text
            follow = [{"role": "user", "content": "and now the docs"}]
            assert send(gw, follow, "s1").headers["x-humpyard-target"] == "deep"
            assert send(gw, follow, "other").headers["x-humpyard-target"] == "cheap"
            d = [x for x in gw.decisions() if x["session_id"] == "other"][0]
            assert d["route_type"] == "stage_router"
        assert j.requests == []


def test_llm_classifier_judge_call_goes_through_the_gateway():
    route = """
[routes.auto]
type = "llm_classifier"
mode = "capability"
efficient = ["cheap"]
capable = ["deep"]
judge = "judge"
"""
    with FakeUpstream() as e, FakeUpstream() as c, FakeUpstream() as j:
        j.script(ok(json.dumps(HARD)))
        with running_gateway(cfg(e.url, c.url, j.url, route)) as gw:
            r = send(gw, [USER], "s1")
            assert r.status_code == 200, r.text
            assert r.headers["x-humpyard-target"] == "deep"
            [judge_call] = j.requests_to("/v1/chat/completions")
            assert judge_call.json["model"] == "judge-m"
            d = gw.decisions()[0]
            purposes = [(a["target"], a.get("purpose")) for a in d["attempts"]]
            assert purposes == [("judge", "judge"), ("deep", None)]


def test_an_invalid_session_id_is_served_without_a_session():
    """An invalid id in the first session header does not fall through to the next one."""
    route = """
[routes.auto]
type = "stage_router"
efficient = ["cheap"]
capable = ["deep"]
"""
    with FakeUpstream() as e, FakeUpstream() as c, FakeUpstream() as j:
        with running_gateway(cfg(e.url, c.url, j.url, route)) as gw:
            # session s1 escalates and holds "deep"
            assert send(gw, [USER, RUN_TESTS, CRASHED], "s1").headers[
                "x-humpyard-target"] == "deep"
            follow = [{"role": "user", "content": "and now the docs"}]
            headers = {"x-switchyard-session-id": "not valid", "x-session-id": "s1"}
            with gw.client(**headers) as client:
                r = client.post("/v1/chat/completions",
                                json={"model": "auto", "messages": follow})
            assert r.status_code == 200
            assert r.headers["x-humpyard-target"] == "cheap"  # not s1's held tier
            assert gw.decisions(limit=1)[0]["session_id"] is None

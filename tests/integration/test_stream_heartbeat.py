"""A started stream whose upstream goes quiet gets SSE comment heartbeats, so an idle
timeout on the way (API Gateway's five minutes, a proxy's minute) never cuts a model
that is thinking (issue 17; ``stream_heartbeat_secs``)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.steps import stream_then_stall

MSG = [{"role": "user", "content": "hi"}]


def cfg(url: str, heartbeat: float) -> str:
    return f"""stream_heartbeat_secs = {heartbeat}
[providers.p]
base_url = "{url}"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
"""


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"model": "t", "messages": MSG, "stream": True}),
    ("/v1/messages", {"model": "t", "messages": MSG, "stream": True, "max_tokens": 64}),
])
def test_a_quiet_upstream_is_covered_by_comment_heartbeats(path, body):
    with FakeUpstream() as up, running_gateway(cfg(up.url, 0.2)) as gw:
        up.script(stream_then_stall(["partial "]))
        lines: list[str] = []
        deadline = time.monotonic() + 10
        with httpx.Client(timeout=10) as c, c.stream("POST", gw.url + path, json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                lines.append(line)
                if lines.count(": keep-alive") >= 3 or time.monotonic() > deadline:
                    break
    first_beat = lines.index(": keep-alive")
    assert any("partial" in line for line in lines[:first_beat])  # content came first
    assert lines.count(": keep-alive") >= 3


def test_no_heartbeat_when_switched_off():
    with FakeUpstream() as up, running_gateway(cfg(up.url, 0)) as gw:
        up.script(stream_then_stall(["partial "]))
        lines: list[str] = []
        body = {"model": "t", "messages": MSG, "stream": True}
        with httpx.Client(timeout=httpx.Timeout(10, read=1.0)) as c, \
                c.stream("POST", gw.url + "/v1/chat/completions", json=body) as r:
            with pytest.raises(httpx.ReadTimeout):
                for line in r.iter_lines():
                    lines.append(line)
    assert any("partial" in line for line in lines)
    assert ": keep-alive" not in lines

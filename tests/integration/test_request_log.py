"""One log line per request at the default level, failures too, with the rule (seed 002:
"the log line has both"); ``log_requests = false`` turns the successful ones off."""

from __future__ import annotations

import logging

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.steps import status

MSG = [{"role": "user", "content": "hi"}]


def cfg(url: str, extra: str = "") -> str:
    return f"""{extra}
[providers.p]
base_url = "{url}"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
[[select]]
name = "everything"
when = {{ model = "auto" }}
route = "t"
"""


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "humpyard.request"]


def test_every_request_logs_one_line_with_route_rule_target_status_and_time(caplog):
    caplog.set_level(logging.INFO)
    with FakeUpstream() as up, running_gateway(cfg(up.url)) as gw:
        up.script(status(500))  # the first request fails, the second is served
        with httpx.Client(base_url=gw.url, timeout=30) as c:
            codes = [c.post("/v1/chat/completions", json={"model": m, "messages": MSG})
                     .status_code for m in ("auto", "auto", "nope")]
        assert gw.gw.writer.flush(5)
    assert codes == [500, 200, 404]
    recs = lines(caplog)
    assert len(recs) == 3
    by_status = {r.getMessage().split("status=")[1].split()[0]: r for r in recs}
    good = by_status["200"].getMessage()
    assert by_status["200"].levelno == logging.INFO
    for part in ("request request_id=req_", "route=t", "rule=everything", "target=t",
                 "provider=p", "status=200", "ms=", "outcome=ok"):
        assert part in good, good
    bad = by_status["500"]
    assert bad.levelno == logging.WARNING
    assert "rule=everything" in bad.getMessage() and "route=t" in bad.getMessage()
    assert "outcome=failed" in bad.getMessage()
    refused = by_status["404"].getMessage()
    assert "route=-" in refused and "outcome=unknown_model" in refused


def test_log_requests_false_keeps_only_the_failures(caplog):
    caplog.set_level(logging.INFO)
    with FakeUpstream() as up, running_gateway(cfg(up.url, "log_requests = false")) as gw:
        up.script(status(500))
        with httpx.Client(base_url=gw.url, timeout=30) as c:
            codes = sorted(c.post("/v1/chat/completions",
                                  json={"model": "t", "messages": MSG}).status_code
                           for _ in range(2))
        assert gw.gw.writer.flush(5)
    assert codes == [200, 500]
    recs = lines(caplog)
    assert [r.levelno for r in recs] == [logging.WARNING]

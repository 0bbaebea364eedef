"""``connect_retry_window_secs`` bounds wall time, dials included (seed 004), on real sockets.

The upstream is a loopback port that silently drops connections (a full
accept queue): every dial waits out its connect timeout. With a 1 s connect
timeout and a 3 s window the client used to wait about 8 s, because only the
sleeps between dials were counted.
"""

from __future__ import annotations

import logging
import re
import time

import httpx

from tests.support.gateway import running_gateway
from tests.support.servers import silent_port

MSG = [{"role": "user", "content": "hi"}]
WINDOW = 3.0


def test_a_silent_host_costs_the_window_not_the_window_plus_every_dial(caplog):
    caplog.set_level(logging.INFO, logger="humpyard.routability")
    with silent_port() as port:
        text = f"""
[providers.dark]
base_url = "http://127.0.0.1:{port}/v1"
connect_timeout_secs = 1
connect_retry_window_secs = {WINDOW:g}
[targets.t]
endpoints = [{{ provider = "dark", model = "m" }}]
"""
        with running_gateway(text) as gw:
            started = time.monotonic()
            with httpx.Client(timeout=30) as c:
                r = c.post(gw.url + "/v1/chat/completions",
                           json={"model": "t", "messages": MSG})
            elapsed = time.monotonic() - started
            decision = gw.decisions(limit=1)[0]
    assert r.status_code == 504
    assert r.json()["error"]["message"] == f"connect timeout 127.0.0.1:{port}"
    # the first dial (1 s) plus re-dials end by the window's end; a loaded machine
    # may add scheduling delay, never another dial
    assert 2.0 < elapsed < WINDOW + 0.9
    dials = [a for a in decision["attempts"] if not a.get("skipped")]
    assert len(dials) >= 2 and all(a["failure_class"] == "timeout" for a in dials)
    assert [a.get("resend", False) for a in dials] == [False] + [True] * (len(dials) - 1)
    # the last dial was cut to what was left of the window
    assert dials[-1]["latency_ms"] < 1000
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "humpyard.routability"]
    assert len(lines) == 1
    m = re.fullmatch(r"humpyard\.routability endpoint=dark/m attempts=(\d+) ms=(\d+) "
                     r"last=connect timeout 127\.0\.0\.1:\d+", lines[0])
    assert m is not None, lines[0]
    assert int(m.group(1)) == len(dials)
    # the true elapsed time since the first dial, dials included
    ms = int(m.group(2))
    assert 2000 < ms <= elapsed * 1000
    assert ms >= sum(a["latency_ms"] for a in dials) - 5

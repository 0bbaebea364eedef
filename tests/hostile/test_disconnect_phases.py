"""A client that leaves before its answer has started is noticed at once, on every
client path: while a buffered call waits for the upstream, and during a
stream's hold-back. The upstream connection is closed within a moment (not at
``timeout_secs``), its concurrency slot freed, nothing more is attempted, the
decision says 499 ``client_closed`` with the cancelled attempt, and the
endpoint's breaker (which one counted failure would open) is not touched.
Real sockets throughout: a raw client that closes, an upstream that notes the
close."""

from __future__ import annotations

import time

import pytest

from humpyard.http.reply import WATCH_AFTER_SECS
from tests.hostile.disconnect_client import (
    ENV,
    PATHS,
    body_for,
    config,
    decisions,
    leave,
    post,
)
from tests.support.gateway import running_gateway
from tests.support.watched_upstream import (
    HOLD,
    WatchedUpstream,
    chat_event,
    done,
    sse_head,
)

NOTICED_WITHIN = 2.0  # seconds; the upstream's timeout_secs is 600


def _listening() -> None:
    """Let the request's watch begin to listen (``WATCH_AFTER_SECS`` after its body),
    so the client's leaving is heard as it happens, not found when the watch begins."""
    time.sleep(WATCH_AFTER_SECS * 4)


def _left_alone(gw, up: WatchedUpstream, phase: str) -> None:  # noqa: ANN001
    """What must hold after the client left in ``phase``."""
    [d] = decisions(gw)
    assert d["status"] == 499 and d["outcome"] == "client_closed", d
    [attempt] = d["attempts"]  # no retry (max_retries = 1), no failover to u, no re-send
    assert len(up.requests) == 1  # and the upstream saw no other call
    assert attempt["target"] == "t" and attempt["cancelled"] is True, attempt
    assert attempt["failure_class"] is None
    assert d["usage"] is None and d["cost_usd"] == 0  # nothing was relayed
    breaker = gw.gw.health.get("p/m")
    assert breaker.consecutive_failures == 0 and breaker.open_until == 0
    assert gw.gw.client.slots.in_flight("p") == 0
    assert gw.gw.metrics.client_disconnects.value(phase=phase) == 1
    assert gw.gw.metrics.upstream_attempts.value(target="t", provider="p",
                                                 outcome="cancelled") == 1
    # stats: the cancelled call is no failure of the target (nor a request of it)
    rows = gw.gw.store.stats("target", d["ts"] - 3600, d["ts"] + 3600)
    assert [r for r in rows if r["key"] == "t" and (r["requests"] or r["failures"])] == []
    [route] = gw.gw.store.stats("route", d["ts"] - 3600, d["ts"] + 3600)
    assert route["requests"] == 1 and route["failures"] == 0


@pytest.mark.parametrize("path", PATHS)
def test_leaving_while_a_buffered_call_waits_cancels_it(path: str, own_server: bool) -> None:
    with WatchedUpstream(lambda n, body: [HOLD]) as up, \
            running_gateway(config(up.url), env=ENV,
                            own_server=own_server) as gw:
        sock = post(gw, path, body_for(path, stream=False))
        up.wait_held(1)
        _listening()
        left = leave(sock)
        assert up.wait_closed(1, NOTICED_WITHIN + 3) - left < NOTICED_WITHIN
        _left_alone(gw, up, "waiting")


@pytest.mark.parametrize("path", PATHS)
def test_leaving_during_the_hold_back_cancels_the_stream(path: str, own_server: bool) -> None:
    # The upstream says 200 and sends a role chunk, but no content: the gateway
    # holds the stream back, the client has seen nothing yet.
    script = [sse_head(), chat_event({"role": "assistant", "content": ""}), HOLD]
    with WatchedUpstream(lambda n, body: script) as up, \
            running_gateway(config(up.url), env=ENV,
                            own_server=own_server) as gw:
        sock = post(gw, path, body_for(path, stream=True))
        up.wait_held(1)
        _listening()
        left = leave(sock)
        assert up.wait_closed(1, NOTICED_WITHIN + 3) - left < NOTICED_WITHIN
        _left_alone(gw, up, "hold_back")


def test_after_a_client_left_the_endpoint_serves_the_next_request_at_once(own_server: bool) -> None:
    # One counted failure would open the breaker (failure_threshold = 1): a client
    # leaving is not one, so the next request goes to the same endpoint, not cold.
    def script(n: int, body: object) -> list:
        if n == 0:
            return [HOLD]
        return [sse_head(), chat_event({"role": "assistant", "content": "back"}),
                chat_event({}, finish="stop"),
                chat_event(usage={"prompt_tokens": 5, "completion_tokens": 1,
                                  "total_tokens": 6}), done()]

    with WatchedUpstream(script) as up, running_gateway(config(up.url), env=ENV,
                            own_server=own_server) as gw:
        sock = post(gw, "/v1/chat/completions", body_for("/v1/chat/completions",
                                                         stream=False))
        up.wait_held(1)
        leave(sock)
        up.wait_closed(1, NOTICED_WITHIN + 3)
        with gw.client(authorization=f"Bearer {ENV['CLIENT_KEY']}") as c:
            r = c.post("/v1/chat/completions",
                       json=body_for("/v1/chat/completions", stream=True))
        assert r.status_code == 200 and "back" in r.text
        served, gone = sorted(decisions(gw, 2), key=lambda d: d["status"])
        assert served["status"] == 200 and served["outcome"] == "ok"
        assert [a.get("skipped") for a in served["attempts"]] == [None]
        assert gone["status"] == 499

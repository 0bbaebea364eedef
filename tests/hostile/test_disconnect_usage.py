"""Leaving early never streams for free: a client that leaves after the answer has
started is recorded as 499 with the tokens it was sent, estimated from the text
relayed (and the prompt estimate) when the upstream's usage never came, marked
``usage_estimated``, priced, and counted against its key's budget. Real
sockets: a raw client that closes mid-stream, an upstream that streams slowly
and notes when the gateway closes it."""

from __future__ import annotations

import math

import pytest

from humpyard.ledger.periods import period_key
from tests.hostile.disconnect_client import (
    ENV,
    PATHS,
    body_for,
    config,
    decisions,
    leave,
    post,
    read_until,
)
from tests.support.gateway import running_gateway
from tests.support.watched_upstream import (
    HOLD,
    WatchedUpstream,
    anthropic_event,
    chat_event,
    done,
    sse_head,
)

WORDS = [f"word{i} " for i in range(40)]


def slow_stream(n: int, body: object) -> list:
    """40 words a quarter second apart (ten seconds), the usage chunk last."""
    out: list = [sse_head(), chat_event({"role": "assistant", "content": ""})]
    for w in WORDS:
        out += [chat_event({"content": w}), 0.25]
    return out + [chat_event({}, finish="stop"),
                  chat_event(usage={"prompt_tokens": 900, "completion_tokens": 80,
                                    "total_tokens": 980}), done()]


def _charged(gw, d: dict, seen_text: str) -> None:  # noqa: ANN001 - a tests.support Running
    """The decision charges an estimate covering at least ``seen_text``, priced and
    counted against the key's budget."""
    assert d["usage_estimated"] is True
    usage = d["usage"]
    assert usage["input_tokens"] == d["prompt_tokens"] > 0  # the prompt estimate
    assert usage["output_tokens"] >= math.ceil(len(seen_text) / 3)
    expected = (usage["input_tokens"] * 3.0 + usage["output_tokens"] * 15.0) / 1e6
    assert d["cost_usd"] == pytest.approx(expected) and d["cost_usd"] > 0
    gw.gw.writer.flush(5)
    spent = gw.gw.store.get_spend("k", period_key("day", d["ts"]))
    assert spent == pytest.approx(d["cost_usd"])


@pytest.mark.parametrize("path", PATHS)
def test_leaving_mid_stream_is_499_with_estimated_usage_and_cost(
        path: str, own_server: bool) -> None:
    with WatchedUpstream(slow_stream) as up, running_gateway(config(up.url), env=ENV,
                            own_server=own_server) as gw:
        sock = post(gw, path, body_for(path, stream=True))
        read_until(sock, b"word2")
        left = leave(sock)
        assert up.wait_closed(1, 5) - left < 2  # not the rest of the ten seconds
        [d] = decisions(gw)
        assert d["status"] == 499 and d["outcome"] == "client_closed"
        assert d["target"] == "t" and d["provider"] == "p"
        [attempt] = d["attempts"]  # it answered: an ok attempt, not a cancelled one
        assert attempt["status"] == 200 and "cancelled" not in attempt
        _charged(gw, d, "word0 word1 word2 ")
        assert gw.gw.metrics.client_disconnects.value(phase="relaying") == 1
        breaker = gw.gw.health.get("p/m")
        assert breaker.consecutive_failures == 0 and breaker.open_until == 0


@pytest.mark.parametrize("path", PATHS)
def test_leaving_just_before_the_usage_chunk_still_costs(path: str, own_server: bool) -> None:
    # OpenAI sends usage last: a client gone after the last word but before it
    # used to be recorded at $0.
    text = [f"w{i} " for i in range(5)]

    def script(n: int, body: object) -> list:
        return [sse_head(), chat_event({"role": "assistant", "content": ""}),
                *(chat_event({"content": w}) for w in text),
                chat_event({}, finish="stop"), HOLD]  # the usage chunk never comes

    with WatchedUpstream(script) as up, running_gateway(config(up.url), env=ENV,
                            own_server=own_server) as gw:
        sock = post(gw, path, body_for(path, stream=True))
        read_until(sock, b"w4")
        up.wait_held(1)
        leave(sock)
        up.wait_closed(1, 5)
        [d] = decisions(gw)
        assert d["status"] == 499 and d["outcome"] == "client_closed"
        _charged(gw, d, "".join(text))


def test_a_stream_that_ends_without_usage_is_charged_an_estimate(own_server: bool) -> None:
    # An upstream that ignores stream_options.include_usage: the answer is complete
    # (200 ok) but would otherwise be free.
    def script(n: int, body: object) -> list:
        return [sse_head(), chat_event({"role": "assistant", "content": "a b c d e f"}),
                chat_event({}, finish="stop"), done()]

    with WatchedUpstream(script) as up, running_gateway(config(up.url), env=ENV,
                            own_server=own_server) as gw:
        with gw.client(authorization=f"Bearer {ENV['CLIENT_KEY']}") as c:
            r = c.post("/v1/chat/completions",
                       json=body_for("/v1/chat/completions", stream=True))
        assert r.status_code == 200 and "a b c" in r.text
        [d] = decisions(gw)
        assert d["status"] == 200 and d["outcome"] == "ok"
        _charged(gw, d, "a b c d e f")


def test_a_complete_stream_is_charged_the_upstreams_usage_not_an_estimate(own_server: bool) -> None:
    with WatchedUpstream(lambda n, body: slow_stream(n, body)[:2] + [
            chat_event({"content": "hi"}), chat_event({}, finish="stop"),
            chat_event(usage={"prompt_tokens": 900, "completion_tokens": 80,
                              "total_tokens": 980}), done()]) as up, \
            running_gateway(config(up.url), env=ENV,
                            own_server=own_server) as gw:
        with gw.client(authorization=f"Bearer {ENV['CLIENT_KEY']}") as c:
            r = c.post("/v1/chat/completions",
                       json=body_for("/v1/chat/completions", stream=True))
        assert r.status_code == 200
        [d] = decisions(gw)
        assert d["usage_estimated"] is False
        assert d["usage"]["input_tokens"] == 900 and d["usage"]["output_tokens"] == 80


def test_an_anthropic_upstreams_stated_prompt_is_kept_and_the_output_estimated(
        own_server: bool) -> None:
    # An Anthropic stream states its prompt's tokens first (message_start) and the
    # output's last (message_delta): a client gone between them is charged the
    # stated prompt and the relayed text's estimate.
    def script(n: int, body: object) -> list:
        out: list = [sse_head(), anthropic_event("message_start", {"message": {
            "id": "msg_w", "type": "message", "role": "assistant", "model": "m",
            "content": [], "stop_reason": None,
            "usage": {"input_tokens": 1234, "output_tokens": 1}}}),
            anthropic_event("content_block_start", {"index": 0, "content_block": {
                "type": "text", "text": ""}})]
        for w in WORDS:
            out += [anthropic_event("content_block_delta", {"index": 0, "delta": {
                "type": "text_delta", "text": w}}), 0.25]
        return out + [HOLD]

    with WatchedUpstream(script) as up, \
            running_gateway(config(up.url, protocol="anthropic"), env=ENV,
                            own_server=own_server) as gw:
        sock = post(gw, "/v1/messages", body_for("/v1/messages", stream=True))
        read_until(sock, b"word3")
        left = leave(sock)
        assert up.wait_closed(1, 5) - left < 2
        [d] = decisions(gw)
        assert d["status"] == 499 and d["usage_estimated"] is True
        assert d["usage"]["input_tokens"] == 1234  # the upstream's own count
        assert d["usage"]["output_tokens"] >= math.ceil(len("word0 word1 word2 word3 ") / 3)
        assert d["cost_usd"] > 0

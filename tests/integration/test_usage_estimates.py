"""An answer without the upstream's usage is charged an estimate, never more than its bound.

Two faults an outside run found with a $1 budget:

- A buffered answer whose upstream stated no usage cost $0: thirty priced
  requests of a key with a $0.05 budget were served and its spend stayed 0
  (streams were estimated; buffered answers were not). It is now charged the
  prompt estimate and its text's tokens, marked ``usage_estimated``.
- The estimate of a stream's output (its text bytes over 3) was not held to
  the request's ``max_tokens``: fifty 16-byte chunks of a ``max_tokens = 50``
  answer were charged 267 output tokens, past the worst case the request had
  reserved, and sixty concurrent ones spent $4.43 of $1.00. An estimate is now
  at most the output bound the worst case used (the upstream's own count, when
  it gives one, stands as it is).

Real sockets: an upstream that sends exactly the scripted bytes
(``WatchedUpstream``), the gateway over HTTP.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from humpyard.ledger.periods import period_key
from tests.hostile.disconnect_client import ENV, KEY, config, decisions
from tests.support.gateway import running_gateway
from tests.support.watched_upstream import (
    WatchedUpstream,
    buffered,
    chat_event,
    done,
    sse_head,
)

TEXT = "word " * 30  # 150 bytes: 50 tokens at the conservative 3 bytes a token


def _completion(text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}]}


def _ask(url: str, **extra: Any) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=30,
                      headers={"authorization": f"Bearer {KEY}"},
                      json={"model": "r", "messages": [{"role": "user", "content": "hi"}],
                            **extra})


def _spent(gw: Any, d: dict[str, Any]) -> float:
    gw.gw.writer.flush(5)
    return float(gw.gw.store.get_spend("k", period_key("day", d["ts"])))


def test_a_buffered_answer_without_usage_is_charged_an_estimate():
    with WatchedUpstream(lambda n, body: [buffered(_completion(TEXT))]) as up, \
            running_gateway(config(up.url), env=ENV) as gw:
        r = _ask(gw.url)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == TEXT
        (d,) = decisions(gw)
        spent = _spent(gw, d)
    assert d["usage_estimated"] is True
    assert d["usage"]["input_tokens"] == d["prompt_tokens"] > 0
    assert d["usage"]["output_tokens"] >= 50
    expected = (d["usage"]["input_tokens"] * 3.0 + d["usage"]["output_tokens"] * 15.0) / 1e6
    assert d["cost_usd"] == pytest.approx(expected) and d["cost_usd"] > 0
    assert spent == pytest.approx(d["cost_usd"])


def test_a_buffered_answer_with_its_usage_keeps_it():
    counted = {**_completion(TEXT), "usage": {"prompt_tokens": 7, "completion_tokens": 3,
                                              "total_tokens": 10}}
    with WatchedUpstream(lambda n, body: [buffered(counted)]) as up, \
            running_gateway(config(up.url), env=ENV) as gw:
        assert _ask(gw.url).status_code == 200
        (d,) = decisions(gw)
    assert d["usage_estimated"] is False
    assert (d["usage"]["input_tokens"], d["usage"]["output_tokens"]) == (7, 3)


def _chunks_without_usage(n: int, body: object) -> list[bytes]:
    """Fifty chunks of 16 bytes of text (267 tokens by the estimate), no usage."""
    out = [sse_head(), chat_event({"role": "assistant", "content": ""})]
    out += [chat_event({"content": "=" * 16}) for _ in range(50)]
    return out + [chat_event({}, finish="stop"), done()]


@pytest.mark.parametrize("stream", [True, False])
def test_an_estimate_is_at_most_the_requests_output_bound(stream: bool):
    script = _chunks_without_usage if stream else (
        lambda n, body: [buffered(_completion("=" * 800))])
    with WatchedUpstream(script) as up, running_gateway(config(up.url), env=ENV) as gw:
        r = _ask(gw.url, max_tokens=50, stream=stream)
        assert r.status_code == 200
        (d,) = decisions(gw)
    assert d["usage_estimated"] is True
    assert d["usage"]["output_tokens"] == 50  # 267 by the estimate alone

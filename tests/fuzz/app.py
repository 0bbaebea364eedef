"""The gateway the fuzz tests attack: real app, an in-process upstream that always answers.

The upstream is an ``httpx.MockTransport`` (the transport seam), so a request
that gets through validation and planning is served in full, buffered or
streamed, and what is fuzzed is the gateway's own handling, never a network.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator

import httpx

from humpyard.clock import SystemClock
from humpyard.config import load_config_text
from humpyard.config.spec import Config
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from humpyard.store import open_store

ROUTES = ("r", "solo")
MAX_BODY = 1024 * 1024

CONFIG = f"""
max_body_bytes = {MAX_BODY}
[providers.a]
base_url = "http://upstream-a.test/v1"
timeout_secs = 5
[providers.b]
base_url = "http://upstream-b.test/v1"
timeout_secs = 5
[targets.first]
class = "public"
endpoints = [{{ provider = "a", model = "ma", context_window = 100000 }}]
[targets.second]
class = "paid"
endpoints = [{{ provider = "b", model = "mb" }}]
[routes.r]
targets = ["first", "second"]
[routes.solo]
targets = ["first"]
[ledger]
path = ":memory:"
"""


def completion(model: str) -> dict:
    return {"id": "chatcmpl-fuzz", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


def upstream(request: httpx.Request) -> httpx.Response:
    """Answers every chat call: a completion, or its stream when asked for one."""
    body = json.loads(request.content)
    model = body.get("model", "m")
    if not body.get("stream"):
        return httpx.Response(200, json=completion(model))
    base = {"id": "chatcmpl-fuzz", "object": "chat.completion.chunk", "created": 1,
            "model": model}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"},
                              "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**base, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1,
                                          "total_tokens": 4}},
    ]
    events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]
    return httpx.Response(200, content=_stream(events),
                          headers={"content-type": "text/event-stream"})


async def _stream(events: list[bytes]) -> AsyncIterator[bytes]:
    """A body that arrives in pieces (bytes content would be read at once)."""
    for event in events:
        yield event


def fuzz_config(text: str = CONFIG) -> Config:
    return load_config_text(text, env={})


def fuzz_app(text: str = CONFIG):
    """The Starlette app over ``text``, its upstream mocked; returns (app, gateway)."""
    config = fuzz_config(text)
    gw = Gateway(config, store=open_store(":memory:", SystemClock()), rng=random.Random(1),
                 transport=httpx.MockTransport(upstream))
    return create_app(config, gateway=gw), gw

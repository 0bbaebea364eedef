"""Lambda instances built by the real wiring (``build_gateway``, ``Instance``, the flush
middleware) over one moto DynamoDB, and an upstream that holds its answer until told."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from humpyard.aws.build import Instance, build_gateway
from humpyard.aws.env import LambdaEnv
from humpyard.aws.flush import FlushMiddleware
from humpyard.clock import FakeClock
from humpyard.http.app import create_app
from tests.unit.aws.moto_support import LEDGER, STATE

Upstream = Callable[[httpx.Request], Awaitable[httpx.Response]]


class HeldUpstream:
    """An upstream whose chat answers (``usage`` as given) wait for ``release``;
    ``arrived`` is set by the first request."""

    def __init__(self, usage: dict[str, int]) -> None:
        self.arrived, self.release = asyncio.Event(), asyncio.Event()
        self.usage = usage

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrived.set()
        await self.release.wait()
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "hi"}}],
            "usage": self.usage})


def lambda_instances(client: Any, clock: FakeClock, tmp_path: Path, config: str,
                     upstream: Upstream, n: int = 2) -> list[tuple[Instance, FlushMiddleware]]:
    """``n`` instances of one configuration (client key ``secret`` in ``KEY``), each with
    the app its handler runs behind the flush middleware."""
    path = tmp_path / "humpyard.toml"
    path.write_text(config)
    env = LambdaEnv.from_environ({"HUMPYARD_STATE_TABLE": STATE,
                                  "HUMPYARD_LEDGER_TABLE": LEDGER,
                                  "HUMPYARD_CONFIG": str(path)})
    made = []
    for _ in range(n):
        gw = build_gateway(env, dynamodb=client, clock=clock, environ={"KEY": "secret"},
                           transport=httpx.MockTransport(upstream))
        inst = Instance(env=env, gateway=gw, logger=logging.getLogger("tests.lambda_pair"),  # type: ignore[arg-type]
                        stdout=io.StringIO())
        made.append((inst, FlushMiddleware(create_app(gw.config, gateway=gw), inst.flush)))
    return made


def clients(instances: list[tuple[Instance, FlushMiddleware]]) -> list[httpx.AsyncClient]:
    """An async client per instance, in order, calling its app with the key ``secret``."""
    return [httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw",
                              headers={"authorization": "Bearer secret"})
            for _, app in instances]

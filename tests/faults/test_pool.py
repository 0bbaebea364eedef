"""The upstream pool under cancellation: a timeout never strands a connection.

The whole-call timeout is a cancellation, and it can land at any step of an
upstream call: waiting for a pool slot, connecting, sending, reading the head,
reading the body, or while the connection is handed back at the body's end.
httpcore 1.0.9 strands a connection when cancelled at some of those steps
(encode/httpcore#1093: enough of them and every request fails with a pool
timeout), which is one reason ``UpstreamClient`` runs on its own transport.
These tests cancel at every event-loop step in turn and check that nothing
stays checked out.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from humpyard.config import load_config_text
from humpyard.upstream.client import UpstreamClient
from tests.support.fake_upstream import FakeUpstream
from tests.support.steps import delay

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
DEADLINE = 60.0  # seconds for a sweep; a loaded machine takes far less


def provider(url: str):
    config = load_config_text(f"""
[providers.p]
base_url = "{url}"
timeout_secs = 5
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
""", env={})
    return config.providers["p"]


def checked_out(client: UpstreamClient) -> list[str]:
    """Connections in use (the transport's ``connections``, as httpcore's pool names it)."""
    pool = client.fast
    return [repr(c) for c in pool.connections if not (c.is_idle() or c.is_closed())]


async def cancel_after(turns: int, coro) -> object:
    task = asyncio.ensure_future(coro)
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    [result] = await asyncio.gather(task, return_exceptions=True)
    return result


async def cancel_at_every_step(start: Callable[[], Awaitable[Coroutine[Any, Any, object]]],
                               after: Callable[[int, object], Awaitable[None]]) -> None:
    """Cancel the coroutine ``start()`` gives after 0, 1, 2, ... event-loop steps,
    calling ``after(turns, result)`` each time, until one run ends before its cancel:
    every step of a whole call has then been cancelled once. The upstream answers
    from its own thread, so how many steps that takes depends on when that thread
    gets a CPU: it is not a constant.
    """
    deadline = time.monotonic() + DEADLINE
    for turns in itertools.count():
        result = await cancel_after(turns, await start())
        await after(turns, result)
        if not isinstance(result, BaseException):
            return
        assert isinstance(result, asyncio.CancelledError), f"after {turns} steps: {result!r}"
        assert time.monotonic() < deadline, f"no call ended within {turns} steps"


def test_cancelling_open_at_any_step_leaves_no_connection_checked_out():
    async def main() -> None:
        with FakeUpstream() as up:
            p = provider(up.url)
            client = UpstreamClient()

            async def after(turns: int, result: object) -> None:
                if not isinstance(result, BaseException):  # answered before the cancel
                    await result.aclose()  # type: ignore[attr-defined]
                assert checked_out(client) == [], f"cancelled after {turns} steps"

            async def start() -> Coroutine[Any, Any, object]:
                return client.open(p, "/chat/completions", BODY)

            try:
                await cancel_at_every_step(start, after)
                assert up.requests
            finally:
                await client.aclose()
    asyncio.run(main())


def test_cancelling_a_body_read_at_any_step_leaves_no_connection_checked_out():
    async def main() -> None:
        with FakeUpstream() as up:
            p = provider(up.url)
            client = UpstreamClient()
            responses = []

            async def start() -> Coroutine[Any, Any, object]:
                resp = await client.open(p, "/chat/completions", BODY)  # never cancelled
                responses.append(resp)
                return resp.read()

            async def after(turns: int, result: object) -> None:
                if responses:
                    await responses.pop().aclose()
                assert checked_out(client) == [], f"cancelled after {turns} steps"

            try:
                await cancel_at_every_step(start, after)
            finally:
                await client.aclose()
    asyncio.run(main())


def test_a_whole_call_timeout_on_a_slow_answer_leaves_nothing_behind():
    async def main() -> None:
        with FakeUpstream() as up:
            up.default = delay(0.3)
            p = provider(up.url)
            client = UpstreamClient()
            try:
                for _ in range(3):
                    try:
                        async with asyncio.timeout(0.05):
                            await client.open(p, "/chat/completions", BODY)
                    except TimeoutError:
                        pass
                    assert checked_out(client) == []
                up.default = delay(0)
                resp = await client.open(p, "/chat/completions", BODY)
                assert resp.status == 200 and b'"choices"' in await resp.read()
                await resp.aclose()
                assert checked_out(client) == []
            finally:
                await client.aclose()
    asyncio.run(main())

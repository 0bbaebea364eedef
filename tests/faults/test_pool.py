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

from humpyard.config import load_config_text
from humpyard.upstream.client import UpstreamClient
from tests.support.fake_upstream import FakeUpstream
from tests.support.steps import delay

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
TURNS = 40  # more event-loop steps than one loopback call takes


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


def test_cancelling_open_at_any_step_leaves_no_connection_checked_out():
    async def main() -> None:
        with FakeUpstream() as up:
            p = provider(up.url)
            client = UpstreamClient()
            try:
                for turns in range(TURNS):
                    result = await cancel_after(turns, client.open(p, "/chat/completions",
                                                                   BODY))
                    if not isinstance(result, BaseException):  # answered before the cancel
                        await result.aclose()  # type: ignore[attr-defined]
                    assert checked_out(client) == [], f"cancelled after {turns} steps"
                assert up.requests
            finally:
                await client.aclose()
    asyncio.run(main())


def test_cancelling_a_body_read_at_any_step_leaves_no_connection_checked_out():
    async def main() -> None:
        with FakeUpstream() as up:
            p = provider(up.url)
            client = UpstreamClient()
            try:
                for turns in range(TURNS):
                    resp = await client.open(p, "/chat/completions", BODY)
                    await cancel_after(turns, resp.read())
                    await resp.aclose()
                    assert checked_out(client) == [], f"cancelled after {turns} steps"
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

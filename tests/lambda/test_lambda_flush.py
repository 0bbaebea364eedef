"""``FlushMiddleware``: the flush happens before the last byte, once, whatever happens."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from humpyard.aws.flush import STATE_KEY, FlushMiddleware

Message = dict[str, Any]


def _run(app: Any, scope: dict[str, Any], inbox: list[Message] | None = None
         ) -> list[Message]:
    sent: list[Message] = []
    queue = list(inbox or [{"type": "http.request", "body": b"", "more_body": False}])

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.ids: list[str | None] = []

    async def flush(self) -> None:
        self.events.append("flush")

    def correlate(self, value: str | None) -> None:
        self.ids.append(value)


def streaming_app(chunks: int, *, request_id: str | None = None, fail: bool = False) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        rid = request_id or scope["state"][STATE_KEY]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"x-humpyard-request-id", rid.encode())]})
        for i in range(chunks):
            await send({"type": "http.response.body", "body": b"chunk%d" % i,
                        "more_body": i < chunks - 1})
            if fail and i == 0:
                raise RuntimeError("the app broke mid-stream")
    return app


HTTP = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}


def test_the_last_chunk_waits_for_the_flush() -> None:
    seq: list[str] = []

    async def flush() -> None:
        seq.append("flush")

    async def send(message: Message) -> None:
        seq.append(message.get("body", b"start").decode())

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(FlushMiddleware(streaming_app(3), flush)(dict(HTTP), receive, send))
    assert seq == ["start", "chunk0", "chunk1", "flush", "chunk2"]


def test_a_request_that_breaks_is_still_flushed_once() -> None:
    rec = Recorder()
    app = FlushMiddleware(streaming_app(3, fail=True), rec.flush, rec.correlate)
    with pytest.raises(RuntimeError):
        _run(app, dict(HTTP))
    assert rec.events == ["flush"]
    assert rec.ids[-1] is None  # cleared after the request


def test_a_failing_flush_does_not_cost_the_answer(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise OSError("stdout is gone")

    sent = _run(FlushMiddleware(streaming_app(2), broken), dict(HTTP))
    assert [m["body"] for m in sent if m["type"] == "http.response.body"] == [b"chunk0",
                                                                             b"chunk1"]
    assert "flush after the request failed" in caplog.text


def test_correlation_id_is_the_request_id_from_the_first_line_once_the_app_adopts_it() -> None:
    rec = Recorder()
    app = FlushMiddleware(streaming_app(1), rec.flush, rec.correlate)
    _run(app, dict(HTTP))
    _run(app, dict(HTTP))
    # first request: unknown until the answer starts; second: set up front
    first_start, first_answer, first_clear, second_start, second_answer, _ = rec.ids
    assert first_start is None and first_answer and first_answer.startswith("req_")
    assert first_clear is None
    assert second_start == second_answer and second_start != first_answer


def test_an_app_that_makes_its_own_ids_is_correlated_when_it_answers() -> None:
    rec = Recorder()
    app = FlushMiddleware(streaming_app(1, request_id="req_own"), rec.flush, rec.correlate)
    _run(app, dict(HTTP))
    _run(app, dict(HTTP))
    assert rec.ids == [None, "req_own", None, None, "req_own", None]


def test_lifespan_is_answered_without_the_app_and_shutdown_runs_the_hook() -> None:
    calls: list[str] = []

    async def never(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app must not see lifespan events")

    async def on_shutdown() -> None:
        calls.append("shutdown")

    async def flush() -> None:
        calls.append("flush")

    sent = _run(FlushMiddleware(never, flush, on_shutdown=on_shutdown), {"type": "lifespan"},
                [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    assert [m["type"] for m in sent] == ["lifespan.startup.complete",
                                         "lifespan.shutdown.complete"]
    assert calls == ["shutdown"]

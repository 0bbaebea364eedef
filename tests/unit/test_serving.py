"""``humpyard serve``'s protocol: a response's head and body leave in one write."""

from __future__ import annotations

import asyncio

from humpyard.serving import HeadHoldingTransport, protocol_class


class Recorder:
    """The transport under the wrapper: records writes, like a socket would see them."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


def run(steps) -> Recorder:
    async def main() -> Recorder:
        rec = Recorder()
        t = HeadHoldingTransport(rec, asyncio.get_running_loop())  # type: ignore[arg-type]
        await steps(t, rec)
        return rec
    return asyncio.run(main())


def test_head_and_body_go_out_as_one_write() -> None:
    async def steps(t: HeadHoldingTransport, rec: Recorder) -> None:
        t.write(HEAD)
        assert rec.writes == []  # held
        t.write(b"{}")
        assert rec.writes == [HEAD + b"{}"]
        t.write(b"more")  # not a head: straight through
        assert rec.writes[-1] == b"more"
        assert t.get_extra_info("peername") == "info:peername"  # the rest is delegated
    run(steps)


def test_a_head_alone_leaves_at_the_end_of_the_loop_turn() -> None:
    async def steps(t: HeadHoldingTransport, rec: Recorder) -> None:
        t.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await asyncio.sleep(0)
        assert rec.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]
        t.write(b"5\r\nhello\r\n")
        assert rec.writes[-1] == b"5\r\nhello\r\n"
    run(steps)


def test_close_sends_a_held_head_and_abort_drops_it() -> None:
    async def steps(t: HeadHoldingTransport, rec: Recorder) -> None:
        t.write(HEAD)
        t.close()
        assert rec.writes == [HEAD] and rec.closed
    run(steps)

    async def aborting(t: HeadHoldingTransport, rec: Recorder) -> None:
        t.write(HEAD)
        t.abort()
        await asyncio.sleep(0)
        assert rec.writes == [] and rec.aborted
    run(aborting)


def test_the_protocol_wraps_its_connections() -> None:
    import uvicorn
    from uvicorn.server import ServerState

    async def app(scope, receive, send) -> None:  # pragma: no cover - never called
        pass

    async def main() -> None:
        config = uvicorn.Config(app, log_config=None, http=protocol_class())
        config.load()
        proto = config.http_protocol_class(config=config, server_state=ServerState(),
                                           app_state={})
        rec = Recorder()
        rec.get_extra_info = lambda name, default=None: None  # type: ignore[method-assign]
        proto.connection_made(rec)
        assert isinstance(proto.transport, HeadHoldingTransport)
        proto.transport.write(HEAD)
        proto.transport.write(b"{}")
        assert rec.writes == [HEAD + b"{}"]
    asyncio.run(main())


def test_served_over_a_socket_the_answer_arrives_whole() -> None:
    import uvicorn

    async def app(scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", b"11")]})
        await send({"type": "http.response.body", "body": b'{"ok":true}'})

    async def main() -> bytes:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off",
                                log_config=None, http=protocol_class(), server_header=False)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while not got.endswith(b'{"ok":true}'):
            got += await reader.read(65536)
        writer.close()
        server.should_exit = True
        await task
        return got

    got = asyncio.run(main())
    assert got.startswith(b"HTTP/1.1 200 OK\r\n")


def test_the_connection_cap_leaves_a_reserve_below_the_open_files_limit() -> None:
    from humpyard.open_files import connection_cap
    assert connection_cap(None, 1024) == 768  # a quarter kept back
    assert connection_cap(None, 200) == 136  # at least 64 kept back
    assert connection_cap(None, 65536) == 49152
    assert connection_cap(100, 1024) == 100  # a configured cap below the safe figure
    assert connection_cap(5000, 1024) == 768  # one above it is cut to it
    assert connection_cap(None, 10) >= 8


def test_a_sampled_warning_reports_what_it_held_back() -> None:
    """Refusals at the cap and malformed requests log at most once every 10 s; the line
    that goes out counts every event since the last one."""
    from humpyard.connections import LOG_EVERY_SECS
    from humpyard.logsink import Sampled
    clock = [1000.0]
    sampled = Sampled(lambda: clock[0], LOG_EVERY_SECS)
    assert sampled.due() == 1  # the first is reported at once
    assert [sampled.due() for _ in range(5)] == [0] * 5
    clock[0] += LOG_EVERY_SECS - 0.1
    assert sampled.due() == 0
    clock[0] += 0.1
    assert sampled.due() == 7  # the six held back and this one
    assert sampled.due() == 0

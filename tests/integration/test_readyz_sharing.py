"""``/readyz`` asks the store once for any number of concurrent probes, and reuses
the answer for ``STORE_CHECK_SECS`` (http/probes.py): unauthenticated probes cannot
queue up store reads. The store is a real ``MemoryStore`` whose ``ping`` is held
on an event and counted; the clock is a ``FakeClock``.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import httpx
import pytest

from humpyard.clock import FakeClock
from humpyard.config import load_config_text
from humpyard.errors import StoreUnavailable
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from humpyard.http.probes import STORE_CHECK_SECS
from humpyard.store.memory import MemoryStore
from tests.support.polling import until
from tests.support.servers import ServerThread

CONFIG = '''
[providers.p]
base_url = "http://127.0.0.1:9/v1"

[targets.t]
endpoints = [{ provider = "p", model = "m" }]

[keys.me]
key_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
'''


class HeldStore(MemoryStore):
    """A memory store whose ``ping`` waits for ``release`` and counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.pings = 0

    def ping(self) -> None:
        self.pings += 1
        self.release.wait(10)
        super().ping()


def test_concurrent_probes_share_one_store_check_and_reuse_it():
    clock = FakeClock()
    store = HeldStore()
    config = load_config_text(CONFIG)
    app = create_app(config, gateway=Gateway(config, store, clock=clock))

    async def flood(url: str, n: int) -> list[int]:
        async with httpx.AsyncClient(timeout=15) as client:
            answers = await asyncio.gather(*(client.get(url + "/readyz") for _ in range(n)))
        return [a.status_code for a in answers]

    with ServerThread(app, lifespan="on") as srv:
        result: list[list[int]] = []
        t = threading.Thread(target=lambda: result.append(asyncio.run(flood(srv.url, 50))))
        t.start()
        deadline = time.monotonic() + 10
        while store.pings == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the rest of the flood arrives while the one check is held
        store.release.set()
        t.join(15)
        assert result == [[200] * 50]
        assert store.pings == 1
        # within the reuse window: answered without asking the store
        assert httpx.get(srv.url + "/readyz", timeout=5).status_code == 200
        assert store.pings == 1
        clock.advance(STORE_CHECK_SECS + 0.1)
        assert httpx.get(srv.url + "/readyz", timeout=5).status_code == 200
        assert store.pings == 2
        # a closed store is 503 once the window has passed
        store.close()
        clock.advance(STORE_CHECK_SECS + 0.1)
        r = httpx.get(srv.url + "/readyz", timeout=5)
        assert r.status_code == 503 and r.json()["checks"]["store"] == "unreachable"


def _serving(store: Any, clock: FakeClock) -> ServerThread:
    """The gateway on ``store`` and ``clock`` over a real socket (``with``: its URL)."""
    config = load_config_text(CONFIG)
    return ServerThread(create_app(config, gateway=Gateway(config, store, clock=clock)),
                        lifespan="on")


def _timed_out(url: str) -> None:
    """A ``/readyz`` whose ping is held: 503, the store check timed out."""
    first = httpx.get(url + "/readyz", timeout=15)
    assert first.status_code == 503 and first.json()["checks"]["store"] == "timeout"


def test_a_ping_that_does_not_answer_is_not_asked_again_alongside():
    """A store that does not answer holds the ping's thread for its client's own
    timeouts, far past ``READY_TIMEOUT_SECS``. Before: every check after the reuse
    window started another ping on another of the threads ``asyncio.to_thread``
    shares with the rest of the process (3 held here after 3 checks)."""
    clock, store = FakeClock(), HeldStore()
    with _serving(store, clock) as srv:
        try:
            _timed_out(srv.url)  # waits READY_TIMEOUT_SECS
            for _ in range(2):  # each a new check, the first ping still held
                clock.advance(STORE_CHECK_SECS + 0.1)
                r = httpx.get(srv.url + "/readyz", timeout=15)
                assert r.status_code == 503 and r.json()["checks"]["store"] == "timeout"
            assert store.pings == 1
        finally:
            store.release.set()

        def ready() -> bool:  # once the held ping has answered, a new check asks again
            clock.advance(STORE_CHECK_SECS + 0.1)
            return httpx.get(srv.url + "/readyz", timeout=15).status_code == 200

        until(ready, "ready once the held ping has answered")
        assert store.pings == 2


class FailingHeldStore(HeldStore):
    """The first ``ping`` is held and, once released, fails as an unreachable store's
    does; the ones after it answer."""

    def ping(self) -> None:
        self.pings += 1
        if self.pings == 1:
            self.release.wait(10)
            raise StoreUnavailable("the store did not answer")


def test_a_timed_out_ping_that_fails_later_leaves_no_unretrieved_exception(
        caplog: pytest.LogCaptureFixture) -> None:
    """``/readyz`` gives up on a ping after ``READY_TIMEOUT_SECS``; the ping fails
    afterwards. Before: asyncio logged "Future exception was never retrieved" with the
    whole traceback once the ping's future was let go (``wait_for`` cancelling the
    shield removes the shield's callback that would have retrieved it)."""
    clock, store = FakeClock(), FailingHeldStore()
    with _serving(store, clock) as srv:
        try:
            _timed_out(srv.url)
        finally:
            store.release.set()

        def ready() -> bool:  # a new check once the held ping has failed lets go of it
            clock.advance(STORE_CHECK_SECS + 0.1)
            return httpx.get(srv.url + "/readyz", timeout=15).status_code == 200

        until(ready, "ready once the held ping has failed")
        assert store.pings == 2
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]

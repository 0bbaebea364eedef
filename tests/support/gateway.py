"""Running the real gateway app on a real port in front of fake upstreams."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from humpyard.clock import Clock, SystemClock
from humpyard.config import Config, load_config_text
from humpyard.connections import ConnectionGuard
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from humpyard.serving import protocol_class
from humpyard.store import open_store
from tests.support.servers import ServerThread


@dataclass
class Running:
    """A gateway served on loopback: ``url`` is its origin, ``gw`` the live object."""

    url: str
    gw: Gateway
    config: Config

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def client(self, **headers: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def decisions(self, **params: Any) -> list[dict[str, Any]]:
        with self.client(**self._auth) as c:
            r = c.get("/v1/decisions", params=params)
            r.raise_for_status()
            return r.json()["decisions"]  # type: ignore[no-any-return]

    def recorded(self, count: int, timeout: float = 10.0) -> None:
        """``wait_recorded(self.gw, count, timeout)``."""
        wait_recorded(self.gw, count, timeout)

    _auth: dict[str, str] = None  # type: ignore[assignment]


def wait_recorded(gw: Gateway, count: int, timeout: float = 10.0) -> None:
    """Wait until ``gw`` has recorded ``count`` client requests in all, and its ledger
    writer and budget leases have written them; fail after ``timeout`` seconds.

    The gateway records a request after its answer has gone out (recording never
    delays an answer), so a client holding a whole answer, a stream's last event
    above all, can be ahead of the record. Read the ledger, the request log or the
    metrics only after this. ``humpyard_requests_total`` moves once per record.
    """
    deadline = time.monotonic() + timeout
    while (done := sum(gw.metrics.requests.samples().values())) < count:
        assert time.monotonic() < deadline, f"{done} of {count} requests recorded"
        time.sleep(0.005)
    # A budgeted key's spend goes with its lease, written on the leases' own thread
    # (at once on SQLite; batched for ``flush_secs`` on DynamoDB, not waited for here):
    # what the ledger writer holds is not all of it.
    leases = gw.allowance.leases
    while leases is not None and not leases.flush_secs and (left := leases.unwritten()) > 0:
        assert time.monotonic() < deadline, f"${left} of spend not written with its lease"
        time.sleep(0.005)
    assert gw.writer.flush(max(0.0, deadline - time.monotonic())), "the ledger writer lags"


def two_targets(a: str, b: str, extra: str = "") -> str:
    """A passthrough route ``r`` over target ``first`` (class public, provider at
    ``a``) then ``second`` (class paid, at ``b``), health breakers off; ``extra``
    TOML appended (keys, selectors)."""
    return f"""
[providers.a]
base_url = "{a}"
[providers.b]
base_url = "{b}"
[targets.first]
class = "public"
endpoints = [{{ provider = "a", model = "ma" }}]
[targets.second]
class = "paid"
endpoints = [{{ provider = "b", model = "mb" }}]
[routes.r]
type = "passthrough"
targets = ["first", "second"]
[health]
failure_threshold = 0
{extra}
"""


def config_from(text: str, env: Mapping[str, str] | None = None) -> Config:
    return load_config_text(text, env=dict(env or {}))


@contextmanager
def running_gateway(text: str, *, env: Mapping[str, str] | None = None,
                    ledger: str | None = ":memory:", clock: Clock | None = None,
                    rng: random.Random | None = None,
                    admin_key: str | None = None, health: Any = None,
                    own_server: bool = False) -> Iterator[Running]:
    """Serve ``text`` (a TOML config) on a free loopback port until the block ends.

    ``health`` replaces the gateway's in-memory health book (a ``SharedHealth``
    to run several gateways on one set of breakers). ``own_server``: uvicorn runs
    the protocol ``humpyard serve`` runs (``serving.protocol_class``: the held
    head, the connection guard, the watched connection loss) instead of its own.
    """
    config = config_from(text, env)
    store = open_store(ledger, clock or SystemClock()) if ledger is not None else None
    gw = Gateway(config, store, clock=clock, rng=rng or random.Random(1), health=health)
    app = create_app(config, gateway=gw)
    extra: dict[str, Any] = {}
    if own_server:
        extra["http"] = protocol_class(ConnectionGuard(lambda: gw.config.server, 4096,
                                                       gw.metrics.connections_refused))
    with ServerThread(app, lifespan="on", **extra) as srv:
        r = Running(url=srv.url, gw=gw, config=config)
        r._auth = {"authorization": f"Bearer {admin_key}"} if admin_key else {}
        yield r

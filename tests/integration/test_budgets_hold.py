"""Budgets hold with any store, across state refreshes and reloads — over HTTP.

Spend counted while serving must survive the periodic re-read of shared state
(``state_refresh_ms``): with no ``[ledger]`` the in-memory store keeps it, and
with a store whose writes lag behind (the background writer) the spend this
process counted but has not written yet is kept too. A refusal names what
really removed each target, and explain, the refusal and the decision agree.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from humpyard.clock import FakeClock
from humpyard.config import load_config_text
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from humpyard.store import MemoryStore
from humpyard.store.base import LedgerBatch
from humpyard.store.writer import BackgroundWriter
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread
from tests.support.steps import ok

ENV = {"DEV": "dev-secret", "ADMIN": "admin-secret"}
REFRESH_SECS = 1.0  # state_refresh_ms = 1000, the default
MSG = [{"role": "user", "content": "hi"}]


def cfg(free: str, paid: str, *, targets: str = '["paid", "free"]', extra: str = "") -> str:
    return f"""
[providers.free]
base_url = "{free}"
[providers.paid]
base_url = "{paid}"
[targets.free]
endpoints = [{{ provider = "free", model = "f" }}]
[targets.free2]
endpoints = [{{ provider = "free", model = "f2" }}]
[targets.paid]
# max_output_tokens bounds the budget reservation (docs/routing.md, "Budgets"): the
# first request's worst case fits in $0.05, its real usage (30 prompt tokens) does not
endpoints = [{{ provider = "paid", model = "p", max_output_tokens = 20,
               price = {{ input = 1000.0, output = 1000.0 }} }}]
[routes.r]
targets = {targets}
[keys.dev]
key_env = "DEV"
budget = {{ usd = 0.05, period = "day" }}
[keys.admin]
key_env = "ADMIN"
manage_overrides = true
admin = true
{extra}
"""


def send(url: str, key: str, model: str = "r") -> httpx.Response:
    with httpx.Client(base_url=url, timeout=30,
                      headers={"authorization": f"Bearer {key}"}) as c:
        return c.post("/v1/chat/completions", json={"model": model, "messages": MSG})


def explain(url: str, key: str) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=30,
                      headers={"authorization": f"Bearer {key}"}) as c:
        r = c.post("/v1/route/explain", json={"model": "r"})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]


@pytest.fixture
def ups() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as free, FakeUpstream() as paid:
        # each paid answer costs (30 + 30) tokens * $1000 / 1M = $0.06: over budget at once
        paid.default = ok("answer", usage={"prompt_tokens": 30, "completion_tokens": 30})
        yield free, paid


def test_without_a_ledger_spend_survives_state_refreshes_and_reloads(ups):
    free, paid = ups
    clock = FakeClock()
    text = cfg(free.url, paid.url)
    with running_gateway(text, env=ENV, ledger=None, clock=clock,
                         admin_key="admin-secret") as gw:
        assert not gw.gw.store.has_ledger
        assert send(gw.url, "dev-secret").headers["x-humpyard-target"] == "paid"
        assert send(gw.url, "dev-secret").headers["x-humpyard-target"] == "free"
        clock.advance(REFRESH_SECS + 0.5)  # the next request re-reads shared state
        assert send(gw.url, "dev-secret").headers["x-humpyard-target"] == "free"
        budget = explain(gw.url, "dev-secret")["budget"]
        assert budget["exhausted"] is True and budget["spent_usd"] == pytest.approx(0.06)
        gw.gw.swap_config(load_config_text(text, env=ENV))  # a reload
        assert send(gw.url, "dev-secret").headers["x-humpyard-target"] == "free"
        clock.advance(REFRESH_SECS + 0.5)
        assert send(gw.url, "dev-secret").headers["x-humpyard-target"] == "free"
        assert send(gw.url, "admin-secret").headers["x-humpyard-target"] == "paid"
        assert len(paid.requests_to("/v1/chat/completions")) == 2


class SlowSpend:
    """A store whose spend writes wait until ``release`` (a disk that lags behind)."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.release = threading.Event()

    def write_batch(self, batch: LedgerBatch) -> None:
        if batch.spend:
            self.release.wait(10)
        self._inner.write_batch(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextmanager
def serving(gw: Gateway) -> Iterator[str]:
    with ServerThread(create_app(gw.config, gateway=gw), lifespan="on") as srv:
        yield srv.url


def test_spend_not_yet_written_survives_a_refresh(ups):
    free, paid = ups
    clock = FakeClock()
    store = SlowSpend(MemoryStore())
    config = load_config_text(cfg(free.url, paid.url), env=ENV)
    gw = Gateway(config, store, clock=clock, rng=random.Random(1),  # type: ignore[arg-type]
                 writer=BackgroundWriter(store))
    try:
        with serving(gw) as url:
            assert send(url, "dev-secret").headers["x-humpyard-target"] == "paid"
            clock.advance(REFRESH_SECS + 0.5)  # re-read while the spend is still queued
            assert send(url, "dev-secret").headers["x-humpyard-target"] == "free"
            gw.invalidate()  # as a reload or an override change does
            assert send(url, "dev-secret").headers["x-humpyard-target"] == "free"
            store.release.set()
            assert gw.writer.flush(timeout=5)
            clock.advance(REFRESH_SECS + 0.5)
            assert send(url, "dev-secret").headers["x-humpyard-target"] == "free"
            assert explain(url, "dev-secret")["budget"]["spent_usd"] == pytest.approx(0.06)
    finally:
        store.release.set()
        gw.writer.close()


def test_a_refusal_names_the_budget_and_the_overrides_and_all_three_agree(ups):
    free, paid = ups
    text = cfg(free.url, paid.url, targets='["paid", "free", "free2"]')
    with running_gateway(text, env=ENV, admin_key="admin-secret") as gw:
        assert send(gw.url, "dev-secret").headers["x-humpyard-target"] == "paid"
        with gw.client(authorization="Bearer admin-secret") as c:
            ids = [c.post("/v1/overrides", json={"kind": "disable_target", "subject": t,
                                                 "reason": "drill"}).json()["id"]
                   for t in ("free", "free2")]
        e = explain(gw.url, "dev-secret")
        r = send(gw.url, "dev-secret")
        err = r.json()["error"]
        d = gw.decisions(limit=1)[0]
    assert r.status_code == 503 and err["code"] == "override_no_target"
    msg = err["message"]
    assert "budget" in msg and "'paid'" in msg
    assert f"override {ids[0]} (disable_target free) removed 'free'" in msg
    assert f"override {ids[1]} (disable_target free2) removed 'free2'" in msg
    assert (e["outcome"], e["message"]) == ("override_no_target", msg)
    assert (d["outcome"], d["error"]) == ("override_no_target", msg)
    assert [p["target"] for p in d["policy_removed"]] == ["paid"]
    assert [o["target"] for o in d["overrides"]] == ["free", "free2"]

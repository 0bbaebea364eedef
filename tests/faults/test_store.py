"""A store whose writes fail: requests are still served, nothing is lost silently.

The gateway is built with ``Gateway(config, store=BrokenWrites(...))``: reads
work, every write raises ``StoreError``. Ledger writes run on the background
writer, off the request path, so the client never notices; each lost write is
logged on ``humpyard.store`` at ERROR with its request id and the unsaved
payload as JSON, from which the decision can be replayed. An admin write that
cannot be stored (an override) is refused with the store's error.
"""

from __future__ import annotations

import json
import logging
import random
import re
from typing import Any

import httpx
import pytest

from humpyard.clock import SystemClock
from humpyard.config import load_config_text
from humpyard.errors import StoreError
from humpyard.gateway import Gateway
from humpyard.http.app import create_app
from humpyard.store import SQLiteStore
from tests.faults.harness import MSG, drill_config
from tests.support.gateway import wait_recorded
from tests.support.servers import ServerThread
from tests.support.steps import status

WRITES = frozenset({
    "write_batch", "append_decision", "add_spend", "create_override", "delete_override", "audit",
    "expire_due", "purge", "put_quota_snapshot", "append_quota_history", "put_breaker",
    "add_latency", "purge_latency", "lease_budget", "take_limits", "release_limits",
    "renew_slots",
})


class BrokenWrites:
    """Delegates to ``inner``; every write raises ``StoreError`` and is counted."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.failed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in WRITES:
            return attr

        def broken(*args: Any, **kw: Any) -> Any:
            self.failed.append(name)
            raise StoreError(f"{name}: disk I/O error (drill)")
        return broken


KEYS = """
[keys.ci]
key_env = "CI_KEY"
manage_overrides = true
budget = { usd = 100.0, period = "day" }
"""
PRICED = 'price = { input = 1.0, output = 1.0 }'


@pytest.fixture
def broken(ups):
    a, b, h = ups
    text = drill_config(a.url, b.url, h.url, extra=f"[ledger]\npath = \":memory:\"\n{KEYS}")
    # price the bystander so a served request spends (a spend write)
    text = text.replace('{ provider = "h", model = "mh" }',
                        '{ provider = "h", model = "mh", ' + PRICED + ' }')
    config = load_config_text(text, env={"CI_KEY": "sk-ci"})
    clock = SystemClock()
    store = BrokenWrites(SQLiteStore(":memory:", clock))
    gw = Gateway(config, store=store, clock=clock, rng=random.Random(1))
    with ServerThread(create_app(config, gateway=gw), lifespan="on") as srv, httpx.Client(
            base_url=srv.url, timeout=10, headers={"authorization": "Bearer sk-ci"}) as http:
        yield gw, store, http, ups


def unsaved(records: list[logging.LogRecord], request_id: str) -> dict[str, Any]:
    """The decision JSON logged for ``request_id``'s failed ledger write."""
    for rec in records:
        msg = rec.getMessage()
        if rec.levelno == logging.ERROR and f"decision not written request_id={request_id}" \
                in msg:
            m = re.search(r"unsaved: (\{.*\})$", msg, re.S)
            assert m, msg
            assert "disk I/O error (drill)" in msg
            return json.loads(m.group(1))  # type: ignore[no-any-return]
    raise AssertionError(f"no unsaved decision logged for {request_id}")


def test_requests_succeed_and_every_lost_decision_is_logged(broken, caplog):
    gw, store, http, (a, b, h) = broken
    a.script(status(500))
    caplog.set_level(logging.ERROR, logger="humpyard.store")
    body = {"model": "r", "messages": MSG}
    sent = [
        http.post("/v1/chat/completions", json=body),                      # failover
        http.post("/v1/chat/completions", json={**body, "model": "ok"}),   # spends
        http.post("/v1/messages", json={"model": "ok", "max_tokens": 5,
                                        "messages": [{"role": "user", "content": "x"}]}),
        http.post("/v1/chat/completions", json={"model": "r"}),           # refused: 400
        http.post("/v1/chat/completions", json={**body, "model": "nope"}),  # 404
    ]
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as resp:
        lines = [line for line in resp.iter_lines() if line]
        sent.append(resp)
    assert [r.status_code for r in sent] == [200, 200, 200, 400, 404, 200]
    assert sent[0].headers["x-humpyard-target"] == "second"
    assert lines[-1] == "data: [DONE]"
    wait_recorded(gw, len(sent))  # the stream's record comes after its last event

    outcomes = {r.headers["x-humpyard-request-id"]: unsaved(caplog.records,
                                                             r.headers["x-humpyard-request-id"])
                for r in sent}
    first = outcomes[sent[0].headers["x-humpyard-request-id"]]
    assert first["outcome"] == "ok" and first["status"] == 200
    assert [(t["target"], t["failure_class"]) for t in first["attempts"]] == [
        ("first", "server_error"), ("second", None)]
    assert [d["outcome"] for d in outcomes.values()] == [
        "ok", "ok", "ok", "invalid_request", "unknown_model", "ok"]
    assert any("spend not written key_id=ci" in r.getMessage() for r in caplog.records)
    assert gw.metrics.ledger_lost.value(kind="decision", reason="error") == len(sent)
    assert gw.metrics.ledger_lost.value(kind="spend", reason="error") >= 1
    # nothing was stored, and the read side says so rather than failing
    assert http.get("/v1/decisions").json()["decisions"] == []
    # the gateway keeps serving
    assert http.post("/v1/chat/completions", json={**body, "model": "ok"}).status_code == 200


def test_an_override_that_cannot_be_stored_is_refused(broken):
    _, store, http, _ = broken
    r = http.post("/v1/overrides", json={"kind": "disable_target", "subject": "second",
                                         "reason": "drill", "expires_in_secs": 60})
    assert r.status_code == 500
    err = r.json()["error"]
    assert err["code"] == "store_error"
    assert err["message"] == "create_override: disk I/O error (drill)"
    # the background jobs' writes (retention's purge, the override-expiry sweep) fail
    # at start-up too: logged, and they carry on
    background = {"purge", "expire_due"}
    assert [f for f in store.failed if f not in background] == ["create_override"]
    assert http.get("/v1/overrides").json()["overrides"] == []
    ok = http.post("/v1/chat/completions", json={"model": "ok", "messages": MSG})
    assert ok.status_code == 200


class BrokenReads(BrokenWrites):
    """Like ``BrokenWrites``, but the snapshot's reads (overrides, spend) fail once armed."""

    armed = False

    def __getattr__(self, name: str) -> Any:
        if self.armed and name in ("list_overrides", "spend_for"):
            def broken(*args: Any, **kw: Any) -> Any:
                self.failed.append(name)
                raise StoreError(f"{name}: disk I/O error (drill)")
            return broken
        return getattr(self._inner, name)


def test_a_store_that_cannot_be_read_serves_on_the_last_snapshot(ups, caplog):
    a, b, h = ups
    text = "state_refresh_ms = 0\n" + drill_config(a.url, b.url, h.url,
                                                     extra='[ledger]\npath = ":memory:"\n')
    config = load_config_text(text, env={})
    store = BrokenReads(SQLiteStore(":memory:", SystemClock()))
    gw = Gateway(config, store=store, clock=SystemClock(), rng=random.Random(1))
    with ServerThread(create_app(config, gateway=gw), lifespan="on") as srv, httpx.Client(
            base_url=srv.url, timeout=10) as http:
        body = {"model": "ok", "messages": MSG}
        assert http.post("/v1/chat/completions", json=body).status_code == 200
        store.armed = True
        # One snapshot path for every store (shared_state.py): its failed read is logged there.
        with caplog.at_level(logging.WARNING, logger="humpyard.state"):
            for _ in range(3):
                assert http.post("/v1/chat/completions", json=body).status_code == 200
    assert "list_overrides" in store.failed
    assert any("serving on the last view" in r.getMessage() for r in caplog.records)

"""Decisions, stats, metrics, quota and config over HTTP; no secret anywhere.

Runs the gateway with a real SQLite ledger file so the capability-estimate
SQL of seed 002 is checked against what the gateway really wrote.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.steps import status

PROVIDER_KEY = "sk-provider-SECRET-123"
CLIENT_KEY = "client-SECRET-456"
OPS_KEY = "ops-SECRET-789"
ENV = {"PK": PROVIDER_KEY, "CK": CLIENT_KEY, "OK": OPS_KEY}
MSG = [{"role": "user", "content": "hello there"}]


def cfg(a: str, b: str, extra: str = "") -> str:
    return f"""
[providers.a]
base_url = "{a}"
api_key_env = "PK"
[providers.b]
base_url = "{b}"
[targets.first]
class = "private"
endpoints = [{{ provider = "a", model = "ma", context_window = 100000 }}]
[targets.second]
class = "public"
endpoints = [{{ provider = "b", model = "mb", price = {{ input = 1.0, output = 2.0 }} }}]
[routes.r]
targets = ["first", "second"]
[routes.strict]
targets = ["first", "second"]
allowed_classes = ["private"]
[[select]]
name = "deep"
when = {{ profile = "deep" }}
route = "strict"
[keys.client]
key_env = "CK"
[keys.ops]
key_env = "OK"
manage_overrides = true
admin = true
{extra}
"""


@pytest.fixture
def ups():
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def send(gw, model: str = "r", key: str = CLIENT_KEY, **headers: str) -> httpx.Response:
    with gw.client(authorization=f"Bearer {key}", **headers) as c:
        return c.post("/v1/chat/completions", json={"model": model, "messages": MSG})


def test_decisions_record_ok_failed_refused_and_overridden(ups, tmp_path):
    a, b = ups
    a.script(status(500, {"error": {"message": "down"}}),
             status(500, {"error": {"message": "down again"}}))
    db = tmp_path / "ledger.db"
    with running_gateway(cfg(a.url, b.url), env=ENV, ledger=str(db), admin_key=OPS_KEY) as gw:
        ok_r = send(gw)                       # first fails, second serves: crossed classes
        failed = send(gw, **{"x-humpyard-profile": "deep"})  # strict: second excluded
        refused = send(gw, model="nope")
        with gw.client(authorization=f"Bearer {OPS_KEY}") as c:
            ov = c.post("/v1/overrides", json={"kind": "disable_target",
                                               "subject": "second"}).json()
        overridden = send(gw)
        assert (ok_r.status_code, failed.status_code, refused.status_code,
                overridden.status_code) == (200, 500, 404, 200)
        by_id = {d["request_id"]: d for d in gw.decisions()}
        d_ok = by_id[ok_r.headers["x-humpyard-request-id"]]
        assert d_ok["outcome"] == "ok" and d_ok["target"] == "second"
        assert [(x["target"], x["status"], x["class"]) for x in d_ok["attempts"]] == [
            ("first", 500, "private"), ("second", 200, "public")]
        assert d_ok["fallback_crossed_classes"] is True
        assert d_ok["usage"]["input_tokens"] > 0 and d_ok["cost_usd"] > 0
        assert d_ok["key_id"] == "client" and d_ok["rule"] == "default"
        d_failed = by_id[failed.headers["x-humpyard-request-id"]]
        assert d_failed["outcome"] == "failed" and d_failed["rule"] == "deep"
        assert d_failed["excluded_targets"] == [{"target": "second",
                                                 "reason": d_failed["excluded_targets"][0][
                                                     "reason"]}]
        assert d_failed["fallback_crossed_classes"] is False
        d_ref = by_id[refused.headers["x-humpyard-request-id"]]
        assert d_ref["outcome"] == "unknown_model" and d_ref["attempts"] == []
        d_ov = by_id[overridden.headers["x-humpyard-request-id"]]
        assert d_ov["overrides"][0]["id"] == ov["id"]
        # filters
        assert {d["outcome"] for d in gw.decisions(outcome="ok")} == {"ok"}
        assert [d["rule"] for d in gw.decisions(rule="deep")] == ["deep"]
        assert {d["route"] for d in gw.decisions(route="strict")} == {"strict"}
        assert len(gw.decisions(key="client")) == 4
        with gw.client(authorization=f"Bearer {OPS_KEY}") as c:
            m = c.get("/metrics").text
        assert 'humpyard_fallback_blocked_total{route="strict"} 1' in m
        assert 'humpyard_requests_total{route="r",target="second",status="200"}' in m
        # the ledger writer reports: everything written (decisions were listed above)
        assert "\nhumpyard_ledger_queue_depth 0\n" in m
        assert "\nhumpyard_ledger_lag_seconds 0\n" in m
        written = re.search(r"^humpyard_ledger_batch_size_sum (\S+)$", m, re.M)
        assert written and float(written.group(1)) >= 4  # the four decisions
        assert re.search(r"^humpyard_ledger_write_seconds_count [1-9]", m, re.M)
        assert "humpyard_ledger_lost_total{" not in m
    # the seed's capability-estimate SQL works on the real ledger file
    with sqlite3.connect(db) as conn:
        count, worst, typical = conn.execute(
            "SELECT COUNT(*), ROUND(MIN(1.0*u.input_tokens/d.prompt_tokens),2) AS worst, "
            "ROUND(AVG(1.0*u.input_tokens/d.prompt_tokens),2) AS typical "
            "FROM decisions d JOIN usage u ON u.request_id = d.request_id AND u.kind = 'answer' "
            "WHERE d.prompt_tokens > 0 AND u.input_tokens > 0;").fetchone()
    conn.close()
    assert count == 2 and worst is not None and typical is not None


def test_paging_with_cursor(ups):
    a, b = ups
    with running_gateway(cfg(a.url, b.url), env=ENV, admin_key=OPS_KEY) as gw:
        ids = [send(gw).headers["x-humpyard-request-id"] for _ in range(5)]
        seen: list[str] = []
        cursor = None
        with gw.client(authorization=f"Bearer {OPS_KEY}") as c:
            while True:
                params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
                page = c.get("/v1/decisions", params=params).json()
                seen += [d["request_id"] for d in page["decisions"]]
                cursor = page["next_cursor"]
                if not cursor:
                    break
            assert c.get("/v1/decisions", params={"cursor": "garbage"}).status_code == 400
        assert sorted(seen) == sorted(ids) and len(seen) == 5


@pytest.mark.parametrize("group_by", ["route", "target", "provider", "key"])
def test_stats_by_each_grouping(ups, group_by):
    a, b = ups
    a.script(status(500, {"error": {"message": "x"}}))
    with running_gateway(cfg(a.url, b.url), env=ENV, admin_key=OPS_KEY) as gw:
        for _ in range(3):
            send(gw)
        with gw.client(authorization=f"Bearer {OPS_KEY}") as c:
            body = c.get("/v1/stats", params={"group_by": group_by}).json()
            assert c.get("/v1/stats", params={"group_by": "x"}).status_code == 400
    assert body["group_by"] == group_by
    groups = {g["key"]: g for g in body["groups"]}
    expected = {"route": "r", "target": "first", "provider": "a", "key": "client"}[group_by]
    g = groups[expected]
    assert set(g) >= {"key", "requests", "failures", "failure_rate", "p50_latency_ms",
                      "cost_usd"}
    if group_by in ("target", "provider"):
        assert (g["requests"], g["failures"]) == (3, 1)
        assert g["failure_rate"] == pytest.approx(1 / 3, abs=1e-3)
    else:
        assert (g["requests"], g["failures"]) == (3, 0)
    assert g["p50_latency_ms"] is not None


def test_no_secret_in_logs_decisions_metrics_or_config(ups, caplog):
    a, b = ups
    caplog.set_level(logging.DEBUG)
    a.script(status(401, {"error": {"message": "bad key"}}))
    with running_gateway(cfg(a.url, b.url), env=ENV, admin_key=OPS_KEY) as gw:
        send(gw)
        send(gw, key="wrong-" + CLIENT_KEY)
        with gw.client(authorization=f"Bearer {OPS_KEY}") as c:
            outputs = [c.get(p).text for p in ("/v1/config", "/metrics", "/v1/health",
                                               "/v1/stats?group_by=key", "/v1/overrides")]
        outputs.append(json.dumps(gw.decisions()))
    assert a.requests[0].headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    # the provider's key goes only to its own upstream, never the client's
    assert all("SECRET" not in r.headers.get("authorization", "") for r in b.requests)
    outputs += [rec.getMessage() for rec in caplog.records]
    for text in outputs:
        for secret in (PROVIDER_KEY, CLIENT_KEY, OPS_KEY):
            assert secret not in text


def test_quota_from_a_local_usage_endpoint(ups):
    a, b = ups
    resets = "2030-01-01T00:00:00Z"
    usage = {"usage": {"rolling": {"status": "ok", "percent": 42, "resetsAt": resets},
                       "weekly": {"status": "rate-limited", "percent": 100,
                                  "resetsAt": resets}}}
    a.script(status(200, usage))
    extra = "quota_poll_secs = 3600\n"
    text = cfg(a.url, b.url).replace('api_key_env = "PK"',
                                     'api_key_env = "PK"\nquota_source = "opencode-go"')
    with running_gateway(extra + text, env=ENV, admin_key=OPS_KEY) as gw:
        deadline = time.monotonic() + 5
        with gw.client(authorization=f"Bearer {OPS_KEY}") as c:
            while time.monotonic() < deadline:
                view = c.get("/v1/quota").json()["providers"]
                if view and view[0]["state"] == "fresh":
                    break
                time.sleep(0.05)
            hist = c.get("/v1/quota/history").json()["samples"]
    [p] = view
    assert p["provider"] == "a" and p["state"] == "fresh"
    assert p["windows"]["rolling"]["percent"] == 42
    assert p["windows"]["weekly"]["status"] == "rate-limited"
    assert {s["window"] for s in hist} == {"rolling", "weekly"}
    usage_req = a.requests_to("/v1/usage")[0]
    assert usage_req.headers["authorization"] == f"Bearer {PROVIDER_KEY}"


def test_quota_source_refused_for_plain_http_remote_host():
    from humpyard.config import load_config_text
    from humpyard.errors import ConfigError
    with pytest.raises(ConfigError, match="quota_source"):
        load_config_text('[providers.x]\nbase_url = "http://example.com/v1"\n'
                         'quota_source = "opencode-go"\n', env={})


def test_retention_purges_old_decisions(ups):
    from humpyard.clock import FakeClock
    a, b = ups
    clock = FakeClock()
    text = cfg(a.url, b.url, extra="[ledger]\ndecision_retention_days = 1\n")
    with running_gateway(text, env=ENV, clock=clock, admin_key=OPS_KEY) as gw:
        send(gw)
        clock.advance(86400 + 1)
        send(gw)
        gw.gw.writer.flush(2)
        assert gw.gw.purge_expired() == 1
        assert len(gw.decisions()) == 1

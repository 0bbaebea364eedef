"""Every metric the gateway declares is recorded: a scenario for each makes it move.

``SCENARIOS`` maps each declared metric to the test below that drives it
through a real gateway on a real port and reads ``GET /metrics``; a metric
declared without a scenario (or a scenario for one that is gone) fails
``test_every_declared_metric_has_a_scenario``.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from humpyard.aws.build import build_gateway
from humpyard.aws.env import LambdaEnv
from humpyard.clock import FakeClock
from humpyard.http.app import create_app
from humpyard.metrics import GatewayMetrics, Metrics
from tests.hostile.test_log_pipe import (
    test_a_log_reader_that_stops_reading_stalls_no_request as log_reader_stalls,  # noqa: F401
)
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import Running, running_gateway
from tests.support.servers import ServerThread, closed_port_url
from tests.support.steps import delay, ok, stall, status
from tests.unit.aws.moto_support import LEDGER, STATE, Failing, moto_tables

MSG = [{"role": "user", "content": "hi"}]
SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")

SCENARIOS = {
    "humpyard_requests_total": "test_a_served_request",
    "humpyard_request_duration_seconds": "test_a_served_request",
    "humpyard_upstream_attempts_total": "test_a_served_request",
    "humpyard_target_latency_seconds": "test_a_served_request",
    "humpyard_gateway_overhead_seconds": "test_a_served_request",
    "humpyard_endpoint_state": "test_a_stated_retry_time_cools_and_skips",
    "humpyard_retry_after_honored_total": "test_a_stated_retry_time_cools_and_skips",
    "humpyard_health_skips_total": "test_a_stated_retry_time_cools_and_skips",
    "humpyard_capability_skips_total": "test_a_declared_capability_removes_a_target",
    "humpyard_fallback_blocked_total": "test_a_strict_route_blocks_a_fallback",
    "humpyard_overrides_active": "test_an_override_is_counted_and_aged",
    "humpyard_override_oldest_age_seconds": "test_an_override_is_counted_and_aged",
    "humpyard_routability_resends_total": "test_a_refused_endpoint_is_redialled",
    "humpyard_routability_resend_seconds": "test_a_refused_endpoint_is_redialled",
    "humpyard_quota_percent": "test_a_quota_poll_sets_the_percent",
    "humpyard_budget_spend_usd": "test_spend_is_shown_against_the_budget",
    "humpyard_ledger_queue_depth": "test_a_served_request",
    "humpyard_ledger_lag_seconds": "test_a_served_request",
    "humpyard_ledger_batch_size": "test_a_served_request",
    "humpyard_ledger_write_seconds": "test_a_served_request",
    "humpyard_ledger_lost_total": "test_a_failing_store_loses_decisions_counted",
    "humpyard_upstream_in_flight": "test_a_provider_at_its_concurrency_limit",
    "humpyard_upstream_waiting": "test_a_provider_at_its_concurrency_limit",
    "humpyard_upstream_slot_timeouts_total": "test_a_provider_at_its_concurrency_limit",
    "humpyard_refused_total": "test_refusals_before_routing_are_counted_and_sampled",
    "humpyard_dynamodb_transaction_conflicts_total":
        "test_a_dynamodb_transaction_conflict_is_counted",
    "humpyard_translation_drops_total": "test_a_translation_that_drops_fields",
    "humpyard_client_disconnects_total": "test_a_client_that_leaves_is_counted",
    "humpyard_connections_refused_total": "test_client_connections_refused_by_serve",
    # driven by a serve whose stderr nobody reads, in tests/hostile (imported below
    # under a name pytest does not collect here, so it runs once)
    "humpyard_log_lines_dropped_total": "log_reader_stalls",
    "humpyard_tokens_total": "test_usage_is_counted_by_key_route_and_target",
    "humpyard_cost_usd_total": "test_usage_is_counted_by_key_route_and_target",
    "humpyard_stream_direct_writes_total": "test_a_stream_relayed_directly_is_counted",
}


def scrape(gw: Running) -> dict[str, float]:
    """``name{labels}`` (labels as written) → value, for every series."""
    with gw.client(**gw._auth) as c:
        r = c.get("/metrics")
    assert r.status_code == 200
    out: dict[str, float] = {}
    for line in r.text.splitlines():
        m = SERIES.match(line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def chat(gw: Running, model: str, **extra: object) -> httpx.Response:
    with gw.client() as c:
        return c.post("/v1/chat/completions", json={"model": model, "messages": MSG, **extra})


def providers(**urls: str) -> str:
    return "".join(f'[providers.{name}]\nbase_url = "{url}"\n' for name, url in urls.items())


def test_every_declared_metric_has_a_scenario() -> None:
    assert set(SCENARIOS) == GatewayMetrics(Metrics()).names()
    assert all(callable(globals().get(name)) for name in SCENARIOS.values())


def test_a_served_request() -> None:
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
""") as gw:
        assert chat(gw, "t").status_code == 200
        gw.recorded(1)
        m = scrape(gw)
    assert m['humpyard_requests_total{route="t",target="t",status="200"}'] == 1
    assert m["humpyard_ledger_batch_size_count"] >= 1
    assert m["humpyard_ledger_write_seconds_count"] >= 1
    assert m["humpyard_ledger_queue_depth"] == 0 and m["humpyard_ledger_lag_seconds"] == 0
    assert m['humpyard_request_duration_seconds_count{route="t"}'] == 1
    assert m['humpyard_upstream_attempts_total{target="t",provider="p",outcome="ok"}'] == 1
    assert m['humpyard_target_latency_seconds{target="t"}'] > 0
    assert m["humpyard_gateway_overhead_seconds_count"] == 1
    assert m['humpyard_endpoint_state{endpoint="p/m",state="healthy"}'] == 1
    assert m['humpyard_endpoint_state{endpoint="p/m",state="cooling_down"}'] == 0


def test_a_stated_retry_time_cools_and_skips() -> None:
    with FakeUpstream() as bad, FakeUpstream() as good, running_gateway(
            providers(bad=bad.url, good=good.url) + """
[targets.first]
endpoints = [{ provider = "bad", model = "m" }]
[targets.second]
endpoints = [{ provider = "good", model = "m" }]
[routes.r]
targets = ["first", "second"]
""") as gw:
        bad.script(status(429, headers={"Retry-After": "30"}))
        assert chat(gw, "r").status_code == 200  # failed over
        assert chat(gw, "r").status_code == 200  # first is cold: skipped
        m = scrape(gw)
    assert m["humpyard_retry_after_honored_total"] == 1
    assert m['humpyard_health_skips_total{route="r",target="first"}'] == 1
    assert m['humpyard_endpoint_state{endpoint="bad/m",state="cooling_down"}'] == 1
    assert m['humpyard_endpoint_state{endpoint="bad/m",state="healthy"}'] == 0


def test_a_declared_capability_removes_a_target() -> None:
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
[targets.plain]
endpoints = [{ provider = "p", model = "small", tools = false }]
[targets.tooled]
endpoints = [{ provider = "p", model = "big" }]
[routes.r]
targets = ["plain", "tooled"]
""") as gw:
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        assert chat(gw, "r", tools=tools).status_code == 200
        m = scrape(gw)
    key = 'humpyard_capability_skips_total{route="r",target="plain",reason="tools_unsupported"}'
    assert m[key] == 1


def test_a_strict_route_blocks_a_fallback() -> None:
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
[targets.mine]
class = "private"
endpoints = [{ provider = "p", model = "local" }]
[targets.theirs]
class = "public"
endpoints = [{ provider = "p", model = "public" }]
[routes.r]
targets = ["mine", "theirs"]
allowed_classes = ["private"]
""") as gw:
        up.script(status(500))
        assert chat(gw, "r").status_code == 500
        m = scrape(gw)
    assert m['humpyard_fallback_blocked_total{route="r"}'] == 1


def test_an_override_is_counted_and_aged() -> None:
    clock = FakeClock()
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
[targets.a]
endpoints = [{ provider = "p", model = "m" }]
""", clock=clock) as gw:
        with gw.client() as c:
            r = c.post("/v1/overrides", json={"kind": "disable_target", "subject": "a",
                                              "reason": "test"})
            assert r.status_code == 201
        clock.advance(90)
        m = scrape(gw)
    assert m['humpyard_overrides_active{kind="disable_target"}'] == 1
    assert m['humpyard_overrides_active{kind="pin_route"}'] == 0
    assert m["humpyard_override_oldest_age_seconds"] == 90


def test_a_refused_endpoint_is_redialled() -> None:
    with running_gateway(f"""
[providers.gone]
base_url = "{closed_port_url()}"
connect_retry_window_secs = 2
[targets.t]
endpoints = [{{ provider = "gone", model = "m" }}]
""", clock=FakeClock()) as gw:
        assert chat(gw, "t").status_code == 502
        m = scrape(gw)
    assert m['humpyard_routability_resends_total{endpoint="gone/m"}'] == 1
    assert m["humpyard_routability_resend_seconds_count"] == 1


def test_a_quota_poll_sets_the_percent() -> None:
    usage = {"usage": {"rolling": {"status": "ok", "percent": 12.5,
                                   "resetsAt": "2099-01-01T05:00:00Z"}}}
    with FakeUpstream() as up:
        up.default = status(200, usage)
        with running_gateway(providers(p=up.url) + """
quota_source = "opencode-go"
api_key_env = "P_KEY"
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
""", env={"P_KEY": "k-p"}) as gw:
            m: dict[str, float] = {}
            for _ in range(200):  # the poller runs in the background from start-up
                m = scrape(gw)
                if 'humpyard_quota_percent{provider="p",window="rolling"}' in m:
                    break
                up.wait_for_requests(len(up.requests) + 1, timeout=0.05)
    assert m['humpyard_quota_percent{provider="p",window="rolling"}'] == 12.5


def test_spend_is_shown_against_the_budget() -> None:
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
[targets.paid]
endpoints = [{ provider = "p", model = "m", price = { input = 2.0, output = 8.0 } }]
[keys.ci]
key_env = "CI_KEY"
admin = true
budget = { usd = 10.0, period = "day" }
""", env={"CI_KEY": "k-ci"}, admin_key="k-ci") as gw:
        up.script(ok("hi", usage={"prompt_tokens": 1_000_000, "completion_tokens": 0}))
        with gw.client(authorization="Bearer k-ci") as c:
            r = c.post("/v1/chat/completions", json={"model": "paid", "messages": MSG})
        assert r.status_code == 200
        gw.recorded(1)
        gw.gw.invalidate()
        m = scrape(gw)
    assert m['humpyard_budget_spend_usd{key="ci"}'] == 2.0


def test_usage_is_counted_by_key_route_and_target() -> None:
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
[targets.paid]
endpoints = [{ provider = "p", model = "m", price = { input = 2.0, output = 8.0 } }]
[routes.work]
targets = ["paid"]
[keys.ci]
key_env = "CI_KEY"
[keys.ops]
key_env = "OPS_KEY"
admin = true
""", env={"CI_KEY": "k-ci", "OPS_KEY": "k-ops"}, admin_key="k-ops") as gw:
        up.script(ok("hi", usage={"prompt_tokens": 1000, "completion_tokens": 250,
                                  "cache_read_input_tokens": 400}),
                  ok("hi", usage={"prompt_tokens": 3000, "completion_tokens": 50}))
        with gw.client(authorization="Bearer k-ci") as c:
            for _ in range(2):
                assert c.post("/v1/chat/completions",
                              json={"model": "work", "messages": MSG}).status_code == 200
        gw.recorded(2)
        m = scrape(gw)
    series = 'key="ci",route="work",target="paid"'
    assert m[f'humpyard_tokens_total{{{series},kind="input"}}'] == 4000
    assert m[f'humpyard_tokens_total{{{series},kind="output"}}'] == 300
    assert m[f'humpyard_tokens_total{{{series},kind="cache_read"}}'] == 400
    assert f'humpyard_tokens_total{{{series},kind="cache_write"}}' not in m  # none written
    # 4000 input at $2/M and 300 output at $8/M
    assert m[f"humpyard_cost_usd_total{{{series}}}"] == pytest.approx(0.008 + 0.0024)


def test_a_failing_store_loses_decisions_counted() -> None:
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
""") as gw:
        gw.gw.store.close()  # every write from now on fails
        assert chat(gw, "t").status_code == 200  # the answer does not depend on the ledger
        gw.recorded(1)
        m = scrape(gw)
    assert m['humpyard_ledger_lost_total{kind="decision",reason="error"}'] == 1


def poll(gw: Running, series: str, want: float, seconds: float = 10.0) -> dict[str, float]:
    """Scrape until ``series`` reads ``want`` (or the deadline passes); the last scrape."""
    deadline = time.monotonic() + seconds
    m = scrape(gw)
    while m.get(series) != want and time.monotonic() < deadline:
        time.sleep(0.02)
        m = scrape(gw)
    return m


def test_a_provider_at_its_concurrency_limit() -> None:
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
max_concurrent = 1
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
[router]
slot_wait_secs = 1.0
""") as gw:
        up.script(delay(3.0, ok("slow")))
        codes: list[int] = []
        calls = [threading.Thread(target=lambda: codes.append(chat(gw, "t").status_code))
                 for _ in range(2)]
        calls[0].start()
        assert up.wait_for_requests(1, timeout=10)
        busy = poll(gw, 'humpyard_upstream_in_flight{provider="p"}', 1)
        calls[1].start()
        waiting = poll(gw, 'humpyard_upstream_waiting{provider="p"}', 1)
        for t in calls:
            t.join(30)
        m = scrape(gw)
    assert busy['humpyard_upstream_in_flight{provider="p"}'] == 1
    assert waiting['humpyard_upstream_waiting{provider="p"}'] == 1
    assert sorted(codes) == [200, 503]
    assert m['humpyard_upstream_slot_timeouts_total{provider="p"}'] == 1
    assert m['humpyard_upstream_in_flight{provider="p"}'] == 0


def test_refusals_before_routing_are_counted_and_sampled() -> None:
    with FakeUpstream() as up, running_gateway("refused_per_minute = 2\n"
                                               + providers(p=up.url) + """
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
[keys.ops]
key_env = "OPS_KEY"
admin = true
""", env={"OPS_KEY": "k-ops"}, admin_key="k-ops") as gw:
        with httpx.Client(base_url=gw.url, timeout=30) as c:
            for _ in range(5):
                assert c.post("/v1/chat/completions", json={"model": "t", "messages": MSG},
                              headers={"authorization": "Bearer wrong"}).status_code == 401
            for _ in range(3):
                assert c.get("/v1/no-such-path").status_code == 404
        assert gw.gw.writer.flush(5)
        m = scrape(gw)
        recorded = gw.decisions(limit=100)
    assert m['humpyard_refused_total{reason="invalid_api_key"}'] == 5
    assert m['humpyard_refused_total{reason="not_found"}'] == 3
    assert len(recorded) == 2  # two a minute; the rest counted only


def test_a_dynamodb_transaction_conflict_is_counted(tmp_path: Path) -> None:
    # The Lambda wiring on moto, where DynamoDB cancels the first transaction (creating an
    # override writes the override and the overrides' version in one) with a conflict.
    path = tmp_path / "humpyard.toml"
    with FakeUpstream() as up, moto_tables() as client:
        path.write_text(providers(p=up.url) + """
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
""")
        env = LambdaEnv.from_environ({"HUMPYARD_STATE_TABLE": STATE,
                                      "HUMPYARD_LEDGER_TABLE": LEDGER,
                                      "HUMPYARD_CONFIG": str(path)})
        conflicting = Failing(client, times=1, code="TransactionCanceledException",
                              reasons=["None", "TransactionConflict"],
                              operations=frozenset({"TransactWriteItems"}))
        live = build_gateway(env, dynamodb=conflicting, environ={})
        with ServerThread(create_app(live.config, gateway=live)) as srv:
            gw = Running(url=srv.url, gw=live, config=live.config)
            gw._auth = {}
            with gw.client() as c:
                r = c.post("/v1/overrides", json={"kind": "disable_target", "subject": "t",
                                                  "reason": "test"})
                assert r.status_code == 201, r.text
            m = scrape(gw)
        live.writer.close()
        live.store.close()
    assert m["humpyard_dynamodb_transaction_conflicts_total"] == 1
def test_a_translation_that_drops_fields() -> None:
    """Claude Code's cache marks and an unknown field (whose name is the client's)
    on /v1/messages, Codex's hosted tool on /v1/responses: counted by kind, and the
    client's field name never becomes a label value."""
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
""") as gw, gw.client() as c:
        assert c.post("/v1/messages", json={
            "model": "t", "max_tokens": 16, "messages": MSG, "cache_control":
            {"type": "ephemeral"}, "made_up_field_1234": 1}).status_code == 200
        assert c.post("/v1/responses", json={
            "model": "t", "input": "hi", "tools": [
                {"type": "function", "name": "f", "parameters": {}},
                {"type": "web_search"}]}).status_code == 200
        m = scrape(gw)
    drops = {k: v for k, v in m.items() if k.startswith("humpyard_translation_drops_total")}
    assert drops == {
        'humpyard_translation_drops_total{protocol="anthropic",what="cache_control"}': 1,
        'humpyard_translation_drops_total{protocol="anthropic",what="ignored_field"}': 1,
        'humpyard_translation_drops_total{protocol="responses",what="hosted_tool"}': 1,
    }


def test_a_client_that_leaves_is_counted() -> None:
    with FakeUpstream() as up, running_gateway(providers(p=up.url) + """
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
""") as gw:
        up.script(stall())
        body = b'{"model":"t","messages":[{"role":"user","content":"hi"}]}'
        host, port = gw.url.split("//")[1].split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            assert up.wait_for_requests(1)
        gw.recorded(1)  # the client left while the upstream stalled
        m = scrape(gw)
    assert m['humpyard_client_disconnects_total{phase="waiting"}'] == 1
    assert m['humpyard_requests_total{route="t",target="-",status="499"}'] == 1
    assert m['humpyard_upstream_attempts_total{target="t",provider="p",outcome="cancelled"}'] == 1
def test_client_connections_refused_by_serve(tmp_path: Path) -> None:
    """``humpyard serve`` (the only place client connections are guarded): a
    connection that never sends a request head, and one whose head is too large."""
    import socket

    from tests.durability.process import ServeProcess
    cfg = tmp_path / "humpyard.toml"
    cfg.write_text("[server]\nheader_timeout_secs = 0.5\nmax_header_bytes = 1024\n")
    with ServeProcess(cfg, tmp_path / "serve.log") as server:
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        assert idle.recv(1) == b""  # closed by the gateway after the header timeout
        big = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        big.sendall(b"GET / HTTP/1.1\r\nx: " + b"a" * 4096)
        assert big.recv(64).startswith(b"HTTP/1.1 431 ")
        idle.close()
        big.close()
        r = httpx.get(server.url + "/metrics", timeout=5)
    assert 'humpyard_connections_refused_total{reason="header_timeout"} 1' in r.text
    assert 'humpyard_connections_refused_total{reason="headers_too_large"} 1' in r.text


def test_a_stream_relayed_directly_is_counted() -> None:
    from tests.support.rawserver import CLOSE, Pause, RawServer
    from tests.wire.test_relay_cuts import EVENTS, HEAD
    script = [HEAD, *[x for e in EVENTS for x in (e, Pause(0.01))], CLOSE]
    with RawServer(script) as up, running_gateway(providers(p=up.url) + """
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
""") as gw:
        r = chat(gw, "t", stream=True, stream_options={"include_usage": True})
        assert r.status_code == 200 and b"[DONE]" in r.content
        gw.recorded(1)
        m = scrape(gw)
    # the reads after the first content that name neither usage nor error, nor end it
    assert m['humpyard_stream_direct_writes_total{protocol="openai"}'] >= 2


def test_a_stream_asked_with_expect_is_relayed_directly_too() -> None:
    """A request with ``Expect: 100-continue`` has its ``send`` wrapped (an answer
    before its body closes the connection: ``http1.py``); the wrapper once hid the
    cycle from the direct relay, and such streams all went through the request's
    task."""
    from tests.support.rawserver import CLOSE, Pause, RawServer
    from tests.wire.test_relay_cuts import EVENTS, HEAD
    script = [HEAD, *[x for e in EVENTS for x in (e, Pause(0.01))], CLOSE]
    with RawServer(script) as up, running_gateway(providers(p=up.url) + """
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
""", own_server=True) as gw:
        with gw.client() as c:
            r = c.post("/v1/chat/completions", headers={"expect": "100-continue"},
                       json={"model": "t", "messages": MSG, "stream": True,
                             "stream_options": {"include_usage": True}})
        assert r.status_code == 200 and b"[DONE]" in r.content
        gw.recorded(1)
        m = scrape(gw)
    assert m['humpyard_stream_direct_writes_total{protocol="openai"}'] >= 2

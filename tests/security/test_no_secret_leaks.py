"""No provider or client key in anything the gateway writes, whatever happens.

One gateway with known provider keys (five providers) and client keys (one
from the environment, one given as ``key_sha256``) takes traffic through
every path: answers (buffered, streamed, Anthropic), upstreams that echo the
``Authorization`` header back in a 401 body, a 500 text body, a long body
cut where the key is, a 200 that is not a completion, stream errors before
and after content and a broken stream event; resets, refused connections,
timeouts; malformed and refused requests; a bug raised inside the call. Then
everything it wrote is searched for each key and each key's SHA-256: DEBUG
logs (the root logger, tracebacks included), every response's status,
headers and body, every admin surface, and the SQLite ledger's raw bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import httpx
import pytest

from tests.security.support import (
    ALL_SECRETS,
    ALPHA_KEY,
    BETA_KEY,
    BOOM_KEY,
    DOWN_KEY,
    PROVIDER_KEY,
    QUOTA_KEY,
    SLOW_KEY,
    WRONG_KEY,
    EchoAuth,
    EchoAuthHeader,
    ExplodingTransport,
    bearer,
    chat,
    client,
    describe,
    find_leaks,
    serving,
)
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import closed_port_url
from tests.support.steps import reset, stall, status, stream_error

UPSTREAM_PRIVATE = "upstream-private-header-value"
ENV = {"PK_MAIN": PROVIDER_KEY, "PK_DOWN": DOWN_KEY, "PK_SLOW": SLOW_KEY,
       "PK_BOOM": BOOM_KEY, "PK_QUOTA": QUOTA_KEY, "ALPHA_KEY": ALPHA_KEY}


def config(up: FakeUpstream, quota: FakeUpstream) -> str:
    beta = hashlib.sha256(BETA_KEY.encode()).hexdigest()
    return f"""
max_body_bytes = 65536
quota_poll_secs = 3600

[providers.main]
base_url = "{up.url}"
api_key_env = "PK_MAIN"
headers = {{ "X-Title" = "humpyard-tests" }}
[providers.down]
base_url = "{closed_port_url()}"
api_key_env = "PK_DOWN"
[providers.slow]
base_url = "{up.url}"
api_key_env = "PK_SLOW"
timeout_secs = 0.5
[providers.boom]
base_url = "{up.origin}/boom/v1"
api_key_env = "PK_BOOM"
[providers.metered]
base_url = "{quota.url}"
api_key_env = "PK_QUOTA"
quota_source = "opencode-go"

[targets.t-ok]
endpoints = [{{ provider = "main", model = "m", price = {{ input = 1.0, output = 2.0 }} }}]
[targets.t-down]
endpoints = [{{ provider = "down", model = "m" }}]
[targets.t-slow]
endpoints = [{{ provider = "slow", model = "m" }}]
[targets.t-boom]
endpoints = [{{ provider = "boom", model = "m" }}]
[targets.t-metered]
endpoints = [{{ provider = "metered", model = "m" }}]

[routes.auto]
targets = ["t-ok"]

[[select]]
name = "by-client"
when = {{ model = "auto", header = {{ "x-client" = "leaky*" }} }}
route = "t-ok"

[keys.alpha]
key_env = "ALPHA_KEY"
manage_overrides = true
admin = true
budget = {{ usd = 100.0, period = "day" }}
[keys.beta]
key_sha256 = "{beta}"
allowed_routes = ["auto", "t-ok"]
"""


@pytest.fixture
def upstreams():
    with FakeUpstream() as up, FakeUpstream(default=EchoAuth(401)) as quota:
        yield up, quota


def test_no_key_anywhere_the_gateway_writes(upstreams, tmp_path: Path, caplog) -> None:
    up, quota = upstreams
    caplog.set_level(logging.DEBUG)  # the root logger: every library's debug lines too
    ledger = tmp_path / "ledger.db"
    outputs: list[str] = []
    responses: dict[str, httpx.Response] = {}

    with serving(config(up, quota), ENV, ledger=str(ledger),
                 transport=ExplodingTransport()) as gw:
        with client(gw.url) as c:

            def send(name: str, path: str, body: object, key: str | None = ALPHA_KEY,
                     **headers: str) -> httpx.Response:
                hdrs = {**(bearer(key) if key else {}), **headers}
                if isinstance(body, bytes):
                    r = c.post(path, content=body, headers={"content-type": "application/json",
                                                            **hdrs})
                else:
                    r = c.post(path, json=body, headers=hdrs)
                responses[name] = r
                return r

            def scripted(name: str, step, body: dict, path: str = "/v1/chat/completions",
                         key: str = ALPHA_KEY) -> httpx.Response:
                up.script(step)
                return send(name, path, body, key)

            anthropic = {"model": "t-ok", "max_tokens": 16, "messages": [
                {"role": "user", "content": "hi"}]}

            # answers, with client headers that must go nowhere
            send("ok", "/v1/chat/completions", chat("auto"), **{
                "x-client": "leaky-" + ALPHA_KEY, "cookie": f"s={BETA_KEY}",
                "proxy-authorization": f"Basic {BETA_KEY}", "x-api-key": ALPHA_KEY})
            send("ok-stream", "/v1/chat/completions", chat("t-ok", stream=True))
            send("ok-beta", "/v1/chat/completions", chat("auto"), key=None,
                 **{"x-api-key": BETA_KEY})
            send("ok-anthropic", "/v1/messages", anthropic, key=None, **{"x-api-key": ALPHA_KEY})
            send("ok-anthropic-stream", "/v1/messages", {**anthropic, "stream": True})
            # (an upstream's own response headers are logged by httpcore at DEBUG, so
            # the key echoed in a header is covered by test_serve_logs with the CLI's logging)
            scripted("upstream-headers", EchoAuthHeader(UPSTREAM_PRIVATE), chat("t-ok"))
            # upstream errors that quote the provider key
            scripted("401-echo", EchoAuth(401), chat("t-ok"))
            scripted("401-echo-stream", EchoAuth(401), chat("t-ok", stream=True))
            scripted("401-echo-anthropic", EchoAuth(401), anthropic, path="/v1/messages")
            scripted("500-key", status(500, {"error": {"message": f"db down for {PROVIDER_KEY}"}}),
                     chat("t-ok"))
            scripted("502-text", EchoAuth(502, form="text"), chat("t-ok"))
            # the gateway keeps the first 500 characters of a text body: cut inside the key
            scripted("503-cut", EchoAuth(503, form="text", pad=450), chat("t-ok"))
            scripted("200-not-completion", EchoAuth(200), chat("t-ok"))
            scripted("stream-error-first", EchoAuth(200, form="stream_before_content"),
                     chat("t-ok", stream=True))
            scripted("stream-error-after", EchoAuth(200, form="stream_after_content"),
                     chat("t-ok", stream=True))
            scripted("stream-error-anthropic", EchoAuth(200, form="stream_after_content"),
                     {**anthropic, "stream": True}, path="/v1/messages")
            scripted("stream-bad-event", EchoAuth(200, form="stream_bad_event"),
                     chat("t-ok", stream=True))
            scripted("stream-error-plain", stream_error(f"overloaded, key {PROVIDER_KEY}"),
                     chat("t-ok", stream=True))
            # transport failures
            scripted("reset", reset(), chat("t-ok"))
            send("refused", "/v1/chat/completions", chat("t-down"))
            scripted("timeout", stall(), chat("t-slow"))
            # a bug inside the call
            send("internal", "/v1/chat/completions", chat("t-boom"))
            send("internal-anthropic", "/v1/messages", {**anthropic, "model": "t-boom"})
            # malformed and refused requests
            send("bad-json", "/v1/chat/completions", b'{"model": "t-ok", ')
            send("no-key", "/v1/chat/completions", chat("t-ok"), key=None)
            send("wrong-key", "/v1/chat/completions", chat("t-ok"), key=WRONG_KEY)
            send("wrong-x-api-key", "/v1/messages", anthropic, key=None,
                 **{"x-api-key": WRONG_KEY})
            send("forbidden", "/v1/chat/completions", chat("t-down"), key=BETA_KEY)
            send("unknown-model", "/v1/chat/completions", chat("nope"))
            send("too-big", "/v1/chat/completions",
                 chat("t-ok", messages=[{"role": "user", "content": "x" * 70000}]))
            send("bad-field", "/v1/chat/completions", chat("t-ok", max_tokens="many"))
            send("count-tokens", "/v1/messages/count_tokens", anthropic)

            # admin surfaces, read and written
            send("explain", "/v1/route/explain", {
                "model": "auto", "headers": {"x-client": "leaky", "authorization": ALPHA_KEY}})
            send("override", "/v1/overrides", {"kind": "disable_target", "subject": "t-down",
                                               "reason": "down", "expires_in_secs": 60})
            send("override-forbidden", "/v1/overrides",
                 {"kind": "disable_target", "subject": "t-down"}, key=BETA_KEY)
            assert quota.wait_for_requests(1)
            admin = bearer(ALPHA_KEY)
            echo_id = responses["401-echo"].headers["x-humpyard-request-id"]
            gets = ["/v1/config", "/v1/health", "/metrics", "/v1/quota", "/v1/quota/history",
                    "/v1/overrides", "/v1/overrides/audit", "/v1/models",
                    "/v1/decisions?limit=1000", f"/v1/decisions/{echo_id}",
                    *(f"/v1/stats?group_by={g}" for g in ("route", "target", "provider", "key"))]
            for path in gets:
                r = c.get(path, headers=admin)
                assert r.status_code == 200, (path, r.text)
                responses["GET " + path] = r
        gw.gw.writer.flush(5)
        live_files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        decisions = responses["GET /v1/decisions?limit=1000"].json()["decisions"]

    on_disk = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    # the traffic did what it was meant to, so the sweep below means something
    expect = {"ok": 200, "ok-stream": 200, "ok-beta": 200, "ok-anthropic": 200,
              "upstream-headers": 200, "401-echo": 401, "401-echo-stream": 401,
              "401-echo-anthropic": 401, "500-key": 500, "502-text": 502, "503-cut": 503,
              "200-not-completion": 502, "stream-error-first": 502, "stream-error-after": 200,
              "stream-error-anthropic": 200, "stream-bad-event": 502, "stream-error-plain": 502,
              "ok-anthropic-stream": 200, "reset": 502, "refused": 502, "timeout": 504,
              "internal": 500, "internal-anthropic": 500, "bad-json": 400, "no-key": 401,
              "wrong-key": 401, "wrong-x-api-key": 401, "forbidden": 403,
              "unknown-model": 404, "too-big": 413, "bad-field": 400, "count-tokens": 200,
              "explain": 200, "override": 201, "override-forbidden": 403}
    assert {n: responses[n].status_code for n in expect} == expect
    assert "[redacted]" in responses["401-echo"].json()["error"]["message"]
    assert "Incorrect API key provided" in responses["401-echo"].json()["error"]["message"]
    assert "[redacted]" in responses["stream-error-after"].text
    assert responses["503-cut"].json()["error"]["message"].endswith("[redacted]")
    assert responses["explain"].json()["selected"]["rule"] == "by-client"
    assert UPSTREAM_PRIVATE not in describe(responses["upstream-headers"])
    assert len(decisions) >= 25
    assert any("[redacted]" in json.dumps(d) for d in decisions)
    assert {r.headers["authorization"] for r in up.requests} <= {
        f"Bearer {k}" for k in (PROVIDER_KEY, SLOW_KEY)}
    assert quota.requests[0].headers["authorization"] == f"Bearer {QUOTA_KEY}"
    assert logging.getLogger().getEffectiveLevel() == logging.DEBUG  # DEBUG was captured
    assert any(r.name == "humpyard.request" for r in caplog.records)  # and the request lines

    outputs += [describe(r) for r in responses.values()]
    outputs.append(caplog.text)  # formatted lines, tracebacks included
    for rec in caplog.records:
        outputs += [rec.getMessage(), repr(rec.args), rec.exc_text or "", rec.stack_info or ""]
    leaks = {i: find_leaks(text) for i, text in enumerate(outputs) if find_leaks(text)}
    assert not leaks, {i: (found, outputs[i][:2000]) for i, found in leaks.items()}
    for name, raw in (*live_files.items(), *on_disk.items()):
        assert not find_leaks(raw), f"{name} holds a secret: {find_leaks(raw)}"
    assert "ledger.db" in on_disk and len(ALL_SECRETS) == 8

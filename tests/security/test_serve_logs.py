"""``humpyard serve --log-level DEBUG``: its whole output holds no key.

The in-process sweep (``test_no_secret_leaks``) captures the root logger;
this one runs the real CLI, with the logging it configures, against an
upstream that echoes the provider key in error bodies, in a stream's error
event and in its own response headers, and greps everything the process
printed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.durability.process import ServeProcess
from tests.security.support import (
    ALPHA_KEY,
    BETA_KEY,
    PROVIDER_KEY,
    WRONG_KEY,
    EchoAuth,
    EchoAuthHeader,
    bearer,
    chat,
    client,
    find_leaks,
)
from tests.support.fake_upstream import FakeUpstream


def test_debug_output_of_humpyard_serve_has_no_key(tmp_path: Path) -> None:
    beta = hashlib.sha256(BETA_KEY.encode()).hexdigest()
    cfg = tmp_path / "humpyard.toml"
    log = tmp_path / "serve.log"
    anthropic = {"model": "t", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with FakeUpstream() as up:
        cfg.write_text(f"""
[ledger]
path = "{tmp_path / 'ledger.db'}"
[providers.p]
base_url = "{up.url}"
api_key_env = "HY_TEST_PROVIDER_KEY"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
[keys.alpha]
key_env = "HY_TEST_ALPHA_KEY"
[keys.beta]
key_sha256 = "{beta}"
""")
        up.script(EchoAuthHeader(), EchoAuth(401), EchoAuth(500, form="text"),
                  EchoAuth(200, form="stream_after_content"),
                  EchoAuth(200, form="stream_after_content"))
        env = {"HY_TEST_PROVIDER_KEY": PROVIDER_KEY, "HY_TEST_ALPHA_KEY": ALPHA_KEY}
        with ServeProcess(cfg, log, env=env, log_level="DEBUG") as server, \
                client(server.url, **bearer(ALPHA_KEY)) as c:
            statuses = [
                c.post("/v1/chat/completions", json=chat("t")).status_code,
                c.post("/v1/chat/completions", json=chat("t")).status_code,
                c.post("/v1/chat/completions", json=chat("t")).status_code,
                c.post("/v1/chat/completions", json=chat("t", stream=True)).status_code,
                c.post("/v1/messages", json={**anthropic, "stream": True}).status_code,
                c.post("/v1/chat/completions", json=chat("t"),
                       headers={"x-api-key": BETA_KEY, "authorization": ""}).status_code,
                c.post("/v1/chat/completions", json=chat("t"),
                       headers=bearer(WRONG_KEY)).status_code,
                c.get("/v1/decisions").status_code,
            ]
    assert statuses == [200, 401, 500, 200, 200, 200, 401, 200]
    output = log.read_text(errors="replace")
    assert "INFO humpyard.request request request_id=" in output  # one line per request
    assert not find_leaks(output), [line for line in output.splitlines() if find_leaks(line)]

"""``humpyard --log-level DEBUG serve`` on DynamoDB: the output holds no AWS credential.

A real ``serve`` child on a moto server, with a session token in its
environment that appears nowhere else; botocore signs every call with it (the
``X-Amz-Security-Token`` header), and its DEBUG records would quote the headers.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from lambda_support import SerialMotoServer, gateway_config
from test_serve_on_dynamodb import AWS_ENV, fresh_tables, store_toml

from tests.durability.process import ServeProcess
from tests.support import FakeUpstream
from tests.support.polling import until

TOKEN = "sessionTOKENnever1n7heLOG"
SECRET = "secretKEYnever1n7heLOGeither"


def test_debug_output_of_serve_on_dynamodb_has_no_aws_credential(
        moto: SerialMotoServer, tmp_path: Path) -> None:
    """Before: botocore's and urllib3's DEBUG lines went out with humpyard's, and
    botocore's carried the token in every signed request's headers."""
    with FakeUpstream() as primary, FakeUpstream() as backup:
        state, ledger = fresh_tables(moto.url)
        path = tmp_path / "humpyard.toml"
        path.write_text(gateway_config(primary.url, backup.url)
                        + store_toml(moto.url, state, ledger, stats_flush_secs=0))
        log = tmp_path / "serve.log"
        env = {**AWS_ENV, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN}
        with ServeProcess(path, log, env=env, log_level="DEBUG") as proc:
            r = httpx.post(proc.url + "/v1/chat/completions", timeout=20, json={
                "model": "auto", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            rid = r.headers["x-humpyard-request-id"]
            until(lambda: httpx.get(proc.url + f"/v1/decisions/{rid}",
                                    timeout=20).status_code == 200, "the decision written")
    output = log.read_text(errors="replace")
    assert "INFO humpyard.request request request_id=" in output
    assert moto.calls.get("BatchWriteItem", 0) > 0  # signed calls were made
    assert TOKEN not in output and SECRET not in output
    assert " DEBUG botocore" not in output and " DEBUG urllib3" not in output

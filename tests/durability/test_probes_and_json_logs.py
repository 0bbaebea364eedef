"""``/healthz``, ``/readyz`` and ``serve --log-format json`` on a real ``humpyard serve``.

Issue 29: what load balancers, ECS and Kubernetes probe must answer without a
key while the admin API stays keyed; readiness must turn 503 when the ledger
cannot be written any more (its directory removed, a real operator mistake);
JSON logs are one object per line with the fields of the Lambda lines.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess
from tests.support.fake_upstream import FakeUpstream
from tests.support.steps import status

KEY = "probe-test-key-0123456789"
LAMBDA_FIELDS = {"level", "location", "message", "timestamp", "service"}


def config(tmp_path: Path, upstream_url: str = "http://127.0.0.1:9/v1") -> Path:
    ledger_dir = tmp_path / "ledger"
    ledger_dir.mkdir()
    path = tmp_path / "humpyard.toml"
    path.write_text(f'''
[providers.up]
base_url = "{upstream_url}"
max_retries = 0

[targets.t]
endpoints = [{{ provider = "up", model = "m" }}]

[routes.auto]
type = "passthrough"
targets = ["t"]

[keys.me]
key_env = "PROBE_TEST_KEY"

[ledger]
path = "{ledger_dir / 'humpyard.db'}"
''')
    return path


def ready_until(gw: ServeProcess, code: int, timeout: float = 10.0) -> httpx.Response:
    """GET /readyz until it answers ``code`` (the store's answer is reused for a
    second, http/probes.py) or the deadline passes; the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(gw.url + "/readyz", timeout=5)
        if r.status_code == code or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def serve(tmp_path: Path, cfg: Path, *args: str) -> ServeProcess:
    return ServeProcess(cfg, tmp_path / "serve.log", env={"PROBE_TEST_KEY": KEY},
                        args=args)


def test_probes_answer_without_a_key_while_the_admin_api_stays_keyed(tmp_path):
    with serve(tmp_path, config(tmp_path)) as gw:
        health = httpx.get(gw.url + "/healthz", timeout=5)
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert httpx.head(gw.url + "/healthz", timeout=5).status_code == 200
        ready = httpx.get(gw.url + "/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"status": "ready",
                                "checks": {"config": "ok", "writer": "ok", "store": "ok"}}
        assert ready.headers["cache-control"] == "no-store"
        # the admin surface is still keyed
        assert httpx.get(gw.url + "/v1/health", timeout=5).status_code == 401
        assert httpx.get(gw.url + "/v1/health", timeout=5,
                         headers={"authorization": f"Bearer {KEY}"}).status_code == 200
        # nothing from the configuration in the probes' answers
        for path in ("/healthz", "/readyz"):
            text = httpx.get(gw.url + path, timeout=5).text
            assert "ledger" not in text and "humpyard.db" not in text and "auto" not in text


def test_readyz_is_503_once_the_ledger_directory_is_gone(tmp_path):
    cfg = config(tmp_path)
    with serve(tmp_path, cfg) as gw:
        assert httpx.get(gw.url + "/readyz", timeout=5).status_code == 200
        shutil.rmtree(tmp_path / "ledger")
        ready = ready_until(gw, 503)
        assert ready.status_code == 503, ready.text
        assert ready.json()["status"] == "not ready"
        assert ready.json()["checks"]["store"] == "unreachable"
        assert str(tmp_path) not in ready.text  # the path goes to the log, not the caller
        # liveness is unaffected: restarting would not bring the directory back
        assert httpx.get(gw.url + "/healthz", timeout=5).status_code == 200
        # a second probe does not log the transition again
        assert httpx.get(gw.url + "/readyz", timeout=5).status_code == 503
    log = gw.output()
    assert log.count("not ready: store unreachable") == 1, log
    assert "is gone" in log


def test_readyz_is_503_when_the_ledger_file_is_replaced(tmp_path):
    cfg = config(tmp_path)
    with serve(tmp_path, cfg) as gw:
        db = tmp_path / "ledger" / "humpyard.db"
        moved = tmp_path / "ledger" / "old.db"
        db.rename(moved)
        db.write_bytes(b"")
        ready = ready_until(gw, 503)
        assert ready.status_code == 503, ready.text
        assert ready.json()["checks"]["store"] == "unreachable"


def wait_for_lines(gw: ServeProcess, needle: str, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = gw.output().splitlines()
        if any(needle in line for line in lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_json_logs_are_one_object_per_line_with_the_lambda_fields(tmp_path):
    evil = "bad \x1b[31mred\x1b[0m\nforged line\r\x00"
    with FakeUpstream(default=status(500, {"error": {"message": evil}})) as up:
        cfg = config(tmp_path, up.url)
        with serve(tmp_path, cfg, "--log-format", "json") as gw:
            r = httpx.post(gw.url + "/v1/chat/completions", timeout=10,
                           headers={"authorization": f"Bearer {KEY}"},
                           json={"model": "auto",
                                 "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code >= 500
            rid = r.headers["x-humpyard-request-id"]
            lines = wait_for_lines(gw, rid)
    assert lines, gw.output()
    records = []
    for line in lines:
        assert "\x1b" not in line and "\x00" not in line and "\r" not in line, repr(line)
        record = json.loads(line)  # every line is one JSON object
        assert isinstance(record, dict)
        assert LAMBDA_FIELDS <= set(record), record
        assert record["service"] == "humpyard"
        records.append(record)
    serving = [r for r in records if r["message"].startswith("humpyard serving on")]
    assert serving and serving[0]["level"] == "INFO"
    failed = [r for r in records if rid in r["message"]]
    assert failed and failed[0]["level"] == "WARNING", records
    # the upstream's control characters reached the record, escaped by JSON itself
    assert "\x1b[31mred" in failed[0]["message"] and "\nforged line" in failed[0]["message"]
    assert all("color_message" not in r for r in records)
    assert failed[0]["location"].split(":")[-1].isdigit()
    assert failed[0]["timestamp"].endswith("+0000")


def test_text_logs_stay_the_default(tmp_path):
    with serve(tmp_path, config(tmp_path)) as gw:
        lines = wait_for_lines(gw, "humpyard serving on")
    line = next(ln for ln in lines if "humpyard serving on" in ln)
    assert not line.startswith("{") and " INFO humpyard " in line


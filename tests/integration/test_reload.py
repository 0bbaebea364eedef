"""Live reload: SIGHUP and polling, all or nothing, in-flight requests, carried state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from humpyard.reload import Reloader
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.servers import free_port
from tests.support.steps import delay, ok

MSG = [{"role": "user", "content": "hi"}]


def cfg(a: str, b: str, target: str, extra: str = "") -> str:
    return f"""{extra}
[providers.a]
base_url = "{a}"
[providers.b]
base_url = "{b}"
[targets.ta]
strengths = ["general"]
endpoints = [{{ provider = "a", model = "ma" }}]
[targets.tb]
strengths = ["general"]
endpoints = [{{ provider = "b", model = "mb" }}]
[routes.r]
targets = ["{target}"]
"""


@pytest.fixture
def ups():
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def wait_for(fn, timeout: float = 10.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def served_by(url: str) -> str | None:
    try:
        with httpx.Client(timeout=5) as c:
            r = c.post(url + "/v1/chat/completions", json={"model": "r", "messages": MSG})
    except httpx.HTTPError:
        return None
    return r.headers.get("x-humpyard-target")


@pytest.fixture
def serve(tmp_path: Path):
    procs: list[subprocess.Popen[bytes]] = []

    def start(text: str) -> tuple[str, Path, Path, int]:
        conf = tmp_path / "humpyard.toml"
        conf.write_text(text)
        log = tmp_path / "serve.log"
        port = free_port()
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": str(root / "shared")}
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "humpyard.cli", "serve", "--config", str(conf),
                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env))
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: served_by(url))
        return url, conf, log, procs[-1].pid

    yield start
    for p in procs:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_sighup_reloads_and_an_invalid_file_is_kept_out(ups, serve):
    a, b = ups
    url, conf, log, proc_pid = serve(cfg(a.url, b.url, "ta"))
    assert served_by(url) == "ta"
    # humpyard serve as shipped (serving.py): no "server: uvicorn" header
    r = httpx.post(url + "/v1/chat/completions", json={"model": "r", "messages": MSG})
    assert r.status_code == 200 and "server" not in r.headers and "date" in r.headers
    conf.write_text(cfg(a.url, b.url, "tb"))
    os.kill(proc_pid, signal.SIGHUP)
    wait_for(lambda: served_by(url) == "tb")
    conf.write_text(cfg(a.url, b.url, "tb").replace('targets = ["tb"]', 'targets = ["nope"]'))
    os.kill(proc_pid, signal.SIGHUP)
    wait_for(lambda: b"reload rejected" in log.read_bytes())
    assert b"unknown target 'nope'" in log.read_bytes()
    assert served_by(url) == "tb"


def test_reload_poll_picks_up_a_changed_file(ups, serve):
    a, b = ups
    url, conf, _, _ = serve(cfg(a.url, b.url, "ta", extra="reload_poll_secs = 0.2"))
    assert served_by(url) == "ta"
    time.sleep(0.05)  # a different mtime
    conf.write_text(cfg(a.url, b.url, "tb", extra="reload_poll_secs = 0.2"))
    wait_for(lambda: served_by(url) == "tb")


def test_in_flight_request_finishes_on_its_config_and_health_carries_over(ups, tmp_path):
    a, b = ups
    a.script(delay(1.0, ok("old config")))
    conf = tmp_path / "c.toml"
    conf.write_text(cfg(a.url, b.url, "ta"))
    with running_gateway(conf.read_text()) as gw:
        gw.gw.health.record_failure("b/mb", gw.gw.clock.now(), 60)
        reloader = Reloader(str(conf), lambda: gw.gw.config, gw.gw.swap_config, env={})
        result: dict[str, httpx.Response] = {}
        t = threading.Thread(target=lambda: result.setdefault("r", httpx.post(
            gw.url + "/v1/chat/completions", json={"model": "r", "messages": MSG},
            timeout=10)))
        t.start()
        a.wait_for_requests(1)
        conf.write_text(cfg(a.url, b.url, "tb"))
        assert reloader.reload() is True
        t.join()
        r = result["r"]
        assert r.headers["x-humpyard-target"] == "ta"
        assert r.json()["choices"][0]["message"]["content"] == "old config"
        assert gw.gw.health.view("b/mb", gw.gw.clock.now()).cooldown_source == "retry_after"
        assert served_by(gw.url) == "tb"  # cold but the only target: fail open


def test_pool_membership_change_is_logged(ups, tmp_path, caplog):
    a, b = ups
    text = cfg(a.url, b.url, "ta") + '[routes.pool]\npool = { strength = "general" }\n'
    conf = tmp_path / "c.toml"
    conf.write_text(text)
    with running_gateway(text) as gw:
        reloader = Reloader(str(conf), lambda: gw.gw.config, gw.gw.swap_config, env={})
        conf.write_text(text.replace('[targets.tb]\nstrengths = ["general"]', '[targets.tb]'))
        with caplog.at_level("WARNING", logger="humpyard.reload"):
            assert reloader.reload()
        assert any("pool membership changed route=pool" in r.getMessage()
                   for r in caplog.records)
        assert gw.gw.config.routes["pool"].targets == ("ta",)


def test_a_seeded_random_route_repeats_its_draws_and_restarts_when_redefined(ups, tmp_path):
    a, b = ups
    text = cfg(a.url, b.url, "ta") + ('[routes.rnd]\ntype = "random"\ntargets = ["ta", "tb"]\n'
                                      'weights = [1, 1]\nseed = 7\n')

    def draws(gw, n: int = 12) -> list[str]:
        with httpx.Client(timeout=5) as c:
            return [c.post(gw.url + "/v1/chat/completions",
                           json={"model": "rnd", "messages": MSG}).headers["x-humpyard-target"]
                    for _ in range(n)]

    with running_gateway(text) as gw1:
        first = draws(gw1)
    assert set(first) == {"ta", "tb"}
    with running_gateway(text) as gw2:
        assert draws(gw2) == first  # same seed, same sequence, in a fresh process
        from tests.support.gateway import config_from
        source = gw2.gw.route_rngs["rnd"]
        gw2.gw.swap_config(config_from(text))  # unchanged route: the sequence goes on
        assert gw2.gw.route_rngs["rnd"] is source
        gw2.gw.swap_config(config_from(text.replace("seed = 7", "seed = 8")))
        assert "rnd" not in gw2.gw.route_rngs  # redefined: starts afresh

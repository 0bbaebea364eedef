"""The Bedrock paths under attack: model ids built to confuse the path matcher, junk
bodies, and event-stream clients that leave mid-answer, while a normal client is
served as before.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from pathlib import Path

import httpx

from tests.durability.process import ServeProcess
from tests.support.fake_upstream import FakeUpstream
from tests.support.probe import Probe
from tests.support.steps import ok

KEY = "sk-bedrock-hostile"
CONFIG = """
[providers.p]
base_url = "{url}"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
[routes.r]
targets = ["t"]
[keys.k]
key_env = "K"
"""
# Paced: on one event loop a saturating flood slows everyone alike; what is tested is
# that these requests cost what any refused request costs, never a stall.
PACE = 0.02
BODY = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()


def odd_model(rng: random.Random) -> str:
    pieces = ["%2F", "%2f", "%5C", "%00", "%", "%ZZ", "..", ".", ":", "%3A", "arn", "r",
              "%25", "é", "%C3", "?", "#", ";", "x" * 300]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))


def attack(url: str, seed: int, statuses: list[int]) -> None:
    rng = random.Random(seed)
    host, port = url.removeprefix("http://").split(":")
    with httpx.Client(base_url=url, timeout=30,
                      headers={"authorization": f"Bearer {KEY}"}) as c:
        for i in range(30):
            op = rng.choice(["invoke", "invoke-with-response-stream"])
            if i % 4 == 3:  # a valid stream, left after its first bytes
                with socket.create_connection((host, int(port)), timeout=10) as sock:
                    sock.sendall(
                        b"POST /model/r/invoke-with-response-stream HTTP/1.1\r\nhost: x\r\n"
                        b"authorization: Bearer " + KEY.encode() + b"\r\ncontent-length: "
                        + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
                    sock.recv(64)
                continue
            body = BODY if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 200))
            r = c.post(f"/model/{odd_model(rng)}/{op}", content=body)
            statuses.append(r.status_code)
            time.sleep(PACE)


def test_odd_model_ids_and_leaving_clients_leave_a_probe_flat(tmp_path: Path):
    """A real ``humpyard serve`` child, so the attacker's threads and the probe share
    no interpreter with the gateway."""
    config = tmp_path / "humpyard.toml"
    with FakeUpstream(default=ok("fine")) as up:
        config.write_text(CONFIG.format(url=up.url))
        with ServeProcess(config, tmp_path / "serve.log", env={"K": KEY},
                          log_level="WARNING") as gw, \
                Probe(gw.url, "r", headers={"authorization": f"Bearer {KEY}"}) as probe:
            quiet = probe.measure(40)
            statuses: list[int] = []
            with probe.running():
                threads = [threading.Thread(target=attack, args=(gw.url, s, statuses))
                           for s in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
            probe.assert_flat(quiet)
    # every odd id is one model id, refused (400, 404), or, where the client's own
    # dot-segment handling made it another path, that path's 404 or 405: never a 5xx
    assert len(statuses) == 46 and set(statuses) <= {200, 400, 404, 405}, \
        sorted(set(statuses))

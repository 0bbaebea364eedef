"""The Bedrock paths under attack: model ids built to confuse the path matcher, junk
bodies, and event-stream clients that leave mid-answer, while a normal client is
served as before.
"""

from __future__ import annotations

import json
import random
import socket
import threading

import httpx

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
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
        for i in range(40):
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


def test_odd_model_ids_and_leaving_clients_leave_a_probe_flat():
    with FakeUpstream(default=ok("fine")) as up, \
            running_gateway(CONFIG.format(url=up.url), env={"K": KEY}) as gw, \
            Probe(gw.url, "r", headers={"authorization": f"Bearer {KEY}"}) as probe:
        quiet = probe.measure(40)
        statuses: list[int] = []
        with probe.running():
            threads = [threading.Thread(target=attack, args=(gw.url, s, statuses))
                       for s in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        probe.assert_flat(quiet)
        # every odd id is one model id, refused (400, 404), or, where the client's own
        # dot-segment handling made it another path, that path's 404 or 405: never a 5xx
        assert len(statuses) == 90 and set(statuses) <= {200, 400, 404, 405}, \
            sorted(set(statuses))

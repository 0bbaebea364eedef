"""A large valid body holds the event loop no longer than parsing it takes.

A 31.5 MB chat body of 1.05 M content parts (just under the default
``max_body_bytes``) is sent to a real ``humpyard serve`` while a probe sends
small requests. Parsing, checking and forwarding such a body is CPU work on the
event loop, so the probe waits while it runs; what is bounded is how long. The
measure is the probe's slowest answer, against the time ``json.loads`` takes on
the same body in this process (on the same machine, under the same load): the
check that repeated ``json.loads``'s own nesting guard with a walk over every
part took far longer than the parse itself; a linear check adds a fraction.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx

from tests.hostile.disk_support import served
from tests.support.probe import Probe

PARTS = 1_050_000
# The gateway parses the body, checks its nesting, estimates its prompt and encodes it
# for the upstream: on the loaded 2-core machine the probe's worst wait was 1.5-3.4
# parses with the linear check, 4.1-4.8 with the walk over every part it replaced.
PARSES = 3.5


def big_body() -> bytes:
    content = [{"type": "text", "text": ""} for _ in range(PARTS)]
    return json.dumps({"model": "t", "messages": [{"role": "user", "content": content}],
                       "max_tokens": 8}).encode()


def test_a_large_valid_body_holds_the_loop_for_a_few_parses_only(tmp_path: Path) -> None:
    raw = big_body()
    assert len(raw) < 32 * 1024 * 1024
    started = time.perf_counter()
    json.loads(raw)
    parse_secs = time.perf_counter() - started
    with served(tmp_path) as server, Probe(server.url, "t", timeout=120) as probe:
        probe.measure(20)
        answer: list[int] = []

        def send() -> None:
            with httpx.Client(base_url=server.url, timeout=300) as client:
                answer.append(client.post("/v1/chat/completions", content=raw,
                                          headers={"content-type": "application/json"})
                              .status_code)

        sender = threading.Thread(target=send)
        with probe.running():
            sender.start()
            sender.join(300)
        assert answer == [200]
        got = probe.attacked
        assert not got.errors, got
        worst = max(got.latencies)
        bound = PARSES * parse_secs + 0.5
        assert worst <= bound, (f"the probe waited {worst:.2f}s; a parse of the body takes "
                                f"{parse_secs:.2f}s here (bound {bound:.2f}s)")

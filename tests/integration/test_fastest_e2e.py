"""A fastest route over real sockets: measure the unmeasured, then prefer the faster."""

from __future__ import annotations

import httpx

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway
from tests.support.steps import delay, ok, status

MSG = [{"role": "user", "content": "hi"}]


def cfg(*urls: str, extra: str = "") -> str:
    text = ""
    names = []
    for i, url in enumerate(urls):
        text += f'[providers.p{i}]\nbase_url = "{url}"\n'
        text += f'[targets.t{i}]\nendpoints = [{{ provider = "p{i}", model = "m{i}" }}]\n'
        names.append(f'"t{i}"')
    return text + f"""
[routes.fast]
type = "fastest"
targets = [{", ".join(names)}]
explore = 0
min_samples = 2
{extra}
[health]
failure_threshold = 0
"""


def send(gw) -> httpx.Response:
    with httpx.Client(timeout=10) as c:
        return c.post(gw.url + "/v1/chat/completions", json={"model": "fast", "messages": MSG})


def test_unmeasured_first_then_the_faster_target():
    with FakeUpstream() as slow, FakeUpstream() as quick:
        slow.default = delay(0.15, ok("slow"))
        quick.default = ok("quick")
        with running_gateway(cfg(slow.url, quick.url)) as gw:
            # a fresh gateway behaves like passthrough until both are measured
            order = [send(gw).headers["x-humpyard-target"] for _ in range(4)]
            assert order[:2] == ["t0", "t0"]
            # t0 has its samples; t1 is still unmeasured, so it goes first now
            assert "t1" in order[2:]
            for _ in range(3):
                send(gw)
            assert all(send(gw).headers["x-humpyard-target"] == "t1" for _ in range(5))
            with gw.client() as c:
                targets = {t["target"]: t for t in c.get("/v1/health").json()["targets"]}
                stats = {g["key"]: g for g in
                         c.get("/v1/stats", params={"group_by": "target"}).json()["groups"]}
                metrics = c.get("/metrics").text
            assert targets["t0"]["current_latency_ms"] > targets["t1"]["current_latency_ms"]
            assert stats["t1"]["latency_samples"] >= 2
            assert 'humpyard_target_latency_seconds{target="t1"}' in metrics
            d = gw.decisions(limit=1)[0]
            assert d["ranking"][0] == {"target": "t1", "reason": "fastest"}


def test_fastest_route_moves_past_a_dead_member():
    with FakeUpstream() as dead, FakeUpstream() as alive:
        dead.default = status(404, {"error": {"message": "model gone"}})
        with running_gateway(cfg(dead.url, alive.url)) as gw:
            # unavailable is in the default fallback classes of fastest routes
            for _ in range(3):
                r = send(gw)
                assert r.status_code == 200 and r.headers["x-humpyard-target"] == "t1"


def test_explain_shows_the_figures():
    with FakeUpstream() as a, FakeUpstream() as b:
        with running_gateway(cfg(a.url, b.url, extra="quality_weight = 0.5")) as gw:
            for _ in range(4):
                send(gw)
            with gw.client() as c:
                e = c.post("/v1/route/explain", json={"model": "fast"}).json()
    t = {x["name"]: x for x in e["targets"]}
    assert {"quality", "speed_score", "score", "current_latency_ms",
            "latency_samples"} <= set(t["t0"])
    assert t["t0"]["latency_samples"] >= 2

"""Names a client sends never reach headers, labels or stats unchecked.

A model name is validated at the intake (no control characters, at most 256
characters: a 400 that names the field and the limit, on both client paths),
an unknown one is never echoed into a response header, and metric labels and
stats groups hold configuration names only: an unknown route is one fixed
label value everywhere.
"""

from __future__ import annotations

import random
import re
import string

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway

MSG = [{"role": "user", "content": "hi"}]


def cfg(url: str) -> str:
    return f"""
[providers.p]
base_url = "{url}"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
[routes.auto]
targets = ["t"]
"""


@pytest.fixture
def gw():
    with FakeUpstream() as up, running_gateway(cfg(up.url)) as running:
        yield running


def post(gw, path: str, model: str) -> httpx.Response:
    body: dict = {"model": model, "messages": MSG, "max_tokens": 16}
    if path == "/v1/responses":
        body = {"model": model, "input": "hi"}
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        return c.post(path, json=body)


def series(text: str) -> set[str]:
    """The series of a Prometheus exposition (``name{labels}``), comments left out."""
    return {line.rsplit(" ", 1)[0] for line in text.splitlines()
            if line and not line.startswith("#")}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
@pytest.mark.parametrize("model", ["auto\nx-injected: 1", "auto\r", "a\x00b", "tab\there",
                                   "del\x7f", "line\u2028sep"])
def test_a_control_character_in_the_model_is_a_400_naming_the_field(gw, path, model):
    r = post(gw, path, model)
    assert r.status_code == 400, r.text
    text = r.text
    assert "model: control characters are not allowed" in text
    assert "x-humpyard-route" not in r.headers
    assert "x-injected" not in r.headers
    assert r.headers["x-humpyard-request-id"].startswith("req_")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
def test_an_over_long_model_is_a_400_naming_the_limit_and_is_recorded_clipped(gw, path):
    r = post(gw, path, "m" * 5000)
    assert r.status_code == 400
    assert "model: at most 256 characters, got 5000" in r.text
    [d] = gw.decisions(limit=1)
    assert d["status"] == 400 and d["route"] is None
    assert len(d["model"]) == 257 and d["model"].endswith("…")


def test_an_unknown_model_is_not_echoed_into_a_header(gw):
    r = post(gw, "/v1/chat/completions", "no-such-model")
    assert r.status_code == 404
    assert "x-humpyard-route" not in r.headers
    assert "x-humpyard-rule" not in r.headers
    [d] = gw.decisions(limit=1)
    assert d["model"] == "no-such-model" and d["route"] is None


def test_a_thousand_unknown_model_names_add_no_series_and_no_stats_groups(gw):
    post(gw, "/v1/chat/completions", "auto")
    post(gw, "/v1/chat/completions", "not-a-route")  # the one fixed label value exists
    with httpx.Client(base_url=gw.url, timeout=30) as c:
        before = series(c.get("/metrics").text)
        groups_before = c.get("/v1/stats", params={"group_by": "route"}).json()["groups"]
        rng = random.Random(7)
        for _ in range(1000):
            name = "".join(rng.choice(string.ascii_letters + string.digits + "-_.:/")
                           for _ in range(rng.randint(1, 64)))
            r = c.post("/v1/chat/completions", json={"model": name, "messages": MSG})
            assert r.status_code in (200, 404)
            assert r.headers.get("x-humpyard-route") in (None, name if name == "auto" else None)
        after = series(c.get("/metrics").text)
        groups_after = c.get("/v1/stats", params={"group_by": "route"}).json()["groups"]
    assert after == before, sorted(after - before)[:10]
    assert {g["key"] for g in groups_after} == {g["key"] for g in groups_before} == {"auto", None}
    routes = {m.group(1) for s in after for m in [re.search(r'route="([^"]*)"', s)] if m}
    assert routes == {"auto", "-"}

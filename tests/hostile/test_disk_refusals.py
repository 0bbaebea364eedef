"""Clients without a valid key cannot fill the ledger.

A gateway with keys and a ``[ledger]``, and no ``refused_per_minute`` in its
file, takes a flood of chat requests without a key (401) and of unknown paths
(404). Refusals are sampled by default: at most 6 decisions are written a
minute (a burst of 6, then one every 10 s), while ``humpyard_refused_total``
counts every refusal. Before, the default was 0 (every refusal written: the
flood wrote one row per request).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.hostile.disk_support import KEY, count, served

FLOOD = 300  # of each kind
KEYS = """
[keys.admin]
key_env = "DISK_KEY"
admin = true
"""


def refused(metrics: str) -> dict[str, float]:
    found = re.finditer(r'^humpyard_refused_total\{reason="([^"]+)"\} (\S+)$', metrics, re.M)
    return {m.group(1): float(m.group(2)) for m in found}


def test_a_flood_of_refusals_writes_at_most_six_decisions_a_minute(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    with served(tmp_path, KEYS, env={"DISK_KEY": KEY}) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        for i in range(FLOOD):
            r = client.post("/v1/chat/completions", json={"model": "t", "messages": []})
            assert r.status_code == 401
            r = client.get(f"/no/such/path/{i}")
            assert r.status_code == 404
        auth = {"authorization": f"Bearer {KEY}"}
        listed = client.get("/v1/decisions", params={"limit": 1000}, headers=auth)
        metrics = client.get("/metrics", headers=auth).text
        server.stop()
    assert listed.status_code == 200
    written = listed.json()["decisions"]
    # The flood takes seconds, far less than the 10 s a seventh would wait for.
    assert 1 <= len(written) <= 6, [d["status"] for d in written]
    assert count(db) == len(written)
    assert {d["status"] for d in written} <= {401, 404}
    counted = refused(metrics)
    assert counted.get("invalid_api_key") == FLOOD and counted.get("not_found") == FLOOD, counted

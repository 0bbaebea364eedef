"""Shared pieces of the quota tests: a dict-backed store and a usage answer.

(A plain module rather than conftest.py, so that importing it is unambiguous.)
"""

from __future__ import annotations

import json
from typing import Any

KEY = "sk-oc-7f3a9c-very-secret"


class FakeQuotaStore:
    """Just the quota part of the store protocol; values go through JSON like a real store."""

    def __init__(self) -> None:
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []
        self.fail: set[str] = set()  # method names that raise

    def _check(self, name: str) -> None:
        if name in self.fail:
            raise RuntimeError(f"{name} failed")

    def put_quota_snapshot(self, provider: str, snapshot: dict[str, Any]) -> None:
        self._check("put_quota_snapshot")
        self.snapshots[provider] = json.loads(json.dumps(snapshot, allow_nan=False))

    def get_quota_snapshots(self) -> dict[str, dict[str, Any]]:
        self._check("get_quota_snapshots")
        return json.loads(json.dumps(self.snapshots))

    def append_quota_history(self, sample: dict[str, Any]) -> None:
        self._check("append_quota_history")
        self.history.append(json.loads(json.dumps(sample, allow_nan=False)))

    def list_quota_history(self, provider: str | None = None, since: float | None = None,
                           limit: int = 500) -> list[dict[str, Any]]:
        rows = [s for s in self.history if (provider is None or s["provider"] == provider)
                and (since is None or s["ts"] >= since)]
        return sorted(rows, key=lambda s: s["ts"], reverse=True)[:limit]

    def last_quota_sample(self, provider: str, window: str) -> dict[str, Any] | None:
        rows = [s for s in self.history if s["provider"] == provider and s["window"] == window]
        return max(rows, key=lambda s: s["ts"]) if rows else None


def usage_body(rolling: float = 12.5, weekly: float = 40.0, monthly: float = 70.0,
               status: str = "ok", resets: str = "2027-01-15T08:00:00Z") -> dict[str, Any]:
    return {"usage": {
        "rolling": {"status": status, "percent": rolling, "resetsAt": resets},
        "weekly": {"status": "ok", "percent": weekly, "resetsAt": "2027-01-18T00:00:00Z"},
        "monthly": {"status": "ok", "percent": monthly, "resetsAt": "2027-02-01T00:00:00+00:00"},
    }}

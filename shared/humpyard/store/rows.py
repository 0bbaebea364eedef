"""How overrides, audit entries and quota samples are checked and shaped for storage.

Pure helpers shared by every backend, so each one returns identical dicts.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from humpyard.planning.types import Override


def audit_entry(action: str, ov: Override, by: str | None, ts: float) -> dict[str, Any]:
    """The audit record of ``action`` on ``ov`` by key id ``by`` at ``ts``."""
    if not action:
        raise ValueError("an audit entry needs an action")
    return {"ts": float(ts), "action": action, "override_id": ov.id, "by": by,
            "kind": ov.kind, "subject": ov.subject, "target": ov.target,
            "reason": ov.reason, "expires_at": ov.expires_at}


def override_as_stored(ov: Override, new_id: str) -> Override:
    """``ov`` with its id and ``stale`` as a store keeps them."""
    return dataclasses.replace(ov, id=new_id, stale=False)


def quota_sample(sample: dict[str, Any]) -> tuple[str, str, float, str]:
    """``(provider, window, ts, json body)`` of a history sample; ``ValueError`` if unusable."""
    provider, window, ts = sample.get("provider"), sample.get("window"), sample.get("ts")
    if not isinstance(provider, str) or not provider:
        raise ValueError("a quota sample needs a provider")
    if not isinstance(window, str) or not window:
        raise ValueError("a quota sample needs a window")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise ValueError("a quota sample needs a finite ts")
    return provider, window, float(ts), to_json(sample)


def to_json(value: Any) -> str:
    """Compact JSON, or ``ValueError`` for something that is not JSON-ready."""
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not JSON-serialisable: {exc}") from exc


def check_usd(usd: float) -> float:
    """``usd`` as a float, or ``ValueError`` for a non-finite or non-numeric amount."""
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd):
        raise ValueError(f"spend must be a finite number of USD, not {usd!r}")
    return float(usd)

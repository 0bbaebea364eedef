"""The ledger: what was decided and spent. Storage is ``humpyard.store``; this package
holds the rules that shape what is stored (budget periods)."""

from __future__ import annotations

from humpyard.ledger.periods import PERIODS, period_key

__all__ = ["PERIODS", "period_key"]

"""One key's budget lease in one period, as one instance sees it (``leases.Leases``
keeps one per key and period, and writes them to the store)."""

from __future__ import annotations

from dataclasses import dataclass

SLICE_FRACTION = 0.1
"""A slice is at most this share of the budget, so idle slices strand little of it."""


@dataclass(slots=True)
class LeaseBook:
    """See the module docstring. Guarded by its ``Leases``' lock."""

    limit: float
    held: float = 0.0  # the lease as the store has it (USD)
    used: float = 0.0  # reserved by this instance's requests in flight
    pending: float = 0.0  # settled cost not written yet
    since: float | None = None  # clock time of the oldest pending cost
    written: float = 0.0  # when the lease was last written (renewed)
    tried: float = 0.0  # when a write of it was last attempted, written or failed
    last_use: float = 0.0
    holders: int = 1
    committed: float = 0.0  # spend + every live lease, at the last write
    flushing: bool = False  # a background flush is queued

    def available(self) -> float:
        return self.held - self.used - self.pending

    def lapsed(self, now: float, lease_secs: float) -> bool:
        """Held, and not even tried for ``lease_secs`` (a Lambda instance thawed after
        minutes frozen, a stopped process): the store may have let it go and others
        taken its room. One whose writes fail (the store down) has not lapsed."""
        return self.held > 0 and now - self.tried >= lease_secs

    def settled(self, spent: float) -> None:
        """``spent`` of the pending cost went to the store (or to the fallback)."""
        self.pending = max(0.0, self.pending - spent)
        if self.pending <= 1e-12:
            self.pending, self.since = 0.0, None

    def slice(self, need: float) -> tuple[float, float]:
        """A slice for ``need`` and the room it must leave for the other holders: at
        most ``SLICE_FRACTION`` of the budget and half the room left per holder,
        granted only while as much again per holder stays free (so slices shrink as
        the room does)."""
        holders = max(1, self.holders)
        left = max(0.0, self.limit - self.committed)
        slice_ = max(need, min(left / (2 * holders), SLICE_FRACTION * self.limit))
        return slice_, slice_ * holders

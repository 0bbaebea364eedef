"""A tiered route's Switchyard algorithm, with its session state bounded.

Switchyard's algorithms keep state for every session id they have seen (a
stage, a streak of verdicts, a latch), and never let it go: about 650 bytes
a session in nemo-switchyard 0.3.0, so a gateway serving coding agents, each
session a new id, or one client inventing an id per request, grew without
bound. ``Generations`` holds a route's algorithm in two generations: a
session first seen goes to the newer one; a session seen before stays with
the one that has its state. Once the newer one has seen ``kept`` sessions,
the older one is dropped with every session state in it and a new one
begins. So at most ``2 × kept`` sessions are remembered, and a session keeps
its state until two newer generations have filled after it was first seen.
Requests without a session id keep no state and go to the newer one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SESSIONS_KEPT = 50_000
"""Sessions a generation takes before the older is dropped: at most 100,000 sessions'
state per tiered route and process (~65 MB at nemo-switchyard 0.3.0's size)."""


class Generations:
    """See the module docstring. ``build`` makes a fresh algorithm."""

    __slots__ = ("_build", "kept", "_new", "_old", "_new_ids", "_old_ids", "dropped")

    def __init__(self, build: Callable[[], Any], kept: int = SESSIONS_KEPT) -> None:
        if kept < 1:
            raise ValueError("a generation must keep at least one session")
        self._build = build
        self.kept = kept
        self._new = build()
        self._old: Any = None
        # Hashes, not the ids (up to 256 characters each): a collision only puts a new
        # session with an older generation, which keeps no state for it either.
        self._new_ids: set[int] = set()
        self._old_ids: set[int] = set()
        self.dropped = 0  # generations dropped so far

    def for_session(self, session_id: str | None) -> Any:
        """The algorithm that holds (or will hold) ``session_id``'s state."""
        if session_id is None:
            return self._new
        h = hash(session_id)
        if h in self._new_ids:
            return self._new
        if h in self._old_ids:
            return self._old
        if len(self._new_ids) >= self.kept:
            if self._old is not None:
                self.dropped += 1
            self._old, self._old_ids = self._new, self._new_ids
            self._new, self._new_ids = self._build(), set()
        self._new_ids.add(h)
        return self._new

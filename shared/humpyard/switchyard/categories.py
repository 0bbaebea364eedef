"""The gateway's tiers as Switchyard model categories, and back.

Switchyard takes ``models``: category → model ids, best first. Its
algorithms reason about ``efficient``, ``capable``, ``judge`` and ``any``:

- a ``CallModel`` names the ids of one category (``judge`` for a verdict,
  ``efficient`` for the answer an escalation judge rates);
- ``selected_model_ids`` is the chosen category's ids followed by the rest of
  ``any`` in ``any``'s order, and the chosen tier's first id must be in
  ``any`` (otherwise Switchyard raises ``target "…" was not found``).

So ``any`` holds every answering target (efficient, then capable) and never
the judge, which is not a routing destination. Each id is
``"<category>:<target>"``: a call's category is then read off its ids even
when tier substitution made two tiers the same targets, and decoding drops
the prefix and any repeat.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ANSWERING = ("efficient", "capable")
SEP = ":"


def encode(category: str, target: str) -> str:
    """The Switchyard model id of ``target`` in ``category``."""
    return f"{category}{SEP}{target}"


def decode(model_id: str) -> tuple[str, str]:
    """``(category, target)`` of an id made by ``encode``; a bare id has category ``""``."""
    category, sep, target = model_id.partition(SEP)
    return (category, target) if sep else ("", model_id)


def targets(model_ids: Iterable[str]) -> tuple[str, ...]:
    """The target names of ``model_ids``, in order, each once."""
    seen: dict[str, None] = {}
    for mid in model_ids:
        seen.setdefault(decode(mid)[1], None)
    return tuple(seen)


@dataclass(frozen=True, slots=True)
class Categories:
    """The eligible targets per category for one request (after tier substitution)."""

    efficient: tuple[str, ...]
    capable: tuple[str, ...]
    judge: tuple[str, ...] = ()

    @classmethod
    def from_tiers(cls, tiers: Mapping[str, tuple[str, ...]], *, judge: bool,
                   configured_judge: str | None = None) -> Categories:
        """Categories for the planner's ``tiers``.

        The planner has already substituted an emptied tier; this repeats the
        rule (an empty tier is served by the other one, a missing judge by a
        remaining tier) so a partial mapping still yields a usable one. When
        ``tiers`` has no ``judge`` entry at all (the planner did not plan
        one), the route's ``configured_judge`` is used as written.
        """
        eff = tuple(tiers.get("efficient") or ())
        cap = tuple(tiers.get("capable") or ())
        eff, cap = eff or cap, cap or eff
        planned = tiers.get("judge") if "judge" in tiers else (
            (configured_judge,) if configured_judge else ())
        jdg = (tuple(planned or ()) or eff) if judge else ()
        return cls(efficient=eff, capable=cap, judge=jdg)

    @property
    def empty(self) -> bool:
        """Nothing can answer: both answering tiers are empty."""
        return not self.efficient

    def tier(self, category: str) -> tuple[str, ...]:
        """The targets of one category (``()`` for an unknown one)."""
        return tuple(getattr(self, category, ())) if category in (*ANSWERING, "judge") else ()

    def models(self) -> dict[str, list[str]]:
        """The ``models`` argument of ``Algorithm.run_stream``."""
        out = {c: [encode(c, t) for t in self.tier(c)] for c in ANSWERING}
        out["any"] = [*out["efficient"], *out["capable"]]
        if self.judge:
            out["judge"] = [encode("judge", t) for t in self.judge]
        return out

    def walk(self, first: str) -> tuple[str, ...]:
        """``first``'s targets, then the other answering tier's: Switchyard's own order."""
        other = "capable" if first == "efficient" else "efficient"
        return targets([*self.tier(first), *self.tier(other)])

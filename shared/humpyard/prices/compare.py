"""The configured endpoints next to a catalogue: the file ``prices import``
writes, and the disagreements ``prices check`` lists.

Both work on the configuration as read (``config.load.read_document``),
without the environment, so they run where the provider keys are not set.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import tomli_w

from humpyard.config.load import Document
from humpyard.config.problems import did_you_mean, path
from humpyard.prices.catalog import Catalog, CatalogModel


@dataclass(frozen=True)
class Endpoint:
    """One configured endpoint and what the catalogue says about it (None: not found)."""

    target: str
    index: int
    provider: str
    model: str
    found: CatalogModel | None
    catalog_provider: str | None
    why_not: str  # when ``found`` is None

    @property
    def where(self) -> str:
        return path("targets", self.target, "endpoints", self.index)

    @property
    def entry(self) -> str:
        return f"{self.catalog_provider}/{self.found.id}" if self.found else ""


def endpoints(doc: Document, catalog: Catalog) -> Iterator[Endpoint]:
    """Every endpoint of the configuration, in file order, looked up in ``catalog``."""
    for tname, target in doc.raw.targets.items():
        for i, ep in enumerate(target.endpoints):
            provider = doc.raw.providers.get(ep.provider)
            if provider is None:  # read_document refuses no unknown provider: be safe
                yield Endpoint(tname, i, ep.provider, ep.model, None, None,
                               f"provider {ep.provider!r} is not configured")
                continue
            cp, how = catalog.find_provider(provider.base_url, provider.catalog_id)
            if cp is None:
                yield Endpoint(tname, i, ep.provider, ep.model, None, None,
                               f"provider {ep.provider!r}: {how}")
                continue
            model = cp.model(ep.model)
            why = "" if model else (f"model {ep.model!r} is not in catalogue provider {cp.id!r}"
                                    + did_you_mean(ep.model, cp.models))
            yield Endpoint(tname, i, ep.provider, ep.model, model, cp.id, why)


def declaration(provider: str, model: str, facts: CatalogModel) -> dict[str, object]:
    """The included-file declaration (``config/files.py``, ``FILLABLE``) of what
    ``facts`` knows; an unknown field is left out, not written as a guess."""
    out: dict[str, object] = {"provider": provider, "model": model}
    if facts.context_window is not None:
        out["context_window"] = facts.context_window
    if facts.tools is not None:
        out["tools"] = facts.tools
    if facts.vision is not None:
        out["vision"] = facts.vision
    if facts.price_input is not None and facts.price_output is not None:
        out["price"] = {"input": facts.price_input, "output": facts.price_output}
    return out


def import_text(doc: Document, catalog: Catalog, now: datetime | None = None) -> tuple[
        str, int, list[Endpoint]]:
    """The file ``prices import`` writes: one declaration per configured (provider,
    model) the catalogue has, in a stable order; with how many, and what it lacks."""
    found: dict[tuple[str, str], Endpoint] = {}
    missing: list[Endpoint] = []
    for ep in endpoints(doc, catalog):
        if ep.found is None:
            missing.append(ep)
        else:
            found.setdefault((ep.provider, ep.model), ep)
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    parts = [
        f"# Written by `humpyard prices import` from {catalog.source} at {stamp}.\n"
        f"# For review: prices are USD per million tokens. The main configuration\n"
        f"# wins over anything here, field by field (docs/configuration.md,\n"
        f"# \"Included files\"). Import again rather than edit.\n"]
    for (provider, model), ep in sorted(found.items()):
        assert ep.found is not None
        parts.append(f"\n# catalogue: {ep.entry}\n"
                     + tomli_w.dumps({"endpoints": [declaration(provider, model, ep.found)]}))
    if missing:
        parts.append("\n# Not in the catalogue:\n" + "".join(
            f"#   {ep.provider}/{ep.model}: {ep.why_not}\n" for ep in _unique(missing)))
    return "".join(parts), len(found), _unique(missing)


def _unique(eps: list[Endpoint]) -> list[Endpoint]:
    seen: dict[tuple[str, str], Endpoint] = {}
    for ep in eps:
        seen.setdefault((ep.provider, ep.model), ep)
    return list(seen.values())


def write_atomically(target: Path, text: str) -> None:
    """Replace ``target`` in one step, so a gateway polling it never reads half a file."""
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text)
    tmp.replace(target)


@dataclass(frozen=True)
class Disagreement:
    """A declared value the catalogue contradicts, and which file declared it."""

    endpoint: Endpoint
    field: str  # "price.input", "context_window", ...
    declared: object
    catalogue: object
    declared_in: str

    def line(self) -> str:
        return (f"{self.endpoint.where}.{self.field}: {_show(self.declared)} in "
                f"{self.declared_in}, {_show(self.catalogue)} in the catalogue "
                f"({self.endpoint.entry})")


def _show(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _differs(a: object, b: object) -> bool:
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return not math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a != b


def disagreements(doc: Document, catalog: Catalog) -> tuple[list[Disagreement], int,
                                                           list[Endpoint]]:
    """Where a declaration (in the main file or an included one) and the catalogue
    disagree; with how many endpoints were checked, and those the catalogue lacks.
    A value only one side gives is no disagreement."""
    out: list[Disagreement] = []
    checked = 0
    missing: list[Endpoint] = []
    main_name = Path(doc.source).name
    for ep in endpoints(doc, catalog):
        if ep.found is None:
            missing.append(ep)
            continue
        checked += 1
        declared = doc.raw.targets[ep.target].endpoints[ep.index]
        price = declared.price
        pairs = [
            ("price.input", "price", price.input if price else None, ep.found.price_input),
            ("price.output", "price", price.output if price else None, ep.found.price_output),
            ("context_window", "context_window", declared.context_window,
             ep.found.context_window),
            ("tools", "tools", declared.tools, ep.found.tools),
            ("vision", "vision", declared.vision, ep.found.vision),
        ]
        for name, key, mine, theirs in pairs:
            if mine is None or theirs is None or not _differs(mine, theirs):
                continue
            where = doc.origin.get((ep.target, ep.index, key), main_name)
            out.append(Disagreement(ep, name, mine, theirs, where))
    return out, checked, missing

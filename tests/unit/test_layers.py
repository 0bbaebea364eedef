"""The house rules of imports: no cycles, and the layer table of docs/architecture.md.

Every import inside ``shared/humpyard`` counts, at module level or inside a
function (or under ``TYPE_CHECKING``): a cycle means a definition is in the
wrong place, and an import that goes up a layer means the same. The table is
read from the document itself, so the document and the code cannot drift.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shared" / "humpyard"
DOC = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Layer:
    number: int
    places: tuple[str, ...]  # "errors" (a module) or "config/" (a package)
    banned: frozenset[str]


def layer_table(doc: str) -> list[Layer]:
    """The rows of the layer table under '## Layers and what they may import'."""
    section = doc.split("## Layers and what they may import", 1)[1].split("\n## ", 1)[0]
    layers = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        layers.append(Layer(int(cells[0]), tuple(re.findall(r"`([^`]+)`", cells[1])),
                            frozenset(re.findall(r"`([^`]+)`", cells[3]))))
    return layers


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(package: Path) -> dict[str, set[str]]:
    """Module → every imported name (absolute), each import statement anywhere in it."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        name = module_name(path, package)
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here[:len(here) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                names.add(base)
                names.update(f"{base}.{a.name}" for a in node.names)
        found[name] = names
    return found


def internal_graph(found: dict[str, set[str]], top: str) -> dict[str, set[str]]:
    """Module → the package's modules it imports (a module importing a package it
    belongs to, its face, is not an edge)."""
    def resolve(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in found}
    for m, names in found.items():
        for n in names:
            if n.split(".")[0] != top:
                continue
            target = resolve(n)
            if target and target != m and not m.startswith(target + "."):
                graph[m].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    scc = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        scc.append(w)
                        if w == node:
                            break
                    if len(scc) > 1:
                        out.append(sorted(scc))
    return out


def layer_of(module: str, layers: list[Layer], top: str) -> Layer | None:
    rel = module[len(top) + 1:] if module != top else "__init__"
    for layer in layers:
        for place in layer.places:
            if place.endswith("/"):
                if rel == place[:-1] or rel.startswith(place[:-1] + "."):
                    return layer
            elif rel == place:
                return layer
    return None


def offences(package: Path, layers: list[Layer]) -> list[str]:
    """Every breach of the rules in ``package`` against ``layers``."""
    top = package.name
    found = imports(package)
    graph = internal_graph(found, top)
    problems = [f"import cycle: {' <-> '.join(c)}" for c in cycles(graph)]
    for m in sorted(graph):
        mine = layer_of(m, layers, top)
        if mine is None:
            problems.append(f"{m}: not placed in the layer table of docs/architecture.md")
            continue
        for target in sorted(graph[m]):
            theirs = layer_of(target, layers, top)
            if theirs is not None and theirs.number > mine.number:
                problems.append(f"{m} (layer {mine.number}) imports {target} "
                                f"(layer {theirs.number}): an import that goes up")
        for lib in sorted({n.split(".")[0] for n in found[m]} & mine.banned):
            problems.append(f"{m} (layer {mine.number}) imports {lib}, which its layer may not")
    return problems


def test_the_table_places_every_layer_in_order() -> None:
    layers = layer_table(DOC.read_text(encoding="utf-8"))
    assert [layer.number for layer in layers] == list(range(1, len(layers) + 1))
    assert len(layers) >= 5
    assert any("planning/" in layer.places and "sqlite3" in layer.banned for layer in layers)


def test_the_package_keeps_the_house_rules() -> None:
    layers = layer_table(DOC.read_text(encoding="utf-8"))
    problems = offences(PACKAGE, layers)
    assert not problems, "\n".join(problems)


def test_the_checker_finds_a_cycle_an_upward_import_a_banned_library_and_a_stray(
        tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from pkg.high import g\n")  # goes up
    (pkg / "low" / "b.py").write_text("import sqlite3\nfrom . import c\n")
    (pkg / "low" / "c.py").write_text("from pkg.low import b\n")  # b <-> c
    (pkg / "high.py").write_text("g = 1\n")
    (pkg / "stray.py").write_text("")
    layers = layer_table("## Layers and what they may import\n"
                         "| layer | modules | what | may not import |\n|---|---|---|---|\n"
                         "| 1 | `__init__`, `low/` | low | `sqlite3` |\n"
                         "| 2 | `high` | high | |\n")
    problems = offences(pkg, layers)
    assert "import cycle: pkg.low.b <-> pkg.low.c" in problems
    assert any("pkg.low.a (layer 1) imports pkg.high (layer 2)" in p for p in problems)
    assert any("pkg.low.b (layer 1) imports sqlite3" in p for p in problems)
    assert any(p.startswith("pkg.stray: not placed") for p in problems)
    assert len(problems) == 4, problems

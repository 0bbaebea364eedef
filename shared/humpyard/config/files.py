"""Reading configuration files: TOML with error positions, and ``include``.

A configuration may name other files whose ``[[endpoints]]`` declarations
fill in what its own endpoints leave unset (docs/configuration.md,
"Included files"; ``humpyard prices import`` writes such a file)::

    include = ["prices.toml"]        # relative to the including file

An included declaration names a ``provider`` and a ``model`` and may give
``context_window``, ``tools``, ``vision``, ``price``, ``max_output_tokens`` and
``reasoning``; every endpoint of the
main file with that provider and model takes the fields it does not set
itself (the main file wins, field by field). An included file declares
nothing else and includes nothing. Every problem is reported with the
included file's name.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from humpyard.config.problems import did_you_mean, path, schema_problems
from humpyard.config.provider_models import Endpoint

if sys.version_info >= (3, 14):
    import tomllib as toml
else:  # tomli is tomllib with the error's line and column as attributes
    import tomli as toml

# The endpoint fields an included file may fill in.
FILLABLE = ("context_window", "tools", "vision", "price", "max_output_tokens", "reasoning")


class TomlSyntaxError(Exception):
    """A file is not valid TOML: ``line`` and ``column`` (1-based) say where."""

    def __init__(self, message: str, line: int, column: int, excerpt: str):
        super().__init__(f"line {line}, column {column}: TOML syntax: {message}{excerpt}")
        self.line = line
        self.column = column


def parse_toml(text: str) -> dict[str, Any]:
    """The TOML document ``text``; ``TomlSyntaxError`` with the position if it is not TOML."""
    try:
        return toml.loads(text)
    except toml.TOMLDecodeError as e:
        line, column = getattr(e, "lineno", 0), getattr(e, "colno", 0)
        lines = text.splitlines()
        excerpt = ""
        if 1 <= line <= len(lines):
            shown = lines[line - 1].expandtabs(1)[:200]
            excerpt = f"\n      {shown}\n      {' ' * max(column - 1, 0)}^"
        raise TomlSyntaxError(getattr(e, "msg", str(e)), line, column, excerpt) from None


class ConfigFiles:
    """The texts of a configuration's files (the main file and those it includes),
    by resolved path: each read once from the disk and kept (``texts``), or, given
    ``texts``, only ever served from them, so a load sees exactly the files another
    load saw (``serve --workers N``: the parent's checked files, workers.py)."""

    def __init__(self, texts: dict[str, str] | None = None) -> None:
        self.replay = texts is not None
        self.texts: dict[str, str] = dict(texts) if texts is not None else {}

    def read(self, p: Path) -> str:
        """``p``'s text (UTF-8, bad bytes replaced); ``OSError`` when it cannot be read,
        or, replaying, when it was not among the files read then."""
        key = str(p.resolve())
        if self.replay:
            try:
                return self.texts[key]
            except KeyError:
                raise FileNotFoundError(errno.ENOENT, "not among the checked files",
                                        key) from None
        text = p.read_bytes().decode("utf-8", errors="replace")
        self.texts[key] = text
        return text


@dataclass
class Expanded:
    """A document with its includes applied, and what applying them found.

    ``origin`` maps (target, endpoint index, field) to the included file that
    filled the field in; ``files`` are the included files' resolved paths and
    ``texts`` their contents (for the digest).
    """

    data: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    origin: dict[tuple[str, int, str], str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


@dataclass
class _Declaration:
    where: str  # "prices.toml: endpoints[3]"
    name: str  # the file's name as the include list gives it
    index: int
    values: dict[str, Any]


def expand_includes(data: dict[str, Any], base_dir: Path | None, source: str,
                    files: ConfigFiles | None = None) -> Expanded:
    """Apply ``data``'s ``include`` list (read relative to ``base_dir``, through
    ``files`` when given) to its endpoints.

    ``base_dir`` is None for a configuration that did not come from a file
    (an S3 object, an AppConfig profile): such a one cannot include.
    """
    out = Expanded(data=dict(data))
    listed = out.data.pop("include", None)
    if listed is None:
        return out
    if not isinstance(listed, list) or not all(isinstance(x, str) and x for x in listed):
        out.problems.append("include: must be a list of file names, such as "
                            '["prices.toml"]')
        return out
    if base_dir is None:
        out.problems.append(f"include: only a configuration read from a file can include "
                            f"others (this one came from {source})")
        return out
    declared: dict[tuple[str, str], _Declaration] = {}
    seen: dict[Path, int] = {}
    for i, name in enumerate(listed):
        file = (base_dir / name).resolve()
        if file in seen:
            out.problems.append(f"{path('include', i)}: {name!r} is already included as "
                                f"{path('include', seen[file])}")
            continue
        seen[file] = i
        try:
            text = (files or ConfigFiles()).read(file)
        except OSError as e:
            out.problems.append(f"{path('include', i)}: cannot read {name!r} ({file}): "
                                f"{e.strerror}")
            continue
        out.files.append(str(file))
        out.texts.append(text)
        _read_included(name, text, declared, out)
    _apply(declared, out)
    return out


def _read_included(name: str, text: str, declared: dict[tuple[str, str], _Declaration],
                   out: Expanded) -> None:
    try:
        doc = parse_toml(text)
    except TomlSyntaxError as e:
        out.problems.append(f"{name}: {e}")
        return
    for key in doc:
        if key == "include":
            out.problems.append(f"{name}: include: an included file cannot include others")
        elif key != "endpoints":
            out.problems.append(f"{name}: {path(key)}: an included file declares only "
                                f"[[endpoints]]" + did_you_mean(key, ["endpoints"]))
    entries = doc.get("endpoints", [])
    if not isinstance(entries, list):
        out.problems.append(f"{name}: endpoints: must be an array of tables ([[endpoints]])")
        return
    for i, entry in enumerate(entries):
        try:
            ep = Endpoint.model_validate(entry)
        except ValidationError as e:
            out.problems.extend(f"{name}: {line}"
                                for line in schema_problems(e, Endpoint, ("endpoints", i)))
            continue
        where = f"{name}: {path('endpoints', i)}"
        first = declared.get((ep.provider, ep.model))
        if first is not None:
            out.problems.append(f"{where}: repeats provider {ep.provider!r}, model {ep.model!r} "
                                f"(first declared at {first.where})")
            continue
        values = ep.model_dump(include=set(FILLABLE), exclude_none=True)
        declared[(ep.provider, ep.model)] = _Declaration(where, name, i, values)


def _apply(declared: Mapping[tuple[str, str], _Declaration], out: Expanded) -> None:
    """Fill every matching endpoint of the main file, which wins field by field."""
    targets = out.data.get("targets")
    used: set[tuple[str, str]] = set()
    configured: dict[str, set[str]] = {}
    if isinstance(targets, dict):
        filled_targets = {}
        for tname, target in targets.items():
            endpoints = target.get("endpoints") if isinstance(target, dict) else None
            if not isinstance(endpoints, list):
                filled_targets[tname] = target
                continue
            filled = []
            for i, ep in enumerate(endpoints):
                provider = ep.get("provider") if isinstance(ep, dict) else None
                model = ep.get("model") if isinstance(ep, dict) else None
                if not (isinstance(provider, str) and isinstance(model, str)):
                    filled.append(ep)
                    continue
                configured.setdefault(provider, set()).add(model)
                decl = declared.get((provider, model))
                if decl is not None:
                    used.add((provider, model))
                    ep = dict(ep)
                    for key, value in decl.values.items():
                        if key not in ep:
                            ep[key] = value
                            out.origin[(tname, i, key)] = decl.name
                filled.append(ep)
            filled_targets[tname] = {**target, "endpoints": filled}
        out.data["targets"] = filled_targets
    for pair, decl in declared.items():
        if pair in used:
            continue
        provider, model = pair
        if provider in configured:
            hint = did_you_mean(model, configured[provider], "model")
        else:
            hint = did_you_mean(provider, configured, "provider")
        out.warnings.append(f"{decl.where}: no configured endpoint has provider {provider!r} "
                            f"and model {model!r}{hint}")

"""What ``humpyard prices import`` and ``humpyard prices check`` do.

Exit codes: 0 done (``check``: no disagreement), 1 ``check`` found
disagreements, 2 the configuration or the catalogue could not be read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

import httpx

from humpyard.config.load import Document, read_document
from humpyard.errors import ConfigError
from humpyard.prices.catalog import Catalog, CatalogError, read_catalog
from humpyard.prices.compare import disagreements, import_text, write_atomically


def _read(config: str, source: str, err: TextIO, includes: bool,
          transport: httpx.BaseTransport | None) -> tuple[Document, Catalog] | None:
    try:
        doc = read_document(config, includes=includes)
        catalog = read_catalog(source, transport=transport)
    except (ConfigError, CatalogError) as e:
        print(e, file=err)
        return None
    return doc, catalog


def run_import(config: str, source: str, out_path: str | None, out: TextIO, err: TextIO,
               transport: httpx.BaseTransport | None = None) -> int:
    """Write the catalogue's facts for every configured endpoint to ``out_path``
    (default ``prices.toml`` beside the configuration), replacing the file.

    The configuration is read without its includes, so a broken ``prices.toml``
    can always be written anew."""
    got = _read(config, source, err, False, transport)
    if got is None:
        return 2
    doc, catalog = got
    text, count, missing = import_text(doc, catalog)
    target = Path(out_path) if out_path else Path(config).with_name("prices.toml")
    try:
        write_atomically(target, text)
    except OSError as e:
        print(f"cannot write {str(target)!r}: {e.strerror}", file=err)
        return 2
    print(f"wrote {count} endpoint declaration{'s' if count != 1 else ''} to {target} "
          f"(from {catalog.source})", file=out)
    for ep in missing:
        print(f"not in the catalogue: {ep.provider}/{ep.model}: {ep.why_not}", file=out)
    listed = _included(config)
    relative = os.path.relpath(target.resolve(), Path(config).resolve().parent)
    if target.resolve() not in listed:
        print(f'to use it, add include = ["{relative}"] at the top of {config}', file=out)
    return 0


def _included(config: str) -> set[Path]:
    try:
        return {Path(f) for f in read_document(config).files}
    except ConfigError:
        return set()


def run_check(config: str, source: str, out: TextIO, err: TextIO,
              transport: httpx.BaseTransport | None = None) -> int:
    """List every declaration the catalogue contradicts; 1 if there is one."""
    got = _read(config, source, err, True, transport)
    if got is None:
        return 2
    doc, catalog = got
    found, checked, missing = disagreements(doc, catalog)
    for d in found:
        print(d.line(), file=out)
    for ep in missing:
        print(f"not checked: {ep.where} ({ep.provider}/{ep.model}): {ep.why_not}", file=out)
    print(f"{len(found)} disagreement{'s' if len(found) != 1 else ''} in {checked} endpoint"
          f"{'s' if checked != 1 else ''} checked against {catalog.source}"
          + (f"; {len(missing)} not in the catalogue" if missing else ""), file=out)
    return 1 if found else 0

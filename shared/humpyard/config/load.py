"""Reading a TOML file into a checked ``Config``: every problem in one pass.

The stages run one after another, but a failed stage does not hide the next:
a TOML syntax error (with its line and column) ends the reading, since there
is nothing left to check; otherwise include errors, schema errors and
cross-reference errors are collected together, each named by its key path
(``config/problems.py``), and raised as one ``ConfigError``.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from humpyard.config.files import ConfigFiles, TomlSyntaxError, expand_includes, parse_toml
from humpyard.config.models import RawConfig
from humpyard.config.problems import Salvage, salvage, schema_problems
from humpyard.config.resolve import resolve
from humpyard.config.spec import Config
from humpyard.errors import ConfigError


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None, *,
                unset_env: str = "serve", files: ConfigFiles | None = None) -> Config:
    """Load and check a configuration file (and the files it includes). Raises ``ConfigError``.

    ``unset_env``: how unset key variables count (``resolve.UNSET_ENV_MODES``).
    ``files``: where the texts come from and are kept (``ConfigFiles``; default: the
    disk)."""
    p = Path(path)
    text = _read(p, files)
    return load_config_text(text, source=str(p), env=env, base_dir=p.parent,
                            unset_env=unset_env, files=files)


def load_config_text(text: str, *, source: str = "<memory>",
                     env: Mapping[str, str] | None = None,
                     base_dir: str | os.PathLike[str] | None = None,
                     unset_env: str = "serve", files: ConfigFiles | None = None) -> Config:
    """Parse TOML text and resolve it; ``env`` defaults to ``os.environ``.

    ``include`` paths are read relative to ``base_dir`` (through ``files``); without
    one (a configuration from S3 or AppConfig) a file that includes is refused.
    """
    doc = _document(text, source, Path(base_dir) if base_dir is not None else None,
                    files=files)
    digest = hashlib.sha256("\0".join([text, *doc.texts]).encode()).hexdigest()[:16]
    return resolve(doc.raw, os.environ if env is None else env, source=source, digest=digest,
                   problems=doc.problems, salvage=doc.salvage, warnings=doc.warnings,
                   includes=tuple(doc.files), unset_env=unset_env)


@dataclass
class Document:
    """A configuration file read and schema-checked, before the environment is consulted.

    ``origin`` says which included file filled in an endpoint field:
    (target, endpoint index, field) → the file's name as ``include`` gives it.
    """

    raw: RawConfig
    source: str
    origin: dict[tuple[str, int, str], str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    salvage: Salvage | None = None


def read_document(path: str | os.PathLike[str], *, includes: bool = True) -> Document:
    """The file's schema-checked document, without resolving names or reading the
    environment (``humpyard prices`` needs no keys); ``ConfigError`` on any
    syntax, include or schema problem. ``includes=False`` ignores the ``include`` list."""
    p = Path(path)
    text = _read(p)
    doc = _document(text, str(p), p.parent, includes=includes)
    if doc.problems:
        raise ConfigError(f"invalid configuration ({p}):\n  " + "\n  ".join(doc.problems))
    return doc


def _read(p: Path, files: ConfigFiles | None = None) -> str:
    try:
        return (files or ConfigFiles()).read(p)
    except OSError as e:
        raise ConfigError(f"cannot read configuration {str(p)!r}: {e.strerror}") from None


def _document(text: str, source: str, base_dir: Path | None, *,
              includes: bool = True, files: ConfigFiles | None = None) -> Document:
    try:
        data = parse_toml(text)
    except TomlSyntaxError as e:
        raise ConfigError(f"invalid configuration ({source}):\n  {e}") from None
    if not includes:
        data.pop("include", None)
    expanded = expand_includes(data, base_dir, source, files)
    problems = list(expanded.problems)
    raw, salvaged = _schema(expanded.data, problems)
    return Document(raw=raw, source=source, origin=expanded.origin, files=expanded.files,
                    texts=expanded.texts, problems=problems, warnings=expanded.warnings,
                    salvage=salvaged)


def _schema(data: dict[str, Any], problems: list[str]) -> tuple[RawConfig, Salvage | None]:
    """The schema-checked file; on errors, what is left once the broken parts are
    removed (so the cross-reference checks still run), with the errors in ``problems``."""
    try:
        return RawConfig.parse(data), None
    except ValidationError as e:
        problems.extend(schema_problems(e, RawConfig))
        error = e
    rest, info = copy.deepcopy(data), Salvage()
    for _ in range(12):  # each pass climbs one level up from every remaining error
        if not salvage(rest, error, info):
            break
        try:
            return RawConfig.parse(rest), info
        except ValidationError as e:
            error = e
    return RawConfig(), Salvage(whole={"providers", "targets", "routes", "keys", "select"})

"""Reading a TOML file into a checked ``Config``; errors name key and value."""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from humpyard.config.models import RawConfig
from humpyard.config.resolve import resolve
from humpyard.config.spec import Config
from humpyard.errors import ConfigError


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Load and check a configuration file. Raises ``ConfigError``."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read configuration {str(p)!r}: {e.strerror}") from None
    return load_config_text(data.decode("utf-8", errors="replace"), source=str(p), env=env)


def load_config_text(text: str, *, source: str = "<memory>",
                     env: Mapping[str, str] | None = None) -> Config:
    """Parse TOML text and resolve it; ``env`` defaults to ``os.environ``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"invalid configuration ({source}): TOML syntax: {e}") from None
    try:
        raw = RawConfig.parse(data)
    except ValidationError as e:
        raise ConfigError(f"invalid configuration ({source}):\n  "
                          + "\n  ".join(_format(err) for err in e.errors())) from None
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return resolve(raw, os.environ if env is None else env, source=source, digest=digest)


def _format(err: object) -> str:
    e = err if isinstance(err, dict) else {}
    loc = ".".join(str(p) for p in e.get("loc", ()) if p != "class_") or "(top level)"
    loc = loc.replace(".class_", ".class")
    msg = str(e.get("msg", "invalid"))
    if e.get("type") == "extra_forbidden":
        return f"{loc}: unknown key"
    msg = msg.removeprefix("Value error, ")
    if "input" in e and e.get("type") not in ("missing",) and not isinstance(e["input"], dict):
        return f"{loc}: {msg} (got {e['input']!r})"
    return f"{loc}: {msg}"

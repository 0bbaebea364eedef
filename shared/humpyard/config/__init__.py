"""Configuration: TOML → checked pydantic models → the resolved ``Config``.

``load_config``/``load_config_text`` (and with them pydantic and the schema
models) are imported on first use, so ``humpyard.config.spec`` and the
planner, which only read a resolved ``Config``, import without pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from humpyard.config.spec import Config, EndpointSpec, KeySpec, ProviderSpec, RouteSpec, TargetSpec

if TYPE_CHECKING:
    from humpyard.config.load import load_config, load_config_text

__all__ = ["Config", "EndpointSpec", "KeySpec", "ProviderSpec", "RouteSpec", "TargetSpec",
           "load_config", "load_config_text"]


def __getattr__(name: str) -> Any:
    if name in ("load_config", "load_config_text"):
        from humpyard.config import load
        return getattr(load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

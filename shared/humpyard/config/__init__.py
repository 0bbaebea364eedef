"""Configuration: TOML → checked pydantic models → the resolved ``Config``."""

from humpyard.config.load import load_config, load_config_text
from humpyard.config.spec import Config, EndpointSpec, KeySpec, ProviderSpec, RouteSpec, TargetSpec

__all__ = ["Config", "EndpointSpec", "KeySpec", "ProviderSpec", "RouteSpec", "TargetSpec",
           "load_config", "load_config_text"]

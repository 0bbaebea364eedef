"""What the gateway calls: providers, their endpoints and prices.

The upstream side of ``humpyard.toml``'s schema (``models.py`` holds the rest and
the whole file, ``RawConfig``); the same strict rules apply: unknown keys and
loosely typed values fail at load. Nothing here reads the environment or the disk.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from humpyard.config.model_base import ENV_NAME_RE, _Strict

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 9110 token
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")


class Price(_Strict):
    """USD per one million tokens. ``cache_read`` and ``cache_write`` price prompt
    tokens read from or written to a provider's prompt cache; left out, those
    tokens cost ``input`` (docs/configuration.md, "Prices")."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


class Endpoint(_Strict):
    """One place a target is served: a provider and the model name it knows."""

    provider: str
    model: str = Field(min_length=1)
    context_window: int | None = Field(default=None, gt=0)
    tools: bool | None = None
    vision: bool | None = None
    price: Price | None = None
    # What the model takes (docs/configuration.md, "Endpoint fields"): a larger
    # max_tokens is clamped to max_output_tokens; reasoning = false drops
    # reasoning_effort (unknown: passed on).
    max_output_tokens: int | None = Field(default=None, gt=0)
    reasoning: bool | None = None
    # Bedrock only: the model is Claude (InvokeModel, the Anthropic body as sent) or
    # not (Converse) whatever its id says; unset: from the id (docs/upstream.md).
    claude: bool | None = None


BEDROCK_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")


class Provider(_Strict):
    """An upstream: OpenAI chat completions, Anthropic Messages, or Amazon Bedrock
    (``protocol``; Bedrock: ``region``, ``base_url`` optional, no ``api_key_env``)."""

    base_url: str
    protocol: Literal["openai", "anthropic", "bedrock"] = "openai"
    region: str | None = None  # bedrock only: the AWS region signed for (docs/upstream.md)
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    max_retries: int = Field(default=0, ge=0, le=10)
    timeout_secs: float = Field(default=600, gt=0, le=3600)
    connect_timeout_secs: float = Field(default=10, gt=0, le=600)
    health_path: str | None = None
    connect_retry_window_secs: float = Field(default=0, ge=0, le=600)
    quota_source: Literal["opencode-go"] | None = None
    # The provider's id in a models.dev catalogue, when its base_url's host does not
    # tell (docs/routing.md, "Keeping prices current").
    catalog_id: str | None = Field(default=None, min_length=1)
    # Network settings (docs/upstream.md): a forward proxy ("" = none, even if the
    # environment names one), TLS trust and a client certificate, a concurrency cap.
    proxy: str | None = None
    ca_file: str | None = Field(default=None, min_length=1)
    client_cert: str | None = Field(default=None, min_length=1)
    client_key: str | None = Field(default=None, min_length=1)
    max_concurrent: int | None = Field(default=None, ge=1, le=1_000_000)
    # Limits on answers (docs/upstream.md "Limits on answers"); None: [router]'s.
    max_response_bytes: int | None = Field(default=None, ge=1024, le=1 << 30)
    max_decompression_ratio: float | None = Field(default=None, ge=10, le=100_000)
    max_sse_event_bytes: int | None = Field(default=None, ge=1024, le=1 << 28)
    first_byte_timeout_secs: float | None = Field(default=None, gt=0, le=3600)
    idle_timeout_secs: float | None = Field(default=None, gt=0, le=3600)
    rpm_limit: int | None = Field(default=None, ge=1, le=100_000_000)  # pacing: health/pacing.py
    tpm_limit: int | None = Field(default=None, ge=1, le=100_000_000_000)

    @model_validator(mode="before")
    @classmethod
    def _bedrock_endpoint(cls, data: Any) -> Any:
        """A Bedrock provider without ``base_url``: its region's ``bedrock-runtime``."""
        if isinstance(data, dict) and data.get("protocol") == "bedrock" \
                and "base_url" not in data:
            region = data.get("region")
            if not isinstance(region, str) or not BEDROCK_REGION_RE.match(region):
                raise ValueError("protocol = \"bedrock\" needs region, an AWS region such "
                                 "as \"us-east-1\" (base_url defaults to its endpoint)")
            data = {**data, "base_url": f"https://bedrock-runtime.{region}.amazonaws.com"}
        return data

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"must be an http(s) URL, got {v!r}")
        return v.rstrip("/")

    @field_validator("health_path")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"must start with '/', got {v!r}")
        return v

    @model_validator(mode="after")
    def _bedrock_fields(self) -> Provider:
        if self.protocol != "bedrock":
            if self.region is not None:
                raise ValueError("region is for protocol = \"bedrock\" only")
            return self
        if self.region is None or not BEDROCK_REGION_RE.match(self.region):
            raise ValueError("protocol = \"bedrock\" needs region, an AWS region such as "
                             "\"us-east-1\"")
        if self.api_key_env is not None:
            raise ValueError("api_key_env is not used with protocol = \"bedrock\": calls are "
                             "signed with AWS credentials from the standard chain "
                             "(docs/upstream.md, \"Amazon Bedrock\")")
        if self.health_path is not None:
            raise ValueError("health_path is not used with protocol = \"bedrock\": "
                             "bedrock-runtime has no health path and a readiness probe is "
                             "not signed, so it would only ever read 403; Bedrock's own "
                             "errors trip the breaker instead")
        return self

    @model_validator(mode="after")
    def _no_secret_in_plain_sight(self) -> Provider:
        # After-validators report no input value, so neither check echoes a secret.
        if "@" in self.base_url.split("://", 1)[1].split("/", 1)[0]:
            raise ValueError("base_url must not carry credentials (user:password@); "
                             "use api_key_env")
        if self.proxy:
            from humpyard.config.proxy_url import ProxyURLError, parse_proxy
            try:
                parse_proxy(self.proxy, "proxy")
            except ProxyURLError as e:  # its message names no credential
                raise ValueError(str(e)) from None
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("client_key needs client_cert (the certificate it belongs to)")
        if self.api_key_env is not None and not ENV_NAME_RE.match(self.api_key_env):
            raise ValueError("api_key_env must name an environment variable (letters, digits, "
                             "'_'), not hold the key itself")
        return self

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if name.lower() in ("authorization", "x-api-key"):
                raise ValueError(
                    f"{name!r} may not be a static header; use api_key_env for the provider key"
                )
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if not _HEADER_VALUE.fullmatch(value):  # the value may be a secret: not quoted
                raise ValueError(f"the value of header {name!r} has characters a header "
                                 "cannot carry (only printable ASCII, spaces and tabs)")
        return v

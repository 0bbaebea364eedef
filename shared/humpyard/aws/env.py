"""The Lambda functions' environment variables, checked once per instance.

``LambdaEnv.from_environ()`` reads ``os.environ`` (or a given mapping) and
raises ``EnvError`` naming every missing or malformed variable, so a
misconfigured function fails its first invocation with a message an operator
can act on instead of a ``KeyError`` deep in boto3::

    HUMPYARD_STATE_TABLE: required (the template sets it with !Ref StateTable)

``template.yaml`` sets every variable below; the defaults are for local runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from humpyard.errors import ConfigError

DEFAULT_CONFIG = "humpyard.toml"

_HINTS = {
    "HUMPYARD_STATE_TABLE": "the template sets it with !Ref StateTable",
    "HUMPYARD_LEDGER_TABLE": "the template sets it with !Ref LedgerTable",
}

TableName = Annotated[str, Field(min_length=3, max_length=255, pattern=r"^[A-Za-z0-9_.-]+$")]


class EnvError(ConfigError):
    """An environment variable is missing or malformed; the message names it."""


class LambdaEnv(BaseModel):
    """What a humpyard Lambda function reads from its environment.

    - ``HUMPYARD_STATE_TABLE``, ``HUMPYARD_LEDGER_TABLE`` (required): the
      DynamoDB tables.
    - ``HUMPYARD_CONFIG``: the TOML configuration; a relative path is
      resolved against ``LAMBDA_TASK_ROOT`` (the function's code), default
      ``humpyard.toml`` there.
    - ``HUMPYARD_CONFIG_S3``: ``s3://bucket/key`` of the configuration instead
      of the bundled file; with ``reload_poll_secs`` set, a changed object is
      picked up on the request path (``aws/config_source.py``).
    - ``HUMPYARD_CONFIG_APPCONFIG``: ``application/environment/profile`` (names
      or ids) of an AWS AppConfig configuration profile instead; reloaded the
      same way, never more often than AppConfig allows. At most one of the two.
    - ``HUMPYARD_SECRETS_ARN``: a Secrets Manager secret whose JSON object
      supplies environment values (provider ``api_key_env``, client
      ``key_env``) before the configuration is loaded; empty = none.
    - ``HUMPYARD_FLUSH_TIMEOUT_SECS``: how long a response may wait for its
      ledger writes before the last byte (default 5).
    - ``HUMPYARD_METRICS_INTERVAL_SECS``: how often an instance prints the
      counters and histograms it summed as EMF (default 60; also every 100
      requests; 0: after every request). See ``aws/emission.py``.
    - ``HUMPYARD_GAUGE_INTERVAL_SECS``: how often an instance prints its gauges
      as EMF (default 60).
    - ``HUMPYARD_TRACING``: ``true`` to trace requests with AWS X-Ray through
      Powertools' ``Tracer`` (the template's ``Tracing`` parameter sets it
      with the functions' own ``Tracing: Active``); default off, and then the
      tracing libraries are never imported (``aws/tracing.py``).
    - ``POWERTOOLS_SERVICE_NAME`` (``humpyard``),
      ``POWERTOOLS_METRICS_NAMESPACE`` (``Humpyard``): the EMF service
      dimension and namespace.
    - ``AWS_ENDPOINT_URL_DYNAMODB``: boto3 reads it itself; recorded here
      only so tests can assert what a function would talk to.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    state_table: TableName = Field(alias="HUMPYARD_STATE_TABLE")
    ledger_table: TableName = Field(alias="HUMPYARD_LEDGER_TABLE")
    config_path: Path = Field(alias="HUMPYARD_CONFIG", default=Path(DEFAULT_CONFIG))
    secrets_arn: str | None = Field(alias="HUMPYARD_SECRETS_ARN", default=None)
    config_s3: str | None = Field(alias="HUMPYARD_CONFIG_S3", default=None)
    config_appconfig: str | None = Field(alias="HUMPYARD_CONFIG_APPCONFIG", default=None)
    flush_timeout_secs: float = Field(alias="HUMPYARD_FLUSH_TIMEOUT_SECS", default=5.0, gt=0,
                                      le=60)
    metrics_interval_secs: float = Field(alias="HUMPYARD_METRICS_INTERVAL_SECS",
                                         default=60.0, ge=0, le=3600)
    gauge_interval_secs: float = Field(alias="HUMPYARD_GAUGE_INTERVAL_SECS", default=60.0,
                                       ge=0, le=3600)
    tracing: bool = Field(alias="HUMPYARD_TRACING", default=False)
    service: str = Field(alias="POWERTOOLS_SERVICE_NAME", default="humpyard", min_length=1)
    namespace: str = Field(alias="POWERTOOLS_METRICS_NAMESPACE", default="Humpyard",
                           min_length=1)
    task_root: Path = Field(alias="LAMBDA_TASK_ROOT", default=Path("."))
    dynamodb_endpoint: str | None = Field(alias="AWS_ENDPOINT_URL_DYNAMODB", default=None)

    @field_validator("secrets_arn", "config_s3", "config_appconfig", "dynamodb_endpoint",
                     mode="before")
    @classmethod
    def _blank_is_none(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v

    @property
    def config_file(self) -> Path:
        """``HUMPYARD_CONFIG`` as an absolute path (relative ones are under the task root)."""
        path = self.config_path.expanduser()
        return path if path.is_absolute() else self.task_root / path

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LambdaEnv:
        """Check the environment; ``EnvError`` names every bad variable."""
        source = os.environ if environ is None else environ
        try:
            return cls.model_validate(dict(source))
        except ValidationError as e:
            raise EnvError(_describe(e)) from None


def _describe(e: ValidationError) -> str:
    aliases = {f.alias: f.alias for f in LambdaEnv.model_fields.values() if f.alias}
    problems = []
    for err in e.errors():
        name = str(err["loc"][0]) if err["loc"] else "?"
        name = aliases.get(name, name)
        what = "required" if err["type"] == "missing" else err["msg"]
        hint = _HINTS.get(name)
        problems.append(f"{name}: {what}" + (f" ({hint})" if hint else ""))
    return "environment: " + "; ".join(problems)

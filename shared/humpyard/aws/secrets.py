"""Provider and client keys from AWS Secrets Manager, read once per instance.

The template never holds a key. It passes ``HUMPYARD_SECRETS_ARN``, the ARN
of one secret whose value is a JSON object of environment names to values::

    {"OPENAI_API_KEY": "sk-...", "CI_KEY": "hk-..."}

``secret_environ`` reads it and returns those pairs; the caller lays them
over ``os.environ`` when it loads the configuration, so ``api_key_env`` and
``key_env`` in the TOML name them exactly as they would locally. Nothing
here logs a value.
"""

from __future__ import annotations

import json
from typing import Any

from humpyard.errors import ConfigError


def secret_environ(client: Any, secret_arn: str) -> dict[str, str]:
    """The secret's JSON object as ``{name: value}``; ``ConfigError`` if it is not one.

    ``client`` is a boto3 ``secretsmanager`` client. Only string values are
    accepted (numbers and nested objects are refused by name, never echoed).
    """
    try:
        answer = client.get_secret_value(SecretId=secret_arn)
    except Exception as e:  # botocore errors carry no secret material
        raise ConfigError(f"HUMPYARD_SECRETS_ARN: could not read the secret "
                          f"({type(e).__name__}: {e})") from None
    text = answer.get("SecretString")
    if not isinstance(text, str):
        raise ConfigError("HUMPYARD_SECRETS_ARN: the secret has no SecretString "
                          "(store a JSON object of NAME: value)")
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError("HUMPYARD_SECRETS_ARN: the secret is not a JSON object "
                          "of NAME: value") from None
    if not isinstance(data, dict):
        raise ConfigError("HUMPYARD_SECRETS_ARN: the secret is not a JSON object "
                          "of NAME: value")
    bad = sorted(k for k, v in data.items() if not isinstance(v, str))
    if bad:
        raise ConfigError(f"HUMPYARD_SECRETS_ARN: values must be strings; not for {bad}")
    return {str(k): v for k, v in data.items()}

"""Provider and client keys from AWS Secrets Manager, read once per instance.

The template never holds a key. It passes ``HUMPYARD_SECRETS_ARN``: the
ARN of a secret whose value is a JSON object of environment names to values,
or several such ARNs separated by commas (the stack's generated client key,
then the operator's provider keys)::

    {"OPENAI_API_KEY": "sk-...", "CI_KEY": "hk-..."}

``secret_environ`` reads them in order and returns their pairs merged, a
later secret's value winning for a name in two; the caller lays them over
``os.environ`` when it loads the configuration, so ``api_key_env`` and
``key_env`` in the TOML name them exactly as they would locally. Nothing
here logs a value.
"""

from __future__ import annotations

import json
from typing import Any

from humpyard.errors import ConfigError


def secret_environ(client: Any, secret_arns: str) -> dict[str, str]:
    """The secrets' JSON objects as one ``{name: value}``; ``ConfigError`` if one is not.

    ``secret_arns`` is one ARN or several separated by commas (blanks ignored),
    read in order, one ``GetSecretValue`` each; a later secret wins a name.
    ``client`` is a boto3 ``secretsmanager`` client. Only string values are
    accepted (numbers and nested objects are refused by name, never echoed).
    """
    merged: dict[str, str] = {}
    for arn in (a.strip() for a in secret_arns.split(",")):
        if arn:
            merged.update(_one_secret(client, arn))
    return merged


def _one_secret(client: Any, secret_arn: str) -> dict[str, str]:
    where = f"HUMPYARD_SECRETS_ARN: the secret {secret_arn}"  # an ARN is no secret
    try:
        answer = client.get_secret_value(SecretId=secret_arn)
    except Exception as e:  # botocore errors carry no secret material
        raise ConfigError(f"{where} could not be read ({type(e).__name__}: {e})") from None
    text = answer.get("SecretString")
    if not isinstance(text, str):
        raise ConfigError(f"{where} has no SecretString (store a JSON object of NAME: value)")
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(f"{where} is not a JSON object of NAME: value") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where} is not a JSON object of NAME: value")
    bad = sorted(k for k, v in data.items() if not isinstance(v, str))
    if bad:
        raise ConfigError(f"{where}: values must be strings; not for {bad}")
    return {str(k): v for k, v in data.items()}

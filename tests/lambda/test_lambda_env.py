"""``LambdaEnv``: the functions' environment, checked once, errors naming the variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from humpyard.aws.env import EnvError, LambdaEnv
from humpyard.aws.secrets import secret_environ
from humpyard.errors import ConfigError

BASE = {"HUMPYARD_STATE_TABLE": "humpyard-StateTable-1A2B",
        "HUMPYARD_LEDGER_TABLE": "humpyard-LedgerTable-3C4D"}


def test_defaults_and_the_config_path_under_the_task_root() -> None:
    env = LambdaEnv.from_environ({**BASE, "LAMBDA_TASK_ROOT": "/var/task"})
    assert (env.state_table, env.ledger_table) == (BASE["HUMPYARD_STATE_TABLE"],
                                                   BASE["HUMPYARD_LEDGER_TABLE"])
    assert env.config_file == Path("/var/task/humpyard.toml")
    assert (env.service, env.namespace) == ("humpyard", "Humpyard")
    assert env.secrets_arn is None and env.flush_timeout_secs == 5.0
    absolute = LambdaEnv.from_environ({**BASE, "HUMPYARD_CONFIG": "/opt/conf/h.toml",
                                       "HUMPYARD_SECRETS_ARN": " "})
    assert absolute.config_file == Path("/opt/conf/h.toml") and absolute.secrets_arn is None


def test_every_bad_variable_is_named_in_one_error() -> None:
    with pytest.raises(EnvError) as err:
        LambdaEnv.from_environ({"HUMPYARD_LEDGER_TABLE": "no spaces allowed",
                                "HUMPYARD_FLUSH_TIMEOUT_SECS": "soon"})
    message = str(err.value)
    assert "HUMPYARD_STATE_TABLE: required (the template sets it with !Ref StateTable)" in message
    assert "HUMPYARD_LEDGER_TABLE: String should match pattern" in message
    assert "HUMPYARD_FLUSH_TIMEOUT_SECS:" in message
    assert isinstance(err.value, ConfigError)


class FakeSecrets:
    def __init__(self, answer: dict[str, object] | Exception) -> None:
        self.answer = answer

    def get_secret_value(self, SecretId: str) -> dict[str, object]:  # noqa: N803 - boto3's name
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_secret_is_a_json_object_of_strings() -> None:
    good = FakeSecrets({"SecretString": '{"OPENAI_API_KEY": "sk-1", "CI_KEY": "hk-2"}'})
    assert secret_environ(good, "arn") == {"OPENAI_API_KEY": "sk-1", "CI_KEY": "hk-2"}
    for bad, words in [({"SecretBinary": b"x"}, "no SecretString"),
                       ({"SecretString": "sk-plain"}, "not a JSON object"),
                       ({"SecretString": '["a"]'}, "not a JSON object"),
                       ({"SecretString": '{"N": 5, "M": "ok"}'}, "not for ['N']"),
                       (RuntimeError("AccessDenied"), "could not read the secret")]:
        with pytest.raises(ConfigError, match=re.escape(words)) as err:
            secret_environ(FakeSecrets(bad), "arn")
        assert "sk-plain" not in str(err.value)

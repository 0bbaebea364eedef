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
    """A ``secretsmanager`` client edge: one answer for every ARN, or one per ARN."""

    def __init__(self, answer: dict[str, object] | Exception,
                 by_arn: dict[str, dict[str, object]] | None = None) -> None:
        self.answer, self.by_arn = answer, by_arn or {}
        self.asked: list[str] = []

    def get_secret_value(self, SecretId: str) -> dict[str, object]:  # noqa: N803 - boto3's name
        self.asked.append(SecretId)
        answer = self.by_arn.get(SecretId, self.answer)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_secret_is_a_json_object_of_strings() -> None:
    good = FakeSecrets({"SecretString": '{"OPENAI_API_KEY": "sk-1", "CI_KEY": "hk-2"}'})
    assert secret_environ(good, "arn") == {"OPENAI_API_KEY": "sk-1", "CI_KEY": "hk-2"}
    for bad, words in [({"SecretBinary": b"x"}, "no SecretString"),
                       ({"SecretString": "sk-plain"}, "not a JSON object"),
                       ({"SecretString": '["a"]'}, "not a JSON object"),
                       ({"SecretString": '{"N": 5, "M": "ok"}'}, "not for ['N']"),
                       (RuntimeError("AccessDenied"), "the secret arn could not be read")]:
        with pytest.raises(ConfigError, match=re.escape(words)) as err:
            secret_environ(FakeSecrets(bad), "arn")
        assert "sk-plain" not in str(err.value)


def test_several_secrets_are_read_in_order_and_the_later_one_wins_a_name() -> None:
    generated, operator = "arn:generated-AbCdEf", "arn:operator-GhIjKl"
    client = FakeSecrets(RuntimeError("unknown"), by_arn={
        generated: {"SecretString": '{"HUMPYARD_CLIENT_KEY": "gen", "SHARED": "first"}'},
        operator: {"SecretString": '{"OPENAI_API_KEY": "sk-1", "SHARED": "second"}'}})
    merged = secret_environ(client, f"{generated}, {operator},")
    assert merged == {"HUMPYARD_CLIENT_KEY": "gen", "OPENAI_API_KEY": "sk-1", "SHARED": "second"}
    assert client.asked == [generated, operator]
    with pytest.raises(ConfigError, match="the secret arn:missing-MnOpQr could not be read"):
        secret_environ(client, f"{generated},arn:missing-MnOpQr")

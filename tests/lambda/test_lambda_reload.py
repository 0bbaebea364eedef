"""A Lambda instance reloads its configuration when due: from S3, AppConfig or the bundled file.

All or nothing: an invalid object is logged and the old configuration keeps
serving. A warm request between looks costs no call to the source. The
instance's clock is a ``FakeClock`` the tests advance, so "due" never depends
on how fast the machine is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from lambda_support import LEDGER, STATE, LambdaContext, event, gateway_config, load_function
from moto import mock_aws

from humpyard.aws.build import Instance, Once
from humpyard.clock import FakeClock
from humpyard.errors import ConfigError
from humpyard.store.dynamodb import create_tables
from tests.support import FakeUpstream
from tests.support.fake_appconfig import FakeAppConfig

POLL = 'reload_poll_secs = 0.2\n'


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple]:
    with FakeUpstream() as primary, FakeUpstream() as backup, mock_aws():
        create_tables(boto3.client("dynamodb"), STATE, LEDGER)
        monkeypatch.setenv("HUMPYARD_STATE_TABLE", STATE)
        monkeypatch.setenv("HUMPYARD_LEDGER_TABLE", LEDGER)
        modules = []
        yield primary, backup, tmp_path, monkeypatch, modules
        for m in modules:
            inst = m._instance._value
            if inst is not None:
                inst.close()


def target_of(module) -> str:
    resp = module.handler(event("chat_post"), LambdaContext())
    assert resp["statusCode"] == 200, resp["body"]
    return resp["headers"]["x-humpyard-target"]


def load_gateway(clock: FakeClock):
    """The gateway function, its instance built on ``clock`` (the seam the entry point's
    ``Instance.build`` takes)."""
    module = load_function("gateway")
    module._instance = Once(lambda: Instance.build(clock=clock))
    return module


def only_backup(text: str) -> str:
    return text.replace('targets = ["primary", "backup"]', 'targets = ["backup"]')


def test_config_from_s3_is_reloaded_when_due(env, caplog):
    primary, backup, _, monkeypatch, modules = env
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="cfg")
    text = POLL + gateway_config(primary.url, backup.url)
    s3.put_object(Bucket="cfg", Key="humpyard.toml", Body=text.encode())
    monkeypatch.setenv("HUMPYARD_CONFIG_S3", "s3://cfg/humpyard.toml")
    clock = FakeClock()
    gateway = load_gateway(clock)
    modules.append(gateway)
    assert target_of(gateway) == "primary"
    s3.put_object(Bucket="cfg", Key="humpyard.toml", Body=only_backup(text).encode())
    assert target_of(gateway) == "primary"  # not due yet: nothing was even asked
    clock.advance(0.25)
    assert target_of(gateway) == "backup"
    s3.put_object(Bucket="cfg", Key="humpyard.toml", Body=b'[routes.auto]\ntargets = ["x"]')
    clock.advance(0.25)
    with caplog.at_level(logging.ERROR, logger="humpyard.reload"):
        assert target_of(gateway) == "backup"
    assert any("reload rejected" in r.getMessage() for r in caplog.records)


def test_bundled_file_is_reloaded_when_due(env):
    primary, backup, tmp_path, monkeypatch, modules = env
    conf = tmp_path / "humpyard.toml"
    text = POLL + gateway_config(primary.url, backup.url)
    conf.write_text(text)
    monkeypatch.setenv("HUMPYARD_CONFIG", str(conf))
    clock = FakeClock()
    gateway = load_gateway(clock)
    modules.append(gateway)
    assert target_of(gateway) == "primary"
    conf.write_text(only_backup(text))
    clock.advance(0.25)
    assert target_of(gateway) == "backup"


def test_a_bad_s3_url_is_a_clear_error(env):
    _, _, _, monkeypatch, _ = env
    monkeypatch.setenv("HUMPYARD_CONFIG_S3", "https://not-s3/x")
    gateway = load_function("gateway")
    # the cold start fails with a message naming the variable (Lambda reports it)
    with pytest.raises(ConfigError, match="HUMPYARD_CONFIG_S3: expected s3://bucket/key"):
        gateway.handler(event("chat_post"), LambdaContext())


APPCONFIG = "humpyard/live/gateway"


@contextmanager
def appconfig_gateway(env, poll_secs: int, clock: FakeClock) -> Iterator[tuple]:
    """A fake AppConfig holding the two-target config (v1), and the gateway function
    reading it on ``clock``; yields (appconfig, gateway, text)."""
    primary, backup, _, monkeypatch, modules = env
    with FakeAppConfig("humpyard", "live", "gateway", poll_secs=poll_secs) as appconfig:
        text = POLL + gateway_config(primary.url, backup.url)
        appconfig.deploy(text, "v1")
        monkeypatch.setenv("AWS_ENDPOINT_URL_APPCONFIGDATA", appconfig.url)
        monkeypatch.setenv("HUMPYARD_CONFIG_APPCONFIG", APPCONFIG)
        gateway = load_gateway(clock)
        modules.append(gateway)
        yield appconfig, gateway, text


def test_config_from_appconfig_is_reloaded_when_due_and_allowed(env, caplog):
    clock = FakeClock()
    with appconfig_gateway(env, poll_secs=0, clock=clock) as (appconfig, gateway, text):
        assert target_of(gateway) == "primary"
        assert (appconfig.sessions, appconfig.polls) == (1, 1)
        appconfig.deploy(only_backup(text), "v2")
        assert target_of(gateway) == "primary"  # not due yet: nothing was even asked
        assert appconfig.polls == 1
        clock.advance(0.25)
        assert target_of(gateway) == "backup"
        clock.advance(0.25)
        assert target_of(gateway) == "backup"  # due, asked, unchanged: an empty answer
        assert appconfig.polls == 3
        # a lost session (tokens expire) is logged, then the next look starts a new one
        appconfig.expire_tokens()
        appconfig.deploy(text, "v3")
        clock.advance(0.25)
        with caplog.at_level(logging.ERROR, logger="humpyard.reload"):
            assert target_of(gateway) == "backup"
        assert any("could not be read" in r.getMessage() for r in caplog.records)
        clock.advance(0.25)
        assert target_of(gateway) == "primary"
        assert appconfig.sessions == 2


def test_appconfig_is_not_asked_before_the_interval_it_set(env):
    clock = FakeClock()
    with appconfig_gateway(env, poll_secs=60, clock=clock) as (appconfig, gateway, text):
        assert target_of(gateway) == "primary"
        appconfig.deploy(only_backup(text), "v2")
        clock.advance(0.25)  # reload_poll_secs has passed, AppConfig's 60 s have not
        assert target_of(gateway) == "primary"
        assert appconfig.polls == 1


@pytest.mark.parametrize(("variables", "message"), [
    ({"HUMPYARD_CONFIG_APPCONFIG": "only/two"},
     "HUMPYARD_CONFIG_APPCONFIG: expected application/environment/profile"),
    ({"HUMPYARD_CONFIG_APPCONFIG": APPCONFIG, "HUMPYARD_CONFIG_S3": "s3://cfg/x.toml"},
     "HUMPYARD_CONFIG_S3 and HUMPYARD_CONFIG_APPCONFIG are both set"),
])
def test_a_bad_appconfig_setting_is_a_clear_error(env, variables, message):
    _, _, _, monkeypatch, _ = env
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    gateway = load_function("gateway")
    with pytest.raises(ConfigError, match=message):
        gateway.handler(event("chat_post"), LambdaContext())

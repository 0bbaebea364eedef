"""Secrets in the configuration: never shown, never echoed, never sent where they should not go.

``/v1/config`` and every ``repr`` leave out provider keys, client keys and
``key_sha256``; a configuration error never quotes a key, even one pasted
where an environment variable's name belongs; a key file's trailing newline
is not part of the key; and a provider with a quota source sends its key only
over https (plain http only to a loopback host).
"""

from __future__ import annotations

import hashlib
import logging

import httpx
import pytest

from humpyard.config import load_config_text
from humpyard.errors import ConfigError
from tests.security.support import ALPHA_KEY, BETA_KEY, PROVIDER_KEY, bearer, chat, find_leaks
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import running_gateway

BETA_SHA = hashlib.sha256(BETA_KEY.encode()).hexdigest()
AZURE_KEY = "azure-static-header-key-0123456789abcdef"


def config(url: str = "https://api.example/v1") -> str:
    return f"""
[providers.p]
base_url = "{url}"
api_key_env = "PK"
headers = {{ "X-Title" = "humpyard", "api-key" = "{AZURE_KEY}" }}
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
[keys.alpha]
key_env = "ALPHA"
manage_overrides = true
admin = true
[keys.beta]
key_sha256 = "{BETA_SHA}"
"""


ENV = {"PK": PROVIDER_KEY, "ALPHA": ALPHA_KEY}
SECRETS = (PROVIDER_KEY, ALPHA_KEY, BETA_KEY, AZURE_KEY)


def test_v1_config_shows_no_key_no_digest_and_no_credential_header_value() -> None:
    with FakeUpstream() as up, running_gateway(config(up.url), env=ENV) as gw:
        r = httpx.get(gw.url + "/v1/config", headers=bearer(ALPHA_KEY))
    assert r.status_code == 200
    assert not find_leaks(r.text, SECRETS)
    data = r.json()
    assert "key_sha256" not in data["keys"]["beta"]
    assert data["keys"]["alpha"]["key_env"] == "ALPHA"  # the variable's name is no secret
    assert data["providers"]["p"]["api_key_env"] == "PK"
    assert data["providers"]["p"]["headers"] == {"X-Title": "humpyard", "api-key": "[redacted]"}


def test_no_repr_shows_a_secret() -> None:
    cfg = load_config_text(config(), env=ENV)
    texts = [repr(cfg), str(cfg), repr(cfg.public_view()), repr(cfg.providers), repr(cfg.keys)]
    for text in texts:
        assert not find_leaks(text, (PROVIDER_KEY, ALPHA_KEY, BETA_KEY)), text[:500]


@pytest.mark.parametrize("table", [
    f'[providers.q]\nbase_url = "https://x.example/v1"\napi_key_env = "{PROVIDER_KEY}"',
    f'[keys.k]\nkey_env = "{ALPHA_KEY}"',
    f'[keys.k]\nkey_sha256 = "{ALPHA_KEY}"',
    f'[keys.k]\nkey = "{ALPHA_KEY}"',
    f'[providers.q]\nbase_url = "https://x.example/v1"\napi_key = "{PROVIDER_KEY}"',
    f'[providers.q]\nbase_url = "https://user:{PROVIDER_KEY}@x.example/v1"',
    f'[providers.q]\nbase_url = "https://x.example/v1"\n'
    f'headers = {{ Authorization = "Bearer {PROVIDER_KEY}" }}',
], ids=["api_key_env", "key_env", "key_sha256", "key", "api_key", "userinfo", "header"])
def test_a_key_in_the_wrong_place_is_refused_without_being_quoted(table: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text(config() + table, env=ENV)
    assert not find_leaks(str(info.value), (PROVIDER_KEY, ALPHA_KEY)), str(info.value)
    assert "invalid configuration" in str(info.value)


def test_a_key_files_trailing_newline_is_not_part_of_the_key(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    env = {"PK": PROVIDER_KEY + "\n", "ALPHA": ALPHA_KEY + "\r\n"}
    with FakeUpstream() as up, running_gateway(config(up.url), env=env) as gw:
        r = httpx.post(gw.url + "/v1/chat/completions", json=chat("t"),
                       headers=bearer(ALPHA_KEY), timeout=10)
    assert r.status_code == 200, r.text
    assert up.requests[0].headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert not find_leaks(caplog.text, SECRETS)


@pytest.mark.parametrize("value", [f"{PROVIDER_KEY[:10]}\n{PROVIDER_KEY[10:]}",
                                   f"{PROVIDER_KEY[:10]} {PROVIDER_KEY[10:]}",
                                   PROVIDER_KEY + "\u00e9"], ids=["newline", "space", "non-ascii"])
def test_a_provider_key_that_cannot_be_a_header_is_refused_by_name(value: str) -> None:
    # httpx would refuse it at every call, quoting it in its error and debug log
    with pytest.raises(ConfigError) as info:
        load_config_text(config(), env={**ENV, "PK": value})
    assert "providers.p.api_key_env: the value of PK" in str(info.value)
    assert PROVIDER_KEY[:10] not in str(info.value) and PROVIDER_KEY[10:] not in str(info.value)


QUOTA = """
[providers.q]
base_url = "{url}"
api_key_env = "PK"
quota_source = "opencode-go"
"""


@pytest.mark.parametrize("url", [
    "http://opencode.ai/zen/go/v1", "http://10.0.0.5:8000/v1", "http://127.0.0.1.nip.io/v1",
    "http://localhost.example/v1", "http://[fe80::1]/v1", "http://0.0.0.0:8000/v1",
])
def test_a_quota_key_never_goes_over_plain_http_to_a_remote_host(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text(config() + QUOTA.format(url=url), env=ENV)
    assert "providers.q.quota_source: the key is only sent over https" in str(info.value)


@pytest.mark.parametrize("url", [
    "https://opencode.ai/zen/go/v1", "http://127.0.0.1:8000/v1", "http://localhost:9/v1",
    "http://[::1]:8080/v1", "http://127.5.6.7/v1",
])
def test_https_or_loopback_http_may_carry_a_quota_key(url: str) -> None:
    cfg = load_config_text(config() + QUOTA.format(url=url), env=ENV)
    assert cfg.providers["q"].quota_source == "opencode-go"

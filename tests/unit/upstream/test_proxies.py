"""Proxy choice from the environment and the provider, with curl's and httpx's semantics."""

from __future__ import annotations

import asyncio

import pytest

from humpyard.config.spec import ProviderSpec
from humpyard.upstream.client import UpstreamClient
from humpyard.upstream.proxies import NoProxy, ProxyRules, ProxyURLError, choose, parse_proxy
from tests.support.fake_upstream import FakeUpstream
from tests.support.proxy import ForwardProxy


@pytest.mark.parametrize(("no_proxy", "host", "bypass"), [
    ("example.com", "example.com", True),
    ("example.com", "api.example.com", True),
    ("example.com", "badexample.com", False),
    (".example.com", "example.com", True),
    (".example.com", "a.b.example.com", True),
    ("*.example.com", "api.example.com", True),
    ("EXAMPLE.com", "Api.Example.COM", True),
    ("example.com.", "example.com", True),
    ("10.0.0.0/8", "10.1.2.3", True),
    ("10.0.0.0/8", "11.1.2.3", False),
    ("10.0.0.0/8", "10.example", False),
    ("192.168.1.7", "192.168.1.7", True),
    ("::1", "::1", True),
    ("[fd00::]/8", "fd12::1", True),
    ("fd00::/8", "fe80::1", False),
    ("*", "anything.at.all", True),
    ("localhost, 127.0.0.1", "127.0.0.1", True),
    ("", "example.com", False),
    ("  ,, ", "example.com", False),
])
def test_no_proxy(no_proxy: str, host: str, bypass: bool) -> None:
    assert NoProxy(no_proxy).matches(host) is bypass


def test_environment_either_case_lower_wins() -> None:
    rules = ProxyRules({"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2",
                        "HTTP_PROXY": "proxy.corp:3128", "no_proxy": "internal"})
    assert rules.for_host("https", "api.x").address == "lower:2"  # type: ignore[union-attr]
    assert rules.for_host("http", "api.x").address == "proxy.corp:3128"  # type: ignore[union-attr]
    assert rules.for_host("https", "svc.internal") is None


def test_all_proxy_is_the_fallback_and_unsupported_schemes_are_ignored(caplog) -> None:
    rules = ProxyRules({"ALL_PROXY": "http://all:8080", "HTTPS_PROXY": "socks5://s:1080"})
    assert rules.for_host("http", "a").address == "all:8080"  # type: ignore[union-attr]
    assert rules.for_host("https", "a") is None  # HTTPS_PROXY set, but not one we speak
    assert "HTTPS_PROXY is ignored" in caplog.text
    assert ProxyRules({}).for_host("https", "a") is None


def test_the_provider_setting_overrides_the_environment() -> None:
    rules = ProxyRules({"https_proxy": "http://env:1", "no_proxy": "a"})
    assert choose(None, rules, "https", "b").address == "env:1"  # type: ignore[union-attr]
    assert choose("", rules, "https", "b") is None  # "" turns proxying off
    assert choose("http://own:2", rules, "https", "a").address == "own:2"  # type: ignore[union-attr]


def test_credentials_stay_out_of_repr_and_errors() -> None:
    p = parse_proxy("http://us%40er:p%3Ass@proxy.corp:3128")
    assert p.authorization == b"Basic dXNAZXI6cDpzcw=="  # "us@er:p:ss"
    assert "p%3Ass" not in repr(p) and "dXNA" not in repr(p)
    for bad in ("socks5://u:secret@h:1", "https://u:secret@h:1", "http://u:secret@:1",
                "http://u:secret@h:notaport"):
        with pytest.raises(ProxyURLError) as info:
            parse_proxy(bad, "providers.p.proxy")
        assert "secret" not in str(info.value) and "providers.p.proxy" in str(info.value)


def test_the_request_path_and_side_traffic_go_through_the_environment_proxy() -> None:
    async def main(px: ForwardProxy, up: FakeUpstream) -> None:
        client = UpstreamClient(env={"HTTP_PROXY": px.url_with("u", "pw")})
        try:
            p = ProviderSpec(name="p", base_url=up.url, timeout_secs=5)
            resp = await client.open(p, "/chat/completions", b'{"model": "m"}')
            assert resp.status == 200 and b"choices" in await resp.read()
            await resp.aclose()
            r = await client.http.get(up.origin + "/health")
            assert r.status_code == 200
        finally:
            await client.aclose()
    with ForwardProxy(credentials=("u", "pw")) as px, FakeUpstream() as up:
        asyncio.run(main(px, up))
        assert [(m, t) for m, t, _ in px.seen] == [
            ("POST", f"{up.url}/chat/completions"), ("GET", f"{up.origin}/health")]
        assert "proxy-authorization" not in {k for r in up.requests for k in r.headers}


@pytest.mark.parametrize(("setting", "error"), [
    ('proxy = "socks5://u:pw-SECRET@h:1"', "proxy scheme 'socks5' is not supported"),
    ('proxy = "http://u:pw-SECRET@:x"', "not a proxy URL"),
    ('proxy = "http://u:pw-SECRET@h:1"\nclient_key = "/k"', "client_key needs client_cert"),
])
def test_configuration_errors_name_the_key_and_never_the_password(setting: str,
                                                                  error: str) -> None:
    from humpyard.config import load_config_text
    from humpyard.errors import ConfigError
    with pytest.raises(ConfigError) as info:
        load_config_text(f'[providers.p]\nbase_url = "http://h/v1"\n{setting}\n'
                         '[targets.t]\nendpoints = [{ provider = "p", model = "m" }]\n', env={})
    assert error in str(info.value) and "providers.p" in str(info.value)
    assert "SECRET" not in str(info.value)


def test_the_public_view_and_repr_hide_proxy_credentials() -> None:
    from humpyard.config import load_config_text
    config = load_config_text('[providers.p]\nbase_url = "http://h/v1"\n'
                              'proxy = "http://u:pw-SECRET@proxy.corp:3128"\nmax_concurrent = 8\n'
                              '[router]\nmax_concurrent = 100\nslot_wait_secs = 2\n'
                              '[targets.t]\nendpoints = [{ provider = "p", model = "m" }]\n',
                              env={})
    p = config.providers["p"]
    assert (p.max_concurrent, config.router.max_concurrent, config.router.slot_wait_secs) == \
        (8, 100, 2)
    assert "SECRET" not in repr(p) and "SECRET" not in repr(config)
    shown = config.public_view()["providers"]["p"]["proxy"]
    assert shown == "http://[redacted]@proxy.corp:3128"

"""``humpyard check``: every problem in one run, in one notation, with the key you meant.

Each test runs the real command (``humpyard.cli.main``) on a file in a
temporary directory and reads what an operator would read.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from humpyard.cli import main
from humpyard.config import load_config_text
from humpyard.errors import ConfigError

GOOD = """
[providers.p]
base_url = "http://127.0.0.1:9/v1"
[providers.q]
base_url = "http://127.0.0.1:9/v1"
[targets.small]
endpoints = [{ provider = "p", model = "s" }]
[targets.large]
endpoints = [{ provider = "p", model = "l" }, { provider = "q", model = "l" }]
[routes.auto]
targets = ["small", "large"]
fallback_on = ["rate_limit", "server_error"]
[[select]]
name = "coders"
when = { model = "claude-*" }
route = "auto"
[ledger]
path = "x.db"
"""


def check(tmp_path: Path, text: str, capsys) -> tuple[int, str, str]:
    conf = tmp_path / "humpyard.toml"
    conf.write_text(text)
    code = main(["check", "--config", str(conf)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_good_file_passes(tmp_path, capsys):
    code, out, err = check(tmp_path, GOOD, capsys)
    assert code == 0, err
    assert out.startswith("ok: 2 providers, 2 targets, 1 routes, 1 selector rules")
    assert err == ""


def test_schema_and_reference_errors_come_in_one_run(tmp_path, capsys):
    text = (GOOD.replace("fallback_on =", "falback_on =")
            .replace('targets = ["small", "large"]', 'targets = ["smal", "large"]')
            .replace('route = "auto"', 'route = "atuo"')
            .replace('provider = "q"', 'provider = "qq"'))
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    lines = [line.strip() for line in err.splitlines()[1:]]
    assert "routes.auto.falback_on: unknown key; did you mean 'fallback_on'?" in lines
    assert "routes.auto.targets[0]: unknown target 'smal'; did you mean 'small'?" in lines
    assert "select[0].route: unknown route 'atuo'; did you mean 'auto'? (rule 'coders')" in lines
    assert ("targets.large.endpoints[1].provider: unknown provider 'qq'; did you mean 'q'?"
            in lines)
    assert len(lines) == 4, err


@pytest.mark.parametrize("old,new,expected", [
    ("fallback_on =", "falback_on =",
     "routes.auto.falback_on: unknown key; did you mean 'fallback_on'?"),
    ("[ledger]", "[ledgr]", "ledgr: unknown key; did you mean 'ledger'?"),
    ("[providers.q]", 'api_key = "sk-live-0123456789"\n[providers.q]',
     "providers.p.api_key: unknown key; did you mean 'api_key_env'?"),
], ids=["falback_on", "ledgr", "api_key"])
def test_an_unknown_key_names_the_closest_valid_one(tmp_path, capsys, old, new, expected):
    code, _, err = check(tmp_path, GOOD.replace(old, new, 1), capsys)
    assert code == 1
    assert err.splitlines()[1].strip().startswith(expected), err
    assert "sk-live-0123456789" not in err  # a key in the wrong place is never echoed


def test_a_name_close_to_nothing_lists_the_known_ones(tmp_path, capsys):
    code, _, err = check(tmp_path, GOOD.replace('"small", "large"', '"zzz", "large"'), capsys)
    assert code == 1
    assert "routes.auto.targets[0]: unknown target 'zzz' (known: 'large', 'small')" in err


def test_one_path_notation_everywhere(tmp_path, capsys):
    text = (GOOD.replace('"rate_limit", "server_error"', '"rate_limit", "ratelimit"')
            .replace('provider = "q"', 'provider = "nope"'))
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert "routes.auto.fallback_on[1]: " in err and "did you mean 'rate_limit'?" in err
    assert "targets.large.endpoints[1].provider: unknown provider 'nope'" in err
    # No dotted list index (fallback_on.1) and no other spelling of the same place.
    assert not re.search(r"\.\d+\b(?!\.)", err.replace("127.0.0.1", "")), err


def test_a_name_toml_would_quote_is_quoted_in_the_path(tmp_path, capsys):
    text = GOOD.replace("[targets.large]", '[targets."gpt-4.1"]').replace(
        '"small", "large"', '"small", "gpt-4.1"').replace('provider = "q"', 'provider = "x"')
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert "targets.\"gpt-4.1\".endpoints[1].provider: unknown provider 'x'" in err


@pytest.mark.parametrize("snippet,where,kind", [
    ('price = { input = "3", output = 15 }', "targets.small.endpoints[0].price.input",
     "a string"),
    ("context_window = \"128k\"", "targets.small.endpoints[0].context_window", "a string"),
    ("tools = 1", "targets.small.endpoints[0].tools", "an integer"),
    ("context_window = 1.5", "targets.small.endpoints[0].context_window", "a number"),
], ids=["string-price", "string-window", "int-bool", "float-int"])
def test_a_value_of_the_wrong_type_is_refused(tmp_path, capsys, snippet, where, kind):
    text = GOOD.replace('{ provider = "p", model = "s" }',
                        '{ provider = "p", model = "s", ' + snippet + " }")
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert f"{where}: " in err and f"not {kind}" in err, err


def test_an_integer_is_still_a_number():
    cfg = load_config_text(GOOD.replace('model = "s"', 'model = "s", price = '
                                                        '{ input = 3, output = 15 }'), env={})
    assert cfg.targets["small"].endpoints[0].price_input == 3.0


@pytest.mark.parametrize("text", ["", "# nothing yet\n", '[providers.p]\nbase_url = "http://h/v1"\n'],
                         ids=["empty", "comments", "no-targets"])
def test_an_empty_configuration_warns(tmp_path, capsys, text):
    code, out, err = check(tmp_path, text, capsys)
    assert code == 0
    assert out.startswith("ok:")
    assert "warning: the configuration declares no targets" in err


def test_a_toml_syntax_error_gives_line_and_column(tmp_path, capsys):
    text = GOOD.replace('fallback_on = ["rate_limit", "server_error"]',
                        'fallback_on = ["rate_limit" "server_error"]')
    line = text.splitlines().index('fallback_on = ["rate_limit" "server_error"]') + 1
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert f"line {line}, column 29: TOML syntax:" in err, err
    assert '    fallback_on = ["rate_limit" "server_error"]' in err
    assert err.splitlines()[-1].strip() == "^"
    assert err.splitlines()[-1].index("^") == err.splitlines()[-2].index('"server_error"')


def test_check_exits_non_zero_without_a_traceback(tmp_path):
    conf = tmp_path / "bad.toml"
    conf.write_text(GOOD.replace("[ledger]", "[ledgr]"))
    r = subprocess.run([sys.executable, "-m", "humpyard.cli", "check", "--config", str(conf)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "ledgr: unknown key; did you mean 'ledger'?" in r.stderr


def test_serve_and_reload_see_the_same_problems():
    # The loader is shared: load_config_text raises what check prints.
    with pytest.raises(ConfigError) as info:
        load_config_text(GOOD.replace("fallback_on =", "falback_on ="), env={})
    assert "routes.auto.falback_on: unknown key; did you mean 'fallback_on'?" in str(info.value)


@pytest.mark.parametrize("name, says", [
    ("r" * 257, "a name has at most 256 characters, this one 257"),
    ("ünïcode", "a name is 1 to 256 printable ASCII characters"),
])
def test_a_name_a_client_could_not_send_or_a_header_could_not_carry_is_refused(
        tmp_path, capsys, name, says):
    text = GOOD.replace("[routes.auto]", f'[routes."{name}"]').replace(
        'route = "auto"', f'route = "{name}"')
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1 and says in err, err


@pytest.mark.parametrize("snippet,where", [
    ("max_output_tokens = 0", "targets.small.endpoints[0].max_output_tokens"),
    ('reasoning = "no"', "targets.small.endpoints[0].reasoning"),
    ("price = { input = 3, output = 15, cache_read = -1 }",
     "targets.small.endpoints[0].price.cache_read"),
    ("price = { input = 3, output = 15, cache_writes = 1 }",
     "targets.small.endpoints[0].price.cache_writes"),
], ids=["zero-max-output", "string-reasoning", "negative-cache-price", "typo"])
def test_endpoint_fitting_and_cache_prices_are_checked(tmp_path, capsys, snippet, where):
    text = GOOD.replace('{ provider = "p", model = "s" }',
                        '{ provider = "p", model = "s", ' + snippet + " }")
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1 and f"{where}: " in err, err


def test_a_provider_protocol_is_openai_or_anthropic(tmp_path, capsys):
    cfg = load_config_text(GOOD.replace('[providers.q]\n', '[providers.q]\nprotocol = '
                                                          '"anthropic"\n'), env={})
    assert (cfg.providers["p"].protocol, cfg.providers["q"].protocol) == ("openai",
                                                                          "anthropic")
    code, _, err = check(tmp_path, GOOD.replace('[providers.q]\n',
                                                '[providers.q]\nprotocol = "grpc"\n'), capsys)
    assert code == 1 and "providers.q.protocol: " in err and "anthropic" in err, err


def test_fitting_and_cache_prices_reach_the_endpoint():
    cfg = load_config_text(GOOD.replace(
        '{ provider = "p", model = "s" }',
        '{ provider = "p", model = "s", max_output_tokens = 8192, reasoning = false, '
        'price = { input = 3, output = 15, cache_read = 0.3, cache_write = 3.75 } }'), env={})
    ep = cfg.targets["small"].endpoints[0]
    assert (ep.max_output_tokens, ep.reasoning, ep.price_cache_read, ep.price_cache_write) == (
        8192, False, 0.3, 3.75)
    assert ep.adapts and not cfg.targets["large"].endpoints[0].adapts


def test_a_bedrock_provider_refuses_a_health_path():
    """A readiness probe is a plain GET: against bedrock-runtime it is unsigned and
    only ever answered 403, so a health_path there marked every target not ready."""
    text = ('[providers.b]\nprotocol = "bedrock"\nregion = "us-east-1"\n'
            'health_path = "/ping"\n'
            '[targets.t]\nendpoints = [{ provider = "b", model = "anthropic.claude" }]\n'
            '[routes.r]\ntargets = ["t"]\n')
    with pytest.raises(ConfigError) as e:
        load_config_text(text)
    assert "health_path is not used with protocol = \"bedrock\"" in str(e.value)
    assert "providers.b" in str(e.value)


def test_inf_and_nan_are_no_setting(tmp_path, capsys):
    """TOML has ``inf`` and ``nan``; a price of ``inf`` and a budget of ``inf`` passed
    ``humpyard check`` (a price's ``ge=0`` lets infinity through), made every request
    on the target unaffordable and showed a non-number in ``/v1/config``. Each is now
    named as not finite, with the other problems of the file."""
    text = GOOD.replace('model = "s" }', 'model = "s", price = { input = 1, output = inf } }')
    text += '\n[keys.k]\nkey_sha256 = "' + "0" * 64 + '"\nbudget = { usd = inf }\n'
    text += '[overrides]\ndefault_secs = nan\n'
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert "targets.small.endpoints[0].price.output: Input should be a finite number" in err
    assert "keys.k.budget.usd: Input should be a finite number (got inf)" in err
    assert "overrides.default_secs:" in err and "nan" in err


def test_two_keys_with_one_secret_are_refused_without_saying_it():
    """Two key ids with the same secret were accepted: every request was the first's,
    and the second's routes, budget and limits never applied."""
    text = ('[providers.p]\nbase_url = "http://127.0.0.1:9/v1"\n'
            '[targets.t]\nendpoints = [{ provider = "p", model = "m" }]\n'
            '[keys.admin]\nkey_env = "A"\nadmin = true\n'
            '[keys.user]\nkey_env = "U"\nallowed_routes = ["t"]\n'
            f'[keys.ci]\nkey_sha256 = "{"ab" * 32}"\n[keys.bot]\nkey_sha256 = "{"ab" * 32}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, env={"A": "sk-same-secret-1", "U": "sk-same-secret-1"})
    said = str(caught.value)
    assert "keys.user: the same secret as keys.admin; each key needs a secret of its own" \
        in said
    assert "keys.bot: the same secret as keys.ci" in said
    assert "sk-same" not in said and "abab" not in said
    assert load_config_text(text.replace(f'"{"ab" * 32}"\n[keys.bot]', f'"{"cd" * 32}"\n'
                                         '[keys.bot]', 1),
                            env={"A": "sk-1", "U": "sk-2"}).keys.keys() == {
        "admin", "user", "ci", "bot"}

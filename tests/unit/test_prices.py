"""``humpyard prices import`` / ``prices check`` against a committed models.dev-format
catalogue (tests/fixtures/models-dev/api.json), through the real command line.

The file ``import`` writes is loaded back the way ``humpyard serve`` loads it,
so what is tested is what a gateway would run on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from humpyard.cli import main
from humpyard.config import load_config
from humpyard.prices.catalog import CatalogError, parse_catalog, read_catalog

CATALOGUE = Path(__file__).resolve().parents[1] / "fixtures" / "models-dev" / "api.json"

CONFIG = """
{include}
[providers.groq]
base_url = "https://api.groq.com/openai/v1"
api_key_env = "GROQ_API_KEY"
[providers.openrouter]
base_url = "https://openrouter.ai/api/v1"
[providers.zen-go]
base_url = "https://opencode.ai/zen/go/v1"
[providers.corp]
base_url = "https://gateway.corp.example/v1"
catalog_id = "acme"
[providers.local]
base_url = "http://127.0.0.1:8000/v1"

[targets.big]
endpoints = [
  {{ provider = "groq", model = "llama-3.3-70b-versatile" }},
  {{ provider = "openrouter", model = "anthropic/claude-sonnet-4" }},
]
[targets.small]
endpoints = [{{ provider = "groq", model = "llama-3.1-8b-instant" }}]
[targets.coder]
endpoints = [{{ provider = "zen-go", model = "qwen3-coder" }},
             {{ provider = "corp", model = "acme-large" }}]
[targets.home]
endpoints = [{{ provider = "local", model = "qwen" }},
             {{ provider = "groq", model = "llama-3.3-70b" }}]
[keys.ci]
key_env = "CI_KEY_THAT_IS_NOT_SET"
"""


def setup(tmp_path: Path, include: bool = True, **replace: str) -> Path:
    text = CONFIG.format(include='include = ["prices.toml"]' if include else "")
    for old, new in replace.items():
        text = text.replace(old, new)
    conf = tmp_path / "humpyard.toml"
    conf.write_text(text)
    return conf


def prices(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["prices", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_import_writes_what_the_catalogue_says_for_the_configured_endpoints(tmp_path, capsys):
    conf = setup(tmp_path)
    code, out, err = prices(capsys, "import", "--config", str(conf), "--from", str(CATALOGUE))
    assert code == 0, err
    assert f"wrote 5 endpoint declarations to {tmp_path / 'prices.toml'}" in out
    assert ("not in the catalogue: local/qwen: provider 'local': host 127.0.0.1 is no provider "
            "in the catalogue: set catalog_id") in out
    assert ("not in the catalogue: groq/llama-3.3-70b: model 'llama-3.3-70b' is not in "
            "catalogue provider 'groq'; did you mean 'llama-3.3-70b-versatile'?") in out
    assert "to use it" not in out  # the configuration already includes prices.toml

    # What a gateway runs on once the file is included (no provider key needed to load).
    cfg = load_config(conf, env={"CI_KEY_THAT_IS_NOT_SET": "k"})
    groq, sonnet = cfg.targets["big"].endpoints
    assert (groq.price_input, groq.price_output, groq.context_window, groq.tools,
            groq.vision) == (0.59, 0.79, 131072, True, False)
    assert (sonnet.price_input, sonnet.price_output, sonnet.context_window,
            sonnet.vision) == (3.0, 15.0, 200000, True)
    zen_go, acme = cfg.targets["coder"].endpoints
    assert (zen_go.price_input, zen_go.priced) == (0.0, False)  # opencode-go, not opencode
    # catalog_id maps corp to acme; the model id matches ignoring case; no cost: no price
    assert (acme.context_window, acme.tools, acme.vision, acme.price_input) == (
        32768, False, False, None)
    assert cfg.targets["home"].endpoints[0].context_window is None


def test_the_written_file_is_stable_and_says_where_it_came_from(tmp_path, capsys):
    conf = setup(tmp_path)
    prices(capsys, "import", "--config", str(conf), "--from", str(CATALOGUE))
    first = (tmp_path / "prices.toml").read_text()
    assert first.startswith(f"# Written by `humpyard prices import` from {CATALOGUE} at ")
    assert "# catalogue: openrouter/anthropic/claude-sonnet-4\n[[endpoints]]\n" in first
    assert "#   local/qwen: provider 'local': host 127.0.0.1" in first
    prices(capsys, "import", "--config", str(conf), "--from", str(CATALOGUE))
    second = (tmp_path / "prices.toml").read_text()
    assert first.splitlines()[1:] == second.splitlines()[1:]  # only the time stamp moves


def test_import_says_how_to_include_a_file_not_yet_included(tmp_path, capsys):
    conf = setup(tmp_path, include=False)
    out_file = tmp_path / "generated" / "p.toml"
    out_file.parent.mkdir()
    code, out, _ = prices(capsys, "import", "--config", str(conf), "--from", str(CATALOGUE),
                          "--out", str(out_file))
    assert code == 0
    assert f'to use it, add include = ["generated/p.toml"] at the top of {conf}' in out
    assert "[[endpoints]]" in out_file.read_text()


def test_import_replaces_a_broken_prices_file(tmp_path, capsys):
    conf = setup(tmp_path)
    (tmp_path / "prices.toml").write_text("[[endpoints]\nthis is not toml")
    code, _, err = prices(capsys, "import", "--config", str(conf), "--from", str(CATALOGUE))
    assert code == 0, err
    assert load_config(conf, env={"CI_KEY_THAT_IS_NOT_SET": "k"}).targets["small"] \
        .endpoints[0].price_input == 0.05


def test_check_after_import_finds_nothing_to_report(tmp_path, capsys):
    conf = setup(tmp_path)
    prices(capsys, "import", "--config", str(conf), "--from", str(CATALOGUE))
    code, out, _ = prices(capsys, "check", "--config", str(conf), "--from", str(CATALOGUE))
    assert code == 0
    assert out.splitlines()[-1] == (f"0 disagreements in 5 endpoints checked against "
                                    f"{CATALOGUE}; 2 not in the catalogue")
    assert ("not checked: targets.home.endpoints[0] (local/qwen): provider 'local': host "
            "127.0.0.1 is no provider in the catalogue: set catalog_id") in out


def test_check_lists_every_contradicted_declaration_and_where_it_is(tmp_path, capsys):
    conf = setup(tmp_path, **{
        '{ provider = "groq", model = "llama-3.1-8b-instant" }':
            '{ provider = "groq", model = "llama-3.1-8b-instant", context_window = 8192, '
            'price = { input = 0.05, output = 0.1 } }'})
    (tmp_path / "prices.toml").write_text(
        '[[endpoints]]\nprovider = "openrouter"\nmodel = "anthropic/claude-sonnet-4"\n'
        "vision = false\ntools = true\n")
    code, out, _ = prices(capsys, "check", "--config", str(conf), "--from", str(CATALOGUE))
    assert code == 1
    lines = out.splitlines()
    assert ("targets.small.endpoints[0].price.output: 0.1 in humpyard.toml, 0.08 in the "
            "catalogue (groq/llama-3.1-8b-instant)") in lines
    assert ("targets.small.endpoints[0].context_window: 8192 in humpyard.toml, 131072 in the "
            "catalogue (groq/llama-3.1-8b-instant)") in lines
    assert ("targets.big.endpoints[1].vision: false in prices.toml, true in the catalogue "
            "(openrouter/anthropic/claude-sonnet-4)") in lines
    assert not any("price.input" in line for line in lines)  # 0.05 agrees
    assert not any(".tools" in line for line in lines)  # true agrees
    assert lines[-1].startswith("3 disagreements in 5 endpoints checked")


def test_a_catalog_id_the_catalogue_lacks_is_named(tmp_path, capsys):
    conf = setup(tmp_path, include=False, **{'catalog_id = "acme"': 'catalog_id = "acmee"'})
    code, out, _ = prices(capsys, "check", "--config", str(conf), "--from", str(CATALOGUE))
    assert code == 0
    assert ("not checked: targets.coder.endpoints[1] (corp/acme-large): provider 'corp': "
            "catalog_id 'acmee' is not a provider in the catalogue; did you mean 'acme'?") in out


@pytest.mark.parametrize("body,message", [
    ("not json", "is not JSON"),
    ("[1, 2]", "is not a models.dev catalogue: expected an object keyed by provider id"),
    ('{"x": {"name": "no models"}}', "is not a models.dev catalogue: no provider has 'models'"),
])
def test_a_file_that_is_not_a_catalogue_is_refused(tmp_path, capsys, body, message):
    bad = tmp_path / "cat.json"
    bad.write_text(body)
    conf = setup(tmp_path, include=False)
    code, _, err = prices(capsys, "check", "--config", str(conf), "--from", str(bad))
    assert code == 2
    assert message in err


def test_an_invalid_configuration_is_reported_not_priced(tmp_path, capsys):
    conf = setup(tmp_path, **{'[targets.small]': '[targets.small]\nqualty = 1'})
    code, _, err = prices(capsys, "check", "--config", str(conf), "--from", str(CATALOGUE))
    assert code == 2
    assert "targets.small.qualty: unknown key; did you mean 'quality'?" in err


def test_catalogue_fields_of_the_wrong_type_are_left_unknown():
    cat = read_catalog(str(CATALOGUE))
    vision = cat.providers["acme"].models["acme-vision"]
    # "tool_call": "yes", a string input price and a zero context are not guessed at.
    assert (vision.tools, vision.price_input, vision.context_window, vision.vision) == (
        None, None, None, True)
    assert "not-a-provider" not in cat.providers
    with pytest.raises(CatalogError):
        parse_catalog({"groq": {"models": "none"}})

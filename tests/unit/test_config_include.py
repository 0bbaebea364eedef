"""``include``: files whose ``[[endpoints]]`` fill in what the main file leaves unset.

Real files in a temporary directory, loaded the way ``humpyard serve`` and
``humpyard check`` load them; problems must name the included file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from humpyard.cli import main
from humpyard.config import load_config, load_config_text
from humpyard.errors import ConfigError
from humpyard.reload import Reloader

MAIN = """
include = ["{inc}"]
[providers.groq]
base_url = "https://api.groq.com/openai/v1"
[providers.local]
base_url = "http://127.0.0.1:8000/v1"
[targets.big]
endpoints = [
  {{ provider = "groq", model = "llama-3.3-70b-versatile", tools = false }},
  {{ provider = "local", model = "qwen" }},
]
[targets.also-big]
endpoints = [{{ provider = "groq", model = "llama-3.3-70b-versatile",
               price = {{ input = 1.0, output = 2.0 }} }}]
"""

PRICES = """
[[endpoints]]
provider = "groq"
model = "llama-3.3-70b-versatile"
context_window = 131072
tools = true
vision = false
price = { input = 0.59, output = 0.79 }
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / next(iter(files))


def test_an_included_file_fills_in_what_the_main_file_leaves_unset(tmp_path):
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="prices.toml"),
                            "prices.toml": PRICES})
    cfg = load_config(conf, env={})
    big, local = cfg.targets["big"].endpoints
    assert (big.context_window, big.vision, big.price_input, big.price_output) == (
        131072, False, 0.59, 0.79)
    assert big.tools is False  # the main file wins, field by field
    assert local.context_window is None and local.price_input is None  # not declared
    other = cfg.targets["also-big"].endpoints[0]
    assert (other.price_input, other.price_output, other.context_window) == (1.0, 2.0, 131072)
    assert cfg.includes == (str((tmp_path / "prices.toml").resolve()),)
    assert cfg.public_view()["targets"]["big"]["endpoints"][0]["context_window"] == 131072
    assert "include" not in cfg.public_view()


def test_paths_are_relative_to_the_including_file(tmp_path, monkeypatch):
    conf = write(tmp_path, {"etc/humpyard.toml": MAIN.format(inc="../shared/prices.toml"),
                            "shared/prices.toml": PRICES})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(os.path.relpath(conf, elsewhere), env={})
    assert cfg.targets["big"].endpoints[0].price_input == 0.59


@pytest.mark.parametrize("included,expected", [
    ('include = ["more.toml"]\n' + PRICES,
     "prices.toml: include: an included file cannot include others"),
    ('[providers.x]\nbase_url = "http://h/v1"\n' + PRICES,
     "prices.toml: providers: an included file declares only [[endpoints]]"),
    ('[[endpoint]]\nprovider = "groq"\nmodel = "m"\n',
     "prices.toml: endpoint: an included file declares only [[endpoints]]; did you mean "
     "'endpoints'?"),
    (PRICES.replace("input = 0.59", 'input = "0.59"'),
     "prices.toml: endpoints[0].price.input: Input should be a valid number, not a string"),
    (PRICES.replace("vision = false", "visoin = false"),
     "prices.toml: endpoints[0].visoin: unknown key; did you mean 'vision'?"),
    (PRICES.replace("tools = true", "tools = true true"),
     "prices.toml: line 6, column 14: TOML syntax:"),
    (PRICES + PRICES,
     "prices.toml: endpoints[1]: repeats provider 'groq', model 'llama-3.3-70b-versatile' "
     "(first declared at prices.toml: endpoints[0])"),
], ids=["nested-include", "other-table", "misspelt-table", "string-price", "unknown-key",
        "syntax", "repeat"])
def test_a_problem_in_an_included_file_names_the_file(tmp_path, included, expected):
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="prices.toml"),
                            "prices.toml": included})
    with pytest.raises(ConfigError) as info:
        load_config(conf, env={})
    assert expected in str(info.value), str(info.value)


def test_a_missing_included_file_is_an_error_naming_it(tmp_path):
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="nope.toml")})
    with pytest.raises(ConfigError) as info:
        load_config(conf, env={})
    assert "include[0]: cannot read 'nope.toml'" in str(info.value)
    assert "No such file or directory" in str(info.value)


def test_check_reports_include_and_main_file_problems_together(tmp_path, capsys):
    conf = write(tmp_path, {
        "humpyard.toml": MAIN.format(inc="prices.toml").replace('provider = "local"',
                                                                'provider = "locale"'),
        "prices.toml": PRICES.replace("vision = false", "vision = 0")})
    assert main(["check", "--config", str(conf)]) == 1
    err = capsys.readouterr().err
    assert "prices.toml: endpoints[0].vision: Input should be a valid boolean" in err
    assert ("targets.big.endpoints[1].provider: unknown provider 'locale'; did you mean "
            "'local'?") in err


def test_a_declaration_no_endpoint_uses_is_a_warning(tmp_path, capsys):
    stale = PRICES.replace("llama-3.3-70b-versatile", "llama-3.1-8b-instant")
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="prices.toml"),
                            "prices.toml": PRICES + stale})
    assert main(["check", "--config", str(conf)]) == 0
    err = capsys.readouterr().err
    assert ("warning: prices.toml: endpoints[1]: no configured endpoint has provider 'groq' "
            "and model 'llama-3.1-8b-instant'") in err


def test_a_configuration_that_is_not_a_file_cannot_include():
    with pytest.raises(ConfigError) as info:
        load_config_text(MAIN.format(inc="prices.toml"), source="s3://bucket/humpyard.toml",
                         env={})
    assert ("include: only a configuration read from a file can include others (this one "
            "came from s3://bucket/humpyard.toml)") in str(info.value)


def test_the_digest_follows_the_included_files(tmp_path):
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="prices.toml"),
                            "prices.toml": PRICES})
    before = load_config(conf, env={}).digest
    (tmp_path / "prices.toml").write_text(PRICES.replace("0.59", "0.6"))
    assert load_config(conf, env={}).digest != before


def test_reload_polling_watches_the_included_files(tmp_path):
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="prices.toml"),
                            "prices.toml": PRICES})
    state = {"cfg": load_config(conf, env={})}
    reloader = Reloader(str(conf), lambda: state["cfg"], lambda c: state.update(cfg=c), env={})
    assert reloader.poll() is None
    (tmp_path / "prices.toml").write_text(PRICES.replace("0.59", "0.625"))  # size changes
    assert reloader.poll() is None  # changed since the last look: perhaps being written
    assert reloader.poll() is True  # and held still since
    assert state["cfg"].targets["big"].endpoints[0].price_input == 0.625


def test_reload_polling_never_loads_a_file_caught_half_written(tmp_path):
    """A file written in place is emptied first, and an empty file is a valid
    configuration (no targets): a poll that caught it used to load it, and every request
    got 404 until the next poll. A change is loaded once two looks in a row agree."""
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="prices.toml"),
                            "prices.toml": PRICES})
    state = {"cfg": load_config(conf, env={})}
    reloader = Reloader(str(conf), lambda: state["cfg"], lambda c: state.update(cfg=c), env={})
    text = conf.read_text()
    conf.write_text("")  # a look between the emptying and the writing
    assert reloader.poll() is None
    conf.write_text(text + '\n[routes.r2]\ntargets = ["big"]\n')
    assert reloader.poll() is None
    assert state["cfg"].targets and "r2" not in state["cfg"].routes
    assert reloader.poll() is True
    assert "r2" in state["cfg"].routes and state["cfg"].targets
    assert reloader.poll() is None  # nothing changed since


def test_an_included_file_fills_in_fitting_and_cache_prices(tmp_path):
    limits = PRICES.replace("price = { input = 0.59, output = 0.79 }",
                            "price = { input = 3, output = 15, cache_read = 0.3 }\n"
                            "max_output_tokens = 32000\nreasoning = false")
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="limits.toml"),
                            "limits.toml": limits})
    cfg = load_config(conf, env={})
    big = cfg.targets["big"].endpoints[0]
    assert (big.max_output_tokens, big.reasoning, big.price_cache_read,
            big.price_cache_write) == (32000, False, 0.3, None)
    also = cfg.targets["also-big"].endpoints[0]  # its own price wins, limits filled in
    assert (also.price_input, also.price_cache_read, also.max_output_tokens) == (1.0, None,
                                                                                32000)


def test_the_files_read_for_one_load_are_what_another_load_sees(tmp_path):
    """``ConfigFiles``: a load records the texts of the file and of those it includes,
    and a load replaying them sees those texts whatever the disk says now (the workers
    of ``serve --workers N`` load what their parent checked)."""
    from humpyard.config.files import ConfigFiles
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="prices.toml"),
                            "prices.toml": PRICES})
    seen = ConfigFiles()
    first = load_config(conf, env={}, files=seen)
    assert set(seen.texts) == {str(conf.resolve()), str((tmp_path / "prices.toml").resolve())}
    conf.write_text("[routes.broken\n")  # edited and broken on the disk since
    (tmp_path / "prices.toml").unlink()
    again = load_config(conf, env={}, files=ConfigFiles(seen.texts))
    assert again.digest == first.digest
    assert again.targets["big"].endpoints[0].context_window == 131072
    with pytest.raises(ConfigError, match="invalid configuration"):
        load_config(conf, env={})
    # a file that was not among those read is not read now either
    with pytest.raises(ConfigError, match="cannot read configuration") as info:
        load_config(tmp_path / "other.toml", env={}, files=ConfigFiles(seen.texts))
    assert "other.toml" in str(info.value)


def test_a_worker_catches_up_with_a_reload_published_while_it_started(tmp_path):
    """``serve --workers N``: a worker loads what its parent published; a reload
    published after that load and before the worker listened for SIGHUP (which it
    ignores while starting) is seen by its first look, and loaded once."""
    from humpyard.config.files import ConfigFiles
    from humpyard.config.stores import store_named
    from humpyard.published_config import PublishedConfig, publish_config
    conf = write(tmp_path, {"humpyard.toml": MAIN.format(inc="prices.toml"),
                            "prices.toml": PRICES})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    checked = ConfigFiles()
    run_store = store_named(load_config(conf, env={}, files=checked))
    publish_config(str(run_dir), checked, 0, run_store)
    published = PublishedConfig(str(run_dir), str(conf))
    state = {"cfg": published.load()}  # the worker's start: generation 0
    conf.write_text(conf.read_text() + '\n[routes.r2]\ntargets = ["big"]\n')
    checked = ConfigFiles()
    load_config(conf, env={}, files=checked)
    publish_config(str(run_dir), checked, 1, run_store)  # the parent's reload; the SIGHUP is lost
    conf.write_text("[routes.broken\n")  # and the file, never checked, is not read
    reloader = Reloader(str(conf), lambda: state["cfg"], lambda c: state.update(cfg=c),
                        load=published.load, watch=published)
    assert "r2" not in state["cfg"].routes
    assert reloader.poll() is True
    assert "r2" in state["cfg"].routes
    assert reloader.poll() is None  # generation 1 is loaded

"""The ``humpyard`` command behaves like the tools around it (issue 29).

Every test runs the real command as a child process (``python -m humpyard.cli``)
and reads its exit status, stdout and stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("serve", "check", "explain", "simulate", "demo", "prices import", "prices check")


def scrubbed_env(**extra: str) -> dict[str, str]:
    """A fresh machine's environment: no provider or client key variables at all."""
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
    return {**keep, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}", **extra}


def humpyard(*args: str, env: dict[str, str] | None = None,
             stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "humpyard.cli", *args], cwd=str(ROOT),
                          env=env or scrubbed_env(), stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=60)


def test_version_prints_the_version_and_exits_0():
    r = humpyard("--version")
    assert r.returncode == 0, r.stderr
    from humpyard import __version__
    assert r.stdout.strip() == f"humpyard {__version__}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_has_help_text(command):
    r = humpyard(*command.split(), "--help")
    assert r.returncode == 0, r.stderr
    options = r.stdout.split("options:", 1)[1]
    # an option line: two spaces, the flag(s), then its help on the same or the next line
    entries = re.split(r"\n  (?=-)", "\n" + options)
    for entry in entries:
        if not entry.strip().startswith("-"):
            continue
        first, *rest = entry.strip().split("\n")
        flag_part, _, help_part = first.partition("  ")
        assert help_part.strip() or any(line.strip() for line in rest), \
            f"{command}: {flag_part!r} has no help text"


def test_defaults_are_shown_and_no_rst_markup_in_help():
    for command in ("", *COMMANDS):
        r = humpyard(*command.split(), "--help")
        assert "``" not in r.stdout, f"humpyard {command} --help shows RST markup"
    serve = humpyard("serve", "--help").stdout
    assert "(default: 8080)" in serve and "(default: 127.0.0.1)" in serve
    assert "(default: text)" in serve
    assert "(default: INFO)" in humpyard("--help").stdout


@pytest.mark.parametrize("args,allowed", [
    (("--log-level", "BOGUS", "check", "--config", "examples/demo.toml"),
     ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
    (("serve", "--config", "examples/demo.toml", "--log-format", "xml"), ("text", "json")),
    (("simulate", "--profile", "nope"), ("ok", "slow", "flaky", "down", "zero")),
])
def test_a_bad_choice_is_one_line_naming_the_allowed_values(args, allowed):
    r = humpyard(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for value in allowed:
        assert value in lines[0]


def test_log_level_takes_any_case():
    r = humpyard("--log-level", "debug", "check", "--config", "examples/demo.toml")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("args", [
    ("serve", "--port", "eighty"), ("--no-such-flag",), (),
    ("explain", "--config", "examples/demo.toml", "--model", "auto", "--header", "no-equals"),
])
def test_a_bad_flag_is_one_line_without_a_traceback(args):
    r = humpyard(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("args", [
    ("explain", "--config", "examples/auto-routing.toml", "--model", "auto"),
    ("--help",),
    ("check", "--config", "examples/demo.toml"),
])
def test_a_closed_pipe_ends_quietly(args):
    """``humpyard … | head``: the reader is gone before the command writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = humpyard(*args, stdout=write_end)
    finally:
        os.close(write_end)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
    assert r.returncode in (0, 1)


def test_explain_output_is_whole_when_the_pipe_stays_open():
    r = humpyard("explain", "--config", "examples/auto-routing.toml", "--model", "auto")
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip().startswith("{")


# -- check: unset key variables ------------------------------------------------------

def readme_configurations() -> list[tuple[int, str]]:
    text = (ROOT / "README.md").read_text()
    return [(i, m.group(1)) for i, m in enumerate(re.finditer(r"```toml\n(.*?)```", text, re.S))]


def configurations() -> list[tuple[str, Path | str]]:
    out: list[tuple[str, Path | str]] = [
        (p.name, p) for p in sorted((ROOT / "examples").glob("*.toml"))]
    out += [(f"README.md#{i}", text) for i, text in readme_configurations()]
    return out


@pytest.mark.parametrize("name,source", configurations(), ids=lambda v: str(v)[:24])
def test_shipped_configurations_check_clean_on_a_fresh_machine(name, source, tmp_path):
    if isinstance(source, str):
        path = tmp_path / "humpyard.toml"
        path.write_text(source)
    else:
        path = source
    r = humpyard("check", "--config", str(path))
    assert r.returncode == 0, f"{name}:\n{r.stderr}"
    assert r.stdout.startswith("ok: ")
    assert "Traceback" not in r.stderr


def test_readme_has_configurations_to_check():
    assert len(readme_configurations()) >= 2


def test_unset_key_variables_are_warnings_naming_the_variable():
    r = humpyard("check", "--config", "examples/auto-routing.toml")
    assert r.returncode == 0, r.stderr
    for var in ("HARNESS_KEY", "CI_KEY", "PUBLIC_API_KEY", "PAID_API_KEY"):
        assert any(line.startswith("warning: ") and var in line
                   for line in r.stderr.splitlines()), (var, r.stderr)


def test_strict_makes_unset_key_variables_errors():
    r = humpyard("check", "--strict", "--config", "examples/auto-routing.toml")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    for var in ("HARNESS_KEY", "CI_KEY", "PUBLIC_API_KEY", "PAID_API_KEY"):
        assert var in r.stderr


def test_strict_passes_when_the_variables_are_set():
    env = scrubbed_env(HARNESS_KEY="h-key-1", CI_KEY="c-key-1", PUBLIC_API_KEY="p",
                       PAID_API_KEY="q")
    r = humpyard("check", "--strict", "--config", "examples/auto-routing.toml", env=env)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr


def test_serve_still_refuses_an_unset_client_key_variable():
    """A gateway must not start with one of its keys missing (it would serve fewer
    keys than configured, or none: open to anyone)."""
    r = humpyard("serve", "--config", "examples/auto-routing.toml", "--port", "1")
    assert r.returncode == 1
    assert "HARNESS_KEY" in r.stderr and "Traceback" not in r.stderr


def test_readme_starts_with_make_run_and_make_test_and_names_the_venv_command():
    text = (ROOT / "README.md").read_text()
    first = re.search(r"```sh\n(.*?)```", text, re.S)
    assert first is not None
    commands = [ln.split("#")[0].strip() for ln in first.group(1).splitlines()]
    assert commands[:2] == ["make run", "make test"]
    assert ".venv/bin/humpyard" in text
    makefile = (ROOT / "Makefile").read_text()
    assert "$(VENV)/bin/humpyard demo" in makefile  # what make run starts, from .venv


# -- check and explain: the keys a file declares ------------------------------------

KEYS_TOML = """
[providers.t]
base_url = "http://127.0.0.1:9/v1"
[targets.t]
endpoints = [{ provider = "t", model = "m" }]
[targets.u]
endpoints = [{ provider = "t", model = "n" }]
[keys.a]
key_env = "HY_TEST_KEY_A"
[keys.b]
key_env = "HY_TEST_KEY_B"
allowed_routes = ["t"]
"""


@pytest.mark.parametrize("env,said", [
    ({}, "2 keys (2 without their variable: serve refuses to start)"),
    ({"HY_TEST_KEY_A": "a-secret"}, "2 keys (1 without their variable: serve refuses to start)"),
    ({"HY_TEST_KEY_A": "a-secret", "HY_TEST_KEY_B": "b-secret"}, "2 keys"),
])
def test_check_counts_the_declared_keys_and_those_without_their_variable(env, said, tmp_path):
    path = tmp_path / "humpyard.toml"
    path.write_text(KEYS_TOML)
    r = humpyard("check", "--config", str(path), env=scrubbed_env(**env))
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(f"selector rules, {said}"), r.stdout


@pytest.mark.parametrize("value", ["-5", "many"])
def test_explain_refuses_a_prompt_size_the_http_explain_refuses(value):
    r = humpyard("explain", "--config", "examples/auto-routing.toml", "--model", "auto",
                 "--prompt-tokens", value)
    assert r.returncode == 2, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "--prompt-tokens" in lines[0] and "non-negative integer" in lines[0]
    assert r.stdout == ""


def test_explain_refuses_a_key_the_file_does_not_declare_naming_those_it_does(tmp_path):
    path = tmp_path / "humpyard.toml"
    path.write_text(KEYS_TOML)
    r = humpyard("explain", "--config", str(path), "--model", "t", "--key", "nokey",
                 env=scrubbed_env(HY_TEST_KEY_A="a-secret"))
    assert r.returncode == 2, r.stdout
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "--key" in lines[0] and "'nokey'" in lines[0] and "a, b" in lines[0]
    assert "a-secret" not in r.stderr


def test_explain_applies_a_declared_keys_rules_without_its_variable(tmp_path):
    """Offline, no key value is needed: a key whose variable is unset here is still
    the key the gateway would know, with its allowed_routes."""
    import json
    path = tmp_path / "humpyard.toml"
    path.write_text(KEYS_TOML)
    r = humpyard("explain", "--config", str(path), "--model", "u", "--key", "b")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["outcome"] == "forbidden", answer
    assert answer["message"] == "key 'b' may not use route 'u'"

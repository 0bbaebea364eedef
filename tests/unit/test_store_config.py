"""``[store]``: the backend a file asks for, errors that name the field, nothing secret shown.

The DynamoDB backend's processes are tested in ``tests/lambda/test_serve_on_dynamodb.py``;
here the section itself, ``humpyard check`` on it, and the stores ``fleet`` opens
for the other backends.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from humpyard.cli import main
from humpyard.clock import FakeClock
from humpyard.config import load_config_text
from humpyard.errors import ConfigError
from humpyard.fleet import backend_of, open_configured_store
from humpyard.store import MemoryStore, SQLiteStore

TARGET = """
[providers.p]
base_url = "http://127.0.0.1:9/v1"
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
"""
TABLES = 'state_table = "hy-state"\nledger_table = "hy-ledger"\n'


def problems(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config_text(TARGET + text, source="t.toml")
    return str(caught.value)


def test_without_store_the_ledger_decides_as_before() -> None:
    assert backend_of(load_config_text(TARGET, source="t")) == "memory"
    with_ledger = load_config_text(TARGET + '[ledger]\npath = "x.db"\n', source="t")
    assert with_ledger.store is None and backend_of(with_ledger) == "sqlite"
    no_backend = load_config_text(TARGET + '[ledger]\npath = "x.db"\n[store]\n', source="t")
    assert backend_of(no_backend) == "sqlite"


def test_dynamodb_needs_both_tables_and_each_error_names_its_field() -> None:
    said = problems('[store]\nbackend = "dynamodb"\n')
    assert "store.state_table: required when backend = \"dynamodb\"" in said
    assert "store.ledger_table: required when backend = \"dynamodb\"" in said


def test_a_table_name_given_but_invalid_is_said_once_not_also_missing() -> None:
    """Before: a name given but too short was refused by its pattern, and then also
    said to be "required when backend = dynamodb", as if it were not there."""
    said = problems('[store]\nbackend = "dynamodb"\nstate_table = "s"\n'
                    'ledger_table = "hy-ledger"\n')
    assert said.count("store.state_table") == 1, said
    assert "store.state_table: String should match pattern" in said
    assert "required" not in said and "store.ledger_table" not in said


def test_dynamodb_fields_belong_to_dynamodb_only() -> None:
    said = problems('[ledger]\npath = "x.db"\n[store]\nbackend = "sqlite"\n' + TABLES)
    assert "store.state_table: only for backend = \"dynamodb\" (this one is 'sqlite')" in said


def test_an_unknown_backend_is_said_once_and_its_fields_are_not_blamed() -> None:
    """Before: after ``did you mean 'dynamodb'?`` came a line per DynamoDB field, each
    calling the backend 'sqlite' (the default the unreadable value left behind)."""
    said = problems('[ledger]\npath = "x.db"\n[store]\nbackend = "dynamo"\n' + TABLES
                    + 'region = "us-east-1"\nendpoint_url = "http://127.0.0.1:8000"\n')
    lines = said.splitlines()[1:]  # under "invalid configuration (t.toml):"
    assert len(lines) == 1 and lines[0].strip().startswith("store.backend: "), said
    assert "did you mean 'dynamodb'?" in said and "only for backend" not in said


@pytest.mark.parametrize("url", ["http://AKIAEXAMPLE:s3cr3tvalue@127.0.0.1:8000",
                                 "ftp://127.0.0.1:8000", "http://127.0.0.1:8000/?k=s3cr3tvalue"])
def test_an_endpoint_with_credentials_or_another_scheme_is_refused_unechoed(url: str) -> None:
    said = problems(f'[store]\nbackend = "dynamodb"\n{TABLES}endpoint_url = "{url}"\n')
    assert "store.endpoint_url: an http:// or https:// URL" in said
    assert "s3cr3tvalue" not in said and "AKIAEXAMPLE" not in said


def test_the_file_has_no_place_for_credentials() -> None:
    said = problems('[store]\nbackend = "dynamodb"\n' + TABLES
                    + 'aws_secret_access_key = "s3cr3tvalue"\n')
    assert "store.aws_secret_access_key: unknown key" in said
    assert "s3cr3tvalue" not in said


@pytest.mark.parametrize("field,value", [("batch_ms", 10_001), ("batch_ms", -1),
                                         ("stats_flush_secs", 3601), ("region", "US East")])
def test_limits_are_checked(field: str, value: object) -> None:
    shown = f'"{value}"' if isinstance(value, str) else value
    said = problems(f'[store]\nbackend = "dynamodb"\n{TABLES}{field} = {shown}\n')
    assert f"store.{field}" in said


def test_the_section_resolves_and_is_shown_without_anything_secret() -> None:
    cfg = load_config_text(TARGET + '[store]\nbackend = "dynamodb"\n' + TABLES
                           + 'region = "eu-west-1"\nendpoint_url = "http://127.0.0.1:8000"\n'
                           + "batch_ms = 250\n", source="t")
    assert cfg.store is not None
    assert (cfg.store.backend, cfg.store.state_table, cfg.store.ledger_table,
            cfg.store.region, cfg.store.batch_ms) == ("dynamodb", "hy-state", "hy-ledger",
                                                      "eu-west-1", 250)
    assert cfg.ledger is not None and cfg.ledger.decision_retention_days == 30  # the TTL
    assert cfg.public_view()["store"] == {
        "backend": "dynamodb", "state_table": "hy-state", "ledger_table": "hy-ledger",
        "region": "eu-west-1", "endpoint_url": "http://127.0.0.1:8000",
        "stats_flush_secs": 60.0, "batch_ms": 250.0}


def test_the_other_backends_open_their_stores(tmp_path: Path) -> None:
    clock = FakeClock()
    memory = open_configured_store(
        load_config_text(TARGET + '[store]\nbackend = "memory"\n', source="t"), clock)
    assert isinstance(memory, MemoryStore) and not memory.has_ledger
    path = tmp_path / "ledger.db"
    sqlite = open_configured_store(load_config_text(
        TARGET + f'[ledger]\npath = "{path}"\n[store]\nbackend = "sqlite"\n', source="t"), clock)
    try:
        assert isinstance(sqlite, SQLiteStore) and path.exists()
    finally:
        sqlite.close()


def test_check_accepts_a_dynamodb_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    path = tmp_path / "humpyard.toml"
    path.write_text(TARGET + '[store]\nbackend = "dynamodb"\n' + TABLES)
    assert main(["check", "--config", str(path)]) == 0
    assert capsys.readouterr().out.startswith("ok:")

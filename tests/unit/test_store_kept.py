"""A change of store takes a restart: a reload keeps the store that was opened.

``config/stores.py``'s ``keep_store`` puts the opened store (``[ledger] path``,
``[store]``) back into a reloaded configuration and says what it kept; the
``Reloader`` of one process and every worker of ``serve --workers`` (through what
its parent publishes, a restarted worker too) apply it. The two-process case
is ``tests/durability/test_worker_faults.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from humpyard.config import load_config, load_config_text
from humpyard.config.files import ConfigFiles
from humpyard.config.stores import keep_store, store_named
from humpyard.published_config import PublishedConfig, publish_config
from humpyard.reload import Reloader

TARGET = """
[providers.p]
base_url = "http://127.0.0.1:9/v1"
[targets.t]
endpoints = [{ provider = "p", model = "m" }]
"""
DYNAMO = """
[store]
backend = "dynamodb"
state_table = "{state}"
ledger_table = "hy-ledger"
region = "eu-west-1"
"""


def cfg(extra: str = ""):
    return load_config_text(TARGET + extra, source="t.toml")


def test_the_same_store_is_left_as_it_is() -> None:
    opened = cfg('[ledger]\npath = "a.db"\n')
    again = cfg('[ledger]\npath = "a.db"\ndecision_retention_days = 7\n')
    kept, said = keep_store(again, store_named(opened))
    assert said is None and kept is again  # the retention is not the store: it applies


def test_another_ledger_path_keeps_the_opened_one_and_says_so() -> None:
    opened = cfg('[ledger]\npath = "a.db"\n')
    kept, said = keep_store(cfg('[ledger]\npath = "b.db"\ndecision_retention_days = 7\n'),
                            store_named(opened))
    assert kept.ledger is not None and kept.ledger.path == "a.db"
    assert kept.ledger.decision_retention_days == 7
    assert kept.public_view()["ledger"]["path"] == "a.db"  # /v1/config says what runs
    assert said == ("a change to the store takes a restart: this process keeps the "
                    "ledger a.db, not the ledger b.db")


def test_a_ledger_removed_or_added_changes_nothing_until_a_restart() -> None:
    with_ledger = cfg('[ledger]\npath = "a.db"\n')
    kept, said = keep_store(cfg(), store_named(with_ledger))
    assert kept.ledger is not None and kept.ledger.path == "a.db"
    assert said is not None and "not no ledger" in said
    kept, said = keep_store(with_ledger, store_named(cfg()))
    assert kept.ledger is None and "ledger" not in kept.public_view()
    assert said is not None and "keeps no ledger (its state in memory)" in said


def test_other_dynamodb_tables_keep_the_opened_ones() -> None:
    opened = cfg(DYNAMO.format(state="hy-state"))
    kept, said = keep_store(cfg(DYNAMO.format(state="other-state")), store_named(opened))
    assert kept.store == opened.store
    assert kept.public_view()["store"]["state_table"] == "hy-state"
    assert said is not None and "keeps the DynamoDB tables hy-state and hy-ledger" in said


def test_a_reload_of_one_process_keeps_its_store(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "humpyard.toml"
    path.write_text(TARGET + f'[ledger]\npath = "{tmp_path / "a.db"}"\n')
    state = {"cfg": load_config(path)}
    reloader = Reloader(str(path), lambda: state["cfg"], lambda c: state.update(cfg=c))
    path.write_text(TARGET + f'[ledger]\npath = "{tmp_path / "b.db"}"\n'
                    '[routes.r2]\ntargets = ["t"]\n')
    with caplog.at_level(logging.WARNING, logger="humpyard.reload"):
        assert reloader.reload() is True
    assert "r2" in state["cfg"].routes  # the rest of the file applies
    assert state["cfg"].ledger.path == str(tmp_path / "a.db")
    assert "a change to the store takes a restart" in caplog.text


def test_a_worker_loads_the_runs_store_whatever_the_published_file_names(
        tmp_path: Path) -> None:
    """What a restarted worker loads after a reload that named another file."""
    path = tmp_path / "humpyard.toml"
    path.write_text(TARGET + '[ledger]\npath = "a.db"\n')
    run = tmp_path / "run"
    run.mkdir()
    checked = ConfigFiles()
    opened = store_named(load_config(path, files=checked))
    publish_config(str(run), checked, 0, opened)
    path.write_text(TARGET + '[ledger]\npath = "b.db"\n')
    checked = ConfigFiles()
    load_config(path, files=checked)
    publish_config(str(run), checked, 1, opened)  # the parent's reload
    loaded = PublishedConfig(str(run), str(path)).load()
    assert loaded.ledger is not None and loaded.ledger.path == "a.db"


def test_the_consoles_stack_tables_are_what_v1_config_shows() -> None:
    """``console --stack`` on a file without ``[store]``: ``/v1/config`` showed no store
    and the file's default ledger path, though the console read the stack's tables."""
    from humpyard.config.spec import StoreSpec
    from humpyard.fleet import with_store
    shown = with_store(cfg(), StoreSpec(backend="dynamodb", state_table="s-tbl",
                                        ledger_table="l-tbl")).public_view()
    assert shown["store"]["state_table"] == "s-tbl" and shown["store"]["ledger_table"] == "l-tbl"
    assert "path" not in shown["ledger"]

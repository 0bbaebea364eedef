"""What only the SQLite backend promises: the file itself, its schema and migrations."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from humpyard.clock import FakeClock
from humpyard.errors import StoreError
from humpyard.planning.types import Override
from humpyard.store import SQLiteStore, open_store
from humpyard.store.sqlite_schema import LATEST, migrate

from .test_store_contract import HOUR, T0, decision

SEED_SQL = """SELECT COUNT(*), ROUND(MIN(1.0*u.input_tokens/d.prompt_tokens),2) AS worst,
  ROUND(AVG(1.0*u.input_tokens/d.prompt_tokens),2) AS typical
  FROM decisions d JOIN usage u ON u.request_id = d.request_id AND u.kind = 'answer'
  WHERE d.prompt_tokens > 0 AND u.input_tokens > 0;"""


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "humpyard.db")


@pytest.fixture
def db(path: str, clock: FakeClock) -> Iterator[SQLiteStore]:
    store = SQLiteStore(path, clock)
    yield store
    store.close()


def raw(path: str) -> closing[sqlite3.Connection]:
    return closing(sqlite3.connect(path))


def test_the_file_is_in_wal_mode_with_normal_sync(db: SQLiteStore, path: str) -> None:
    with raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with db._read() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_a_new_file_is_at_the_latest_schema(db: SQLiteStore, path: str) -> None:
    assert db.schema_version == LATEST >= 2
    with raw(path) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, LATEST + 1))


def test_a_v1_file_migrates_forward_and_keeps_its_data(path: str, clock: FakeClock) -> None:
    d = decision("old", T0, route="legacy", latency_ms=250.0)
    with raw(path) as conn:
        conn.isolation_level = None
        assert migrate(conn, T0, target=1) == 1
        conn.execute("INSERT INTO decisions (request_id, ts, route, body) VALUES (?, ?, ?, ?)",
                     ("old", T0, "legacy", json.dumps(d)))
        conn.execute("INSERT INTO overrides (id, kind, subject, created_at, expires_at) "
                     "VALUES ('7', 'disable_target', 'deep', ?, ?)", (T0, T0 + HOUR))
        conn.execute("INSERT INTO counters VALUES ('override_id', 7)")
    with closing(SQLiteStore(path, clock)) as store:
        assert store.schema_version == LATEST
        assert store.get_decision("old") == d
        [row] = store.stats("route", T0, T0 + HOUR)  # backfilled by v2
        assert (row["key"], row["requests"]) == ("legacy", 1)
        [row] = store.stats("route", T0, T0 + HOUR, key_id="ci")  # by v5, once
        assert (row["key"], row["requests"]) == ("legacy", 1)
        assert [o.id for o in store.list_overrides(T0)] == ["7"]
        assert store.create_override(Override(id="", kind="disable_target", subject="x",
                                              created_at=T0, expires_at=T0 + 60)).id == "8"
        store.put_quota_snapshot("p", {"ok": True})  # v3 tables exist


def test_a_v3_file_gains_cache_counts_and_keeps_its_stats(path: str, clock: FakeClock) -> None:
    with raw(path) as conn:
        conn.isolation_level = None
        assert migrate(conn, T0, target=3) == 3
        conn.execute("INSERT INTO stats_buckets (dim, hour, gkey, requests, input_tokens) "
                     "VALUES ('route', ?, 'auto', 4, 4000)", (int(T0),))
    cached = {"input_tokens": 1000, "output_tokens": 5, "cache_read_tokens": 800,
              "cache_write_tokens": 100}
    with closing(SQLiteStore(path, clock)) as store:
        assert store.schema_version == LATEST >= 4
        store.append_decision(decision("new", T0 + 1, usage=cached))
        [row] = store.stats("route", T0, T0 + HOUR)
        assert (row["requests"], row["input_tokens"], row["cache_read_tokens"],
                row["cache_write_tokens"]) == (5, 5000, 800, 100)
    with raw(path) as conn:
        assert conn.execute("SELECT cache_read_tokens, cache_write_tokens FROM usage "
                            "WHERE request_id = 'new'").fetchone() == (800, 100)


def test_a_v4_file_gains_each_keys_stats_from_its_decisions(path: str,
                                                            clock: FakeClock) -> None:
    d = decision("old", T0 + 5, key_id="ops", route="auto", target="deep", provider="openai",
                 usage={"input_tokens": 700, "output_tokens": 30, "cache_read_tokens": 100})
    with raw(path) as conn:
        conn.isolation_level = None
        assert migrate(conn, T0, target=4) == 4
        conn.execute("INSERT INTO decisions (request_id, ts, route, key_id, body) "
                     "VALUES (?, ?, ?, ?, ?)", ("old", d["ts"], "auto", "ops", json.dumps(d)))
        conn.execute("INSERT INTO stats_buckets (dim, hour, gkey, requests, input_tokens) "
                     "VALUES ('route', ?, 'auto', 1, 700)", (int(T0),))
    with closing(SQLiteStore(path, clock)) as store:
        assert store.schema_version == LATEST >= 5
        [mine] = store.stats("target", T0, T0 + HOUR, key_id="ops")
        assert (mine["key"], mine["requests"], mine["input_tokens"],
                mine["cache_read_tokens"]) == ("deep", 1, 700, 100)
        assert store.stats("target", T0, T0 + HOUR, key_id="ci") == []
        [every] = store.stats("route", T0, T0 + HOUR)  # the unscoped buckets as they were
        assert (every["requests"], every["input_tokens"]) == (1, 700)


def test_reopening_a_current_file_changes_nothing(path: str, clock: FakeClock) -> None:
    with closing(SQLiteStore(path, clock)) as store:
        store.append_decision(decision("r1", T0))
        store.add_spend("ci", "day:2027-01-15", 2.0)
    with closing(SQLiteStore(path, clock)) as store:
        assert store.get_decision("r1") == decision("r1", T0)
        assert store.get_spend("ci", "day:2027-01-15") == 2.0
        assert store.stats("route", T0, T0 + HOUR)[0]["requests"] == 1


def test_a_file_from_a_newer_humpyard_is_refused(path: str, clock: FakeClock) -> None:
    with raw(path) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, "
                     "applied_at REAL NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (?, 0)", (LATEST + 1,))
        conn.commit()
    with pytest.raises(StoreError, match="newer"):
        SQLiteStore(path, clock)


def test_an_unopenable_path_is_a_store_error(tmp_path: Path, clock: FakeClock) -> None:
    with pytest.raises(StoreError, match="cannot open ledger"):
        SQLiteStore(str(tmp_path / "missing-dir" / "x.db"), clock)


def test_the_seed_capability_estimate_query_runs_verbatim(db: SQLiteStore, path: str) -> None:
    for rid, prompt, actual in (("a", 1000, 600), ("b", 2000, 1800), ("c", 500, 450)):
        db.append_decision(decision(rid, T0, prompt_tokens=prompt,
                                    usage={"input_tokens": actual, "output_tokens": 10}))
    db.append_decision(decision("no-usage", T0, usage=None))
    db.append_decision(decision("no-estimate", T0, prompt_tokens=None))
    with raw(path) as conn:
        assert conn.execute(SEED_SQL).fetchone() == (3, 0.6, 0.8)
        assert conn.execute("SELECT kind, input_tokens, output_tokens, cost_usd, ts FROM usage "
                            "WHERE request_id = 'a'").fetchone() == ("answer", 600, 10, 0.01, T0)


def test_indexed_columns_are_queryable(db: SQLiteStore, path: str) -> None:
    db.append_decision(decision("r1", T0, rule="tool-turns", outcome="failed", status=502,
                                key_id=None, latency_ms=12.5))
    with raw(path) as conn:
        row = conn.execute(
            "SELECT request_id, ts, route, rule, outcome, key_id, status, target, "
            "provider, prompt_tokens, latency_ms, cost_usd FROM decisions").fetchone()
    assert row == ("r1", T0, "auto", "tool-turns", "failed", None, 502, "cheap", "local", 1000,
                   12.5, 0.01)


@pytest.mark.parametrize("flt", ["rule", "outcome", "route", "key_id"])
def test_a_filtered_page_walks_an_index(db: SQLiteStore, flt: str) -> None:
    sql = (f"SELECT body FROM decisions WHERE {flt} = ? AND (ts, request_id) < (?, ?) "
           "ORDER BY ts DESC, request_id DESC LIMIT 51")
    with db._read() as conn:
        plan = " ".join(r[-1] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, ("x", T0, "r")))
    assert "USING INDEX" in plan and "TEMP B-TREE" not in plan


def test_open_store_picks_the_backend(path: str, clock: FakeClock) -> None:
    with closing(open_store(None, clock)) as memory:
        assert (memory.kind, memory.has_ledger) == ("memory", False)
    with closing(open_store(":memory:", clock)) as private:
        assert (private.kind, private.has_ledger) == ("sqlite", True)
    with closing(open_store(path, clock)) as on_disk:
        on_disk.append_decision(decision("r1", T0))
    assert Path(path).exists()

"""``insert_rows`` (multi-row INSERTs) stores exactly what ``executemany`` stores.

The ledger writer switched from one ``executemany`` step per row to
multi-row statements; the differential here runs both on the same rows into
twin tables and compares every value with its SQLite type.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3

import pytest

from humpyard.store.sqlite_ledger import (
    _DECISION_HEAD,
    _DECISION_ROW,
    _INSERT_DECISION,
    ROWS_PER_INSERT,
    insert_rows,
)
from humpyard.store.sqlite_schema import migrate


def ledger() -> sqlite3.Connection:
    """An in-memory database with the shipped schema."""
    conn = sqlite3.connect(":memory:")
    migrate(conn, now=0.0)
    return conn


def rows(n: int, seed: int) -> list[tuple]:
    rnd = random.Random(seed)
    values = [None, "", "x", "straße", "a'b\"c", "\u2028", 0, -1, 2**62, 1.5, 1e-300,
              math.pi, 1764611234.123456]
    out = []
    for i in range(n):
        out.append((f"r{seed}-{i}", rnd.random() * 2e9,
                    *(rnd.choice(values) for _ in range(10)),
                    json.dumps({"body": i, "s": "\u00e9"})))
    return out


def dump(conn: sqlite3.Connection, table: str) -> list[tuple]:
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    select = ", ".join(f"{c}, typeof({c})" for c in cols)
    return conn.execute(f"SELECT {select} FROM {table} ORDER BY request_id").fetchall()


@pytest.mark.parametrize("n", [0, 1, ROWS_PER_INSERT - 1, ROWS_PER_INSERT,
                               ROWS_PER_INSERT + 1, 3 * ROWS_PER_INSERT + 7, 2000])
def test_same_rows_as_executemany(n):
    many, multi = ledger(), ledger()
    params = rows(n, seed=n)
    many.executemany(_INSERT_DECISION, params)
    insert_rows(multi, _DECISION_HEAD, _DECISION_ROW, params)
    assert dump(multi, "decisions") == dump(many, "decisions")
    assert len(dump(multi, "decisions")) == n


def test_a_repeated_key_fails_like_executemany():
    params = rows(5, seed=1)
    params.append(params[2])
    for write in (lambda c: c.executemany(_INSERT_DECISION, params),
                  lambda c: insert_rows(c, _DECISION_HEAD, _DECISION_ROW, params)):
        conn = ledger()
        with pytest.raises(sqlite3.IntegrityError):
            write(conn)

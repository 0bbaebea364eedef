"""Which store a configuration names, and keeping it across a reload.

A change of store (``[ledger] path``, ``[store]``) takes a restart: a process
keeps the store it opened, and so does every worker of ``serve --workers``, a
restarted one too (its parent hands it the run's: ``published_config.py``).
``keep_store`` puts the opened store back into a reloaded configuration and says
what it kept; ``on_store`` is a configuration on another store, ``/v1/config``
showing it (also the console's ``--stack``: ``fleet.with_store``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from humpyard.config.spec import Config, LedgerSpec, StoreSpec


def store_named(config: Config) -> dict[str, Any]:
    """What of ``config`` names its store, ``[ledger] path`` and ``[store]``, as JSON: a
    ``serve --workers`` parent hands its workers the run's (``published_config.py``)."""
    return {"ledger": config.ledger.path if config.ledger is not None else None,
            "store": dataclasses.asdict(config.store) if config.store is not None else None}


def keep_store(config: Config, opened: dict[str, Any]) -> tuple[Config, str | None]:
    """``config`` on the store ``opened`` names (``store_named`` of the configuration the
    process or the run of workers started on): a change of store takes a restart, so a
    reload keeps the store that was opened (``[ledger]``'s other settings apply). With
    a line saying what was kept, or None when the file names that store."""
    path = opened["ledger"]
    store = StoreSpec(**opened["store"]) if opened["store"] is not None else None
    ledger = None if path is None else dataclasses.replace(config.ledger or LedgerSpec(),
                                                           path=path)
    if ledger == config.ledger and store == config.store:
        return config, None
    kept = on_store(config, ledger, store)
    return kept, (f"a change to the store takes a restart: this process keeps "
                  f"{_store_text(opened)}, not {_store_text(store_named(config))}")


def on_store(config: Config, ledger: LedgerSpec | None, store: StoreSpec | None) -> Config:
    """``config`` with that ``[ledger]`` and ``[store]``, ``/v1/config`` showing them (a
    ledger on DynamoDB has no path: its tables are ``[store]``'s)."""
    public = dict(config.public)
    if ledger is None:
        public.pop("ledger", None)
    else:
        shown = {**(public.get("ledger") or {}), "path": ledger.path,
                 "decision_retention_days": ledger.decision_retention_days}
        if store is not None and store.backend == "dynamodb":
            shown.pop("path")
        public["ledger"] = shown
    if store is None:
        public.pop("store", None)
    else:
        public["store"] = {k: v for k, v in dataclasses.asdict(store).items() if v is not None}
    return dataclasses.replace(config, ledger=ledger, store=store, public=public)


def _store_text(named: dict[str, Any]) -> str:
    store = named["store"]
    if store is not None and store["backend"] == "dynamodb":
        return f"the DynamoDB tables {store['state_table']} and {store['ledger_table']}"
    if named["ledger"] is None or (store is not None and store["backend"] == "memory"):
        return "no ledger (its state in memory)"
    return f"the ledger {named['ledger']}"

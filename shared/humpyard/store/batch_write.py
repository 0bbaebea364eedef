"""One ledger batch written, and an account of whatever was not: ``perform``.

Both writers (``writer.py``: the background thread and the inline writer of the
memory store) write through ``perform``. A batch the store refuses as a whole
(``ValueError``: one unusable item) is written again item by item, so only the
bad item is lost. A store that is unavailable (``StoreUnavailable``) keeps
what it could not write for the background writer to try again (``Kept``).
Every item that is not written is logged at ERROR on
``humpyard.store`` with its request id and whole payload as JSON, so it can be
replayed, and counted in ``humpyard_ledger_lost_total{kind,reason}`` (``Lost``).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from humpyard.errors import ConflictError, StoreUnavailable
from humpyard.store.base import Decision, LedgerBatch

if TYPE_CHECKING:
    from humpyard.metrics.gateway_metrics import GatewayMetrics

logger = logging.getLogger("humpyard.store")


def _json(payload: Any) -> str:
    try:
        return json.dumps(payload, default=str, separators=(",", ":"))
    except (TypeError, ValueError):  # circular or otherwise unencodable
        return repr(payload)


def _trace(exc: BaseException | None) -> BaseException | None:
    """The traceback worth logging with a loss: none for a store that was unavailable
    (``why`` says so, and a stop during an outage logs one line per item held, not a
    hundred), the whole of anything unexpected."""
    return None if isinstance(exc, StoreUnavailable) else exc


def log_unsaved_decision(decision: Any, why: object, exc: BaseException | None = None) -> None:
    """Log a decision that was not written, with everything needed to replay it."""
    rid = decision.get("request_id") if isinstance(decision, dict) else None
    logger.error("ledger decision not written request_id=%s: %s; unsaved: %s",
                 rid, why, _json(decision), exc_info=_trace(exc))


def log_unsaved_spend(key_id: str, period: str, usd: float, why: object,
                      exc: BaseException | None = None) -> None:
    """Log a spend add that was not written, with everything needed to replay it."""
    logger.error("ledger spend not written key_id=%s period=%s: %s; unsaved: %s",
                 key_id, period, why,
                 _json({"key_id": key_id, "period": period, "usd": usd}), exc_info=_trace(exc))


def write_batch(store: Any, batch: LedgerBatch) -> None:
    """``store.write_batch(batch)``, or item by item for a store without it."""
    method = getattr(store, "write_batch", None)
    if method is not None:
        method(batch)
        return
    # A backend that has not grown write_batch yet: the old calls, one by one.
    # A decision that is already recorded is skipped, as write_batch would.
    for decision in batch.decisions:
        try:
            store.append_decision(decision)
        except ConflictError:
            pass
    for (key_id, period), usd in batch.spend.items():
        store.add_spend(key_id, period, usd)


class Lost:
    """Counts and logs what was not written; safe before metrics are attached."""

    def __init__(self) -> None:
        self.metrics: GatewayMetrics | None = None

    def decisions(self, decisions: list[Decision], reason: str, why: object,
                  exc: BaseException | None = None) -> None:
        for d in decisions:
            try:
                log_unsaved_decision(d, why, exc)
            except Exception:  # logging must never kill the writer thread
                pass
        if self.metrics is not None and decisions:
            self.metrics.ledger_lost.inc(len(decisions), kind="decision", reason=reason)

    def spend(self, spend: dict[tuple[str, str], float], reason: str, why: object,
              exc: BaseException | None = None) -> None:
        for (key_id, period), usd in spend.items():
            try:
                log_unsaved_spend(key_id, period, usd, why, exc)
            except Exception:
                pass
        if self.metrics is not None and spend:
            self.metrics.ledger_lost.inc(len(spend), kind="spend", reason=reason)


class Kept(Exception):
    """Raised by ``perform(keep=True)``: the store was unavailable, and ``batch`` (all of
    the batch or the part the store says it did not write) is to be tried again."""

    def __init__(self, batch: LedgerBatch, cause: StoreUnavailable) -> None:
        super().__init__(str(cause))
        self.batch = batch
        self.cause = cause


def perform(store: Any, batch: LedgerBatch, lost: Lost, *, keep: bool = False) -> bool:
    """Write ``batch``; never raises (but see ``keep``). What cannot be written is
    logged and counted; True when nothing was lost.

    With ``keep``, a ``StoreUnavailable`` (the store could not be reached, asked to
    slow down, or could not take its write lock in time: SQLite's ``StoreBusy``)
    raises ``Kept`` with what is still to be written, for the caller to try again.
    A decision is written once however often it is tried (the store skips a request
    id it has). Spend is tried again when the store says it was not written; an add
    whose answer was lost after it was sent (a reset, a read timeout) may then be
    counted twice, which errs toward the budget holding.

    ``ValueError`` means the store refused an item and wrote nothing (see
    ``LedgerStore.write_batch``): the items are then written one at a time so
    that only the bad one is lost. Any other failure loses the whole batch
    (``StoreError`` after the store's own retries and lock waits), or only its
    ``unwritten`` part when the error says what that is (DynamoDB).
    """
    try:
        write_batch(store, batch)
        return True
    except ValueError:
        if len(batch) == 1:
            _lose(batch, lost, *_failure())
            return False
    except Exception as exc:
        unwritten = getattr(exc, "unwritten", None)
        part = unwritten if isinstance(unwritten, LedgerBatch) else batch
        if keep and isinstance(exc, StoreUnavailable):
            raise Kept(part, exc) from exc
        _lose(part, lost, *_failure())
        return False
    written = [perform(store, LedgerBatch(decisions=[d]), lost) for d in batch.decisions]
    written += [perform(store, LedgerBatch(spend={key: usd}), lost)
                for key, usd in batch.spend.items()]
    return all(written)


def _failure() -> tuple[str, BaseException | None]:
    exc = sys.exc_info()[1]
    return f"{type(exc).__name__}: {exc}", exc


def _lose(batch: LedgerBatch, lost: Lost, why: str, exc: BaseException | None) -> None:
    lost.decisions(batch.decisions, "error", why, exc)
    lost.spend(batch.spend, "error", why, exc)

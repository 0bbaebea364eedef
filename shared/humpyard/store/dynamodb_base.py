"""What every part of ``DynamoDBStore`` shares: the client, retries, typed values and keys.

Errors, as the rest of the store sees them::

    _call(op, ...)
    ├── returns the response
    ├── ConditionFailed     a ConditionalCheckFailedException (carries the item
    │                       when ReturnValuesOnConditionCheckFailure asked for it)
    ├── Cancelled           a TransactionCanceledException lost on a condition
    │                       (carries the per-item reason codes)
    ├── StoreUnavailable    no answer, a reset, a timeout, throttling or a 5xx,
    │                       after the retries (the same call may succeed later)
    └── StoreError          anything else, after retries where retrying is safe

Throttling (``ProvisionedThroughputExceededException``, ``ThrottlingException``,
``RequestLimitExceeded``), 5xx answers, transaction conflicts and connection
failures are retried ``max_attempts - 1`` times with a jittered, doubling
backoff slept through the injected clock; then ``StoreUnavailable``. A
connection reset is retried for a read (``READS``) only; for a write, and a
read timeout for any call, it is ``StoreUnavailable`` at once (a write may
have landed; a timeout would only be waited for again). A retried 5xx on an
``ADD`` may count twice (the first attempt may have landed); a decision is a
conditional put, so its retries never do.
Every transaction conflict (``TransactionConflict``) is reported to
``on_conflict`` before it is retried, for the metric.

Numbers go out as fixed-point strings and come back through ``Decimal`` into
``int`` or ``float`` chosen by the field, never by the digits: DynamoDB
normalises ``450.0`` to ``450``.
"""

from __future__ import annotations

import inspect
import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    HTTPClientError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from humpyard.clock import Clock, time_key
from humpyard.errors import StoreError, StoreUnavailable

Item = dict[str, dict[str, Any]]
"""An item in DynamoDB's typed wire form: ``{"name": {"S": "..."}}``."""

THROTTLING_CODES = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
    "InternalServerError", "ServiceUnavailable", "TransactionConflictException",
})
_RETRY_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded",
                            "TransactionConflict", "RequestLimitExceeded"})

DAY = 86_400
CLOCK_SKEW_SECS = 300.0
"""How far ahead of this instance's clock another instance may stamp a decision."""

READS = frozenset({"get_item", "batch_get_item", "query", "scan", "describe_table"})
"""Calls that change nothing, so a connection reset is retried like a refused one."""
BACKOFF_FIRST_SECS = 0.025
BACKOFF_MAX_SECS = 0.4
MAX_BATCH_GET = 100
MAX_BATCH_WRITE = 25
_TINY = Decimal("1e-100")  # DynamoDB refuses magnitudes below 1e-130


class ConditionFailed(Exception):
    """A condition expression was false; ``item`` is the stored item when it was asked for."""

    def __init__(self, item: Item | None) -> None:
        super().__init__("conditional check failed")
        self.item = item


class Cancelled(Exception):
    """A transaction lost on a condition; ``reasons`` are the codes, one per item."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__(f"transaction cancelled: {reasons}")
        self.reasons = reasons


def blocking_sleep(clock: Clock) -> Callable[[float], None]:
    """A synchronous sleep through ``clock``: the store runs in worker threads, not on a loop.

    A clock whose ``sleep`` finishes without waiting (``FakeClock``, which
    only advances) is driven to completion in place, so tests never really
    sleep. A clock that needs an event loop to wait (``SystemClock``) gets
    ``time.sleep`` instead.
    """

    def sleep(seconds: float) -> None:
        pending = clock.sleep(seconds)
        if inspect.iscoroutine(pending):
            try:
                pending.send(None)
            except StopIteration:
                return
            except RuntimeError:  # asyncio.sleep outside an event loop
                pass
            finally:
                pending.close()
        time.sleep(seconds)

    return sleep


# -- typed values ------------------------------------------------------------------


def S(value: str) -> dict[str, str]:
    """A string attribute value."""
    return {"S": value}


def N(value: int | float) -> dict[str, str]:
    """A number attribute value, in fixed point (no exponent, which not every emulator reads)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"not a number: {value!r}")
    if isinstance(value, int):
        return {"N": str(value)}
    exact = Decimal(repr(value))
    if not exact.is_finite():
        raise ValueError(f"not a finite number: {value!r}")
    if abs(exact) < _TINY:
        exact = Decimal(0)
    return {"N": format(exact, "f")}


def _decimal(item: Item, name: str) -> Decimal | None:
    value = item.get(name)
    if value is None or "N" not in value:
        return None
    try:
        return Decimal(value["N"])
    except InvalidOperation as exc:
        raise StoreError(f"attribute {name} holds no number: {value['N']!r}") from exc


def as_int(item: Item, name: str, default: int = 0) -> int:
    """A number attribute as ``int``; ``default`` when absent."""
    found = _decimal(item, name)
    return default if found is None else int(found)


def as_float(item: Item, name: str, default: float = 0.0) -> float:
    """A number attribute as ``float``; ``default`` when absent."""
    found = _decimal(item, name)
    return default if found is None else float(found)


def as_str(item: Item, name: str) -> str | None:
    """A string attribute, or None when absent."""
    value = item.get(name)
    return None if value is None else value.get("S")


# -- sortable keys ------------------------------------------------------------------


def ts_key(ts: float) -> str:
    """``ts`` as 16 hex digits whose string order is the numeric order (exact, signs too)."""
    return time_key(ts)


def int_key(n: int) -> str:
    """A non-negative int zero-padded to 12 digits, so string order is numeric order."""
    if n < 0:
        raise ValueError(f"a bucket or hour must be >= 0, not {n}")
    return f"{n:012d}"


def day_of(ts: float) -> int:
    """The UTC day number (days since the epoch) holding ``ts``."""
    return int(ts // DAY)


def day_label(day: int) -> str:
    """``YYYY-MM-DD`` of a day number (``d<n>`` outside the calendar's years)."""
    try:
        return date.fromordinal(_EPOCH_ORDINAL + day).isoformat()
    except (ValueError, OverflowError):
        return f"d{day}"


_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


class Sequencer:
    """Tie-breakers for items keyed by a time: insertion order within one instance."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._n = 0

    def key(self, ts: float) -> str:
        """``<ts>#<wall time of the write>#<counter>#<random>``: unique and time-ordered."""
        with self._lock:
            self._n += 1
            n = self._n
        return f"{ts_key(ts)}#{ts_key(self._clock.now())}#{n:010d}#{random.getrandbits(32):08x}"


# -- the client ---------------------------------------------------------------------


class DynamoDBBase:
    """Owns the client and the retry policy; subclasses talk to DynamoDB only via ``_call``.

    ``sleep`` (seconds → None) defaults to ``blocking_sleep(clock)``;
    ``stats_flush_secs`` is how long stats may wait in the instance (see
    ``dynamodb_stats``); ``on_conflict`` is called once per transaction
    conflict met.
    """

    def __init__(self, state_table: str, ledger_table: str, *, clock: Clock,
                 client: Any, retention_days: float = 30,
                 max_attempts: int = 4, sleep: Callable[[float], None] | None = None,
                 rng: random.Random | None = None, stats_flush_secs: float = 60.0,
                 on_conflict: Callable[[], None] | None = None) -> None:
        if not state_table or not ledger_table:
            raise ValueError("DynamoDBStore needs a state table and a ledger table name")
        if retention_days <= 0:
            raise ValueError("retention_days must be > 0")
        self.state_table = state_table
        self.ledger_table = ledger_table
        self.retention_secs = float(retention_days) * DAY
        self._clock = clock
        self._client = client
        self._max_attempts = max(1, max_attempts)
        self._sleep = sleep or blocking_sleep(clock)
        self._rng = rng or random.Random()
        self._seq = Sequencer(clock)
        self._closed = False
        self.stats_flush_secs = max(0.0, float(stats_flush_secs))
        self.on_conflict = on_conflict

    def close(self) -> None:
        """Refuse further calls; idempotent. The client is not closed (it may be shared)."""
        self._closed = True

    def _expiry(self, ts: float) -> dict[str, str]:
        """The TTL value of something recorded at ``ts``: the end of the retention."""
        return N(int(ts + self.retention_secs))

    def _call(self, op: str, **kwargs: Any) -> dict[str, Any]:
        """Run ``client.<op>(**kwargs)`` with the retry policy (see the module docstring)."""
        if self._closed:
            raise StoreError("store is closed")
        method = getattr(self._client, op)
        for attempt in range(1, self._max_attempts + 1):
            try:
                return dict(method(**kwargs))
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code == "ConditionalCheckFailedException":
                    raise ConditionFailed(exc.response.get("Item")) from None
                if code == "TransactionCanceledException":
                    reasons = [r.get("Code", "None")
                               for r in exc.response.get("CancellationReasons", [])]
                    if "ConditionalCheckFailed" in reasons:
                        raise Cancelled(reasons) from None
                    retry = bool(_RETRY_REASONS.intersection(reasons))
                    if "TransactionConflict" in reasons:
                        self._conflict()
                else:
                    if code == "TransactionConflictException":
                        self._conflict()
                    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                    retry = code in THROTTLING_CODES or int(status or 0) >= 500
                if not retry or attempt == self._max_attempts:
                    kind = StoreUnavailable if retry else StoreError
                    raise kind(f"dynamodb {op} failed after {attempt} attempt(s): "
                               f"{code or 'error'}: {_message(exc)}") from exc
            except BotoConnectionError as exc:
                if attempt == self._max_attempts:
                    raise StoreUnavailable(f"dynamodb {op} failed after {attempt} "
                                           f"attempt(s): {exc}") from exc
            except HTTPClientError as exc:
                # A reset (a pooled connection the server closed as it was reused) is
                # asked again for a read; a write may have landed, and a read timeout
                # would only be waited for again.
                if op not in READS or not isinstance(exc, ConnectionClosedError) \
                        or attempt == self._max_attempts:
                    raise StoreUnavailable(f"dynamodb {op} failed: {exc}") from exc
            except BotoCoreError as exc:
                raise StoreError(f"dynamodb {op} failed: {exc}") from exc
            self._sleep(self._backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _conflict(self) -> None:
        if self.on_conflict is not None:
            try:
                self.on_conflict()
            except Exception:  # noqa: BLE001 - a metric must never fail a write
                pass

    def _backoff(self, attempt: int) -> float:
        """The pause after failed attempt ``attempt``: drawn from the top half of its rung."""
        rung = min(BACKOFF_FIRST_SECS * 2 ** (attempt - 1), BACKOFF_MAX_SECS)
        return self._rng.uniform(rung / 2, rung)

    def _query(self, **kwargs: Any) -> Iterator[Item]:
        """Every item a Query matches, following ``LastEvaluatedKey``."""
        while True:
            page = self._call("query", **kwargs)
            yield from page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            kwargs = {**kwargs, "ExclusiveStartKey": last}

    def _reclaim_expired(self, key: Item, item: Item, *, prefix: str, mine: str,
                         total: str, amount: str, now: float) -> bool:
        """Remove from the state table's ``item`` (at ``key``) the per-instance entries
        named ``prefix…`` other than ``mine`` whose expiry ``e`` is past ``now``, taking
        each one's ``amount`` off ``total``: one conditional write each, so an entry
        renewed or reclaimed meanwhile is left alone. Whether any was expired."""
        any_gone = False
        for name in [n for n in item if n.startswith(prefix) and n != mine]:
            entry = item[name].get("M") if isinstance(item[name], dict) else None
            if not isinstance(entry, dict) or as_float(entry, "e") > now:
                continue
            try:
                self._call("update_item", TableName=self.state_table, Key=key,
                           UpdateExpression="SET #t = #t - :n REMOVE #x",
                           ConditionExpression="#x.e = :e",
                           ExpressionAttributeNames={"#t": total, "#x": name},
                           ExpressionAttributeValues={":n": entry[amount], ":e": entry["e"]})
            except ConditionFailed:
                pass  # renewed or reclaimed meanwhile
            any_gone = True
        return any_gone

    def _batch_get(self, table: str, keys: list[Item], *,
                   consistent: bool = True) -> list[Item]:
        """The items stored under ``keys`` (missing ones left out), in no particular order."""
        found: list[Item] = []
        for start in range(0, len(keys), MAX_BATCH_GET):
            request: dict[str, Any] = {table: {"Keys": keys[start:start + MAX_BATCH_GET],
                                               "ConsistentRead": consistent}}
            for attempt in range(1, self._max_attempts + 2):
                answer = self._call("batch_get_item", RequestItems=request)
                found.extend(answer.get("Responses", {}).get(table, []))
                request = answer.get("UnprocessedKeys") or {}
                if not request:
                    break
                if attempt > self._max_attempts:
                    raise StoreError(f"dynamodb batch_get_item left keys unread in {table}")
                self._sleep(self._backoff(attempt))
        return found

    def _delete_keys(self, table: str, keys: list[Item]) -> None:
        """Delete every item in ``keys`` (batched, unprocessed ones retried)."""
        for start in range(0, len(keys), MAX_BATCH_WRITE):
            pending: dict[str, Any] = {table: [{"DeleteRequest": {"Key": k}}
                                               for k in keys[start:start + MAX_BATCH_WRITE]]}
            for attempt in range(1, self._max_attempts + 2):
                answer = self._call("batch_write_item", RequestItems=pending)
                pending = answer.get("UnprocessedItems") or {}
                if not pending:
                    break
                if attempt > self._max_attempts:
                    raise StoreError(f"dynamodb batch_write_item left deletes undone in {table}")
                self._sleep(self._backoff(attempt))


def key_of(item: Item) -> Item:
    """The primary key (``pk``, ``sk``) of an item."""
    return {"pk": item["pk"], "sk": item["sk"]}


def _message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", "")) or str(exc)

"""Budget periods: which spend bucket a moment belongs to.

Periods are UTC calendar days and months, labelled ``day:YYYY-MM-DD`` and
``month:YYYY-MM``. The label is what ``LedgerStore.add_spend`` keys spend
by, so a new period starts from zero without anything being reset.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

PERIODS = ("day", "month")


def period_key(period: str, now: float) -> str:
    """The label of the ``period`` (``day`` or ``month``) holding epoch time ``now``, in UTC.

    Raises ``ValueError`` for any other period name.
    """
    moment = datetime.fromtimestamp(now, tz=UTC)
    if period == "day":
        return f"day:{moment:%Y-%m-%d}"
    if period == "month":
        return f"month:{moment:%Y-%m}"
    raise ValueError(f"budget period must be one of {', '.join(PERIODS)}, not {period!r}")


def seconds_left(period: str, now: float) -> float:
    """Seconds from ``now`` until the ``period`` holding it ends (UTC)."""
    moment = datetime.fromtimestamp(now, tz=UTC)
    start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        end = start + timedelta(days=1)
    elif period == "month":
        start = start.replace(day=1)
        end = start.replace(year=start.year + (start.month == 12),
                            month=start.month % 12 + 1)
    else:
        raise ValueError(f"budget period must be one of {', '.join(PERIODS)}, not {period!r}")
    return (end - moment).total_seconds()

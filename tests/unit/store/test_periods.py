"""Budget period labels (``humpyard.ledger.periods``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from humpyard.ledger import period_key


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("period", "moment", "label"), [
    ("day", "2026-11-30T00:00:00", "day:2026-11-30"),
    ("day", "2026-11-30T23:59:59", "day:2026-11-30"),
    ("day", "2026-12-01T00:00:00", "day:2026-12-01"),
    ("month", "2026-11-30T23:59:59", "month:2026-11"),
    ("month", "2026-12-01T00:00:00", "month:2026-12"),
    ("month", "2027-01-01T00:00:00", "month:2027-01"),
])
def test_periods_are_utc_days_and_months(period: str, moment: str, label: str) -> None:
    assert period_key(period, at(moment)) == label


def test_an_unknown_period_is_refused() -> None:
    with pytest.raises(ValueError, match="day, month"):
        period_key("week", 0.0)

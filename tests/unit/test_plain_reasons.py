"""No Python repr reaches a person: a recorded reason and a refusal name a duration as the
command line does (``1h``, ``30m``), never as ``timedelta``'s ``1:00:00``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reminders import schedules
from reminders.consumer import content_check
from reminders.errors import InvalidInput

NOW = datetime(2027, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _row(**changes: Any) -> dict[str, Any]:
    row = {"schedule_state": "active", "generation": 0, "schedule_generation": 0,
           "revision": "1", "schedule_revision": "1", "opted_out": False,
           "stale_after": timedelta(hours=1),
           "occurrence_at": datetime(2027, 3, 1, 9, 0, tzinfo=UTC),
           "stale_from": datetime(2027, 3, 1, 9, 0, tzinfo=UTC), "recurring": False,
           "origin": "series"}
    return {**row, **changes}


def test_a_stale_reason_names_the_window_as_1h() -> None:
    decision = content_check(_row(), NOW)
    assert decision.state == "stale"
    assert decision.reason == "missed its window: due 2027-03-01T09:00:00Z, stale after 1h"


@pytest.mark.parametrize(("changes", "said"), [
    ({"retention": timedelta(minutes=30)}, "retention must be at least an hour, got 30m"),
    ({"stale_after": timedelta(seconds=-90)}, "stale after must be positive, got -1m30s"),
    ({"backoff_base": timedelta(hours=2), "backoff_cap": timedelta(hours=1)},
     "backoff base 2h is above the cap 1h"),
])
def test_a_kind_s_refusal_names_durations_as_the_command_line_does(
        changes: dict[str, Any], said: str) -> None:
    with pytest.raises(InvalidInput) as err:
        schedules.set_kind(None, name="trip", now=NOW, **changes)  # type: ignore[arg-type]
    assert str(err.value) == said

"""The expansion's bound: a rule dateutil would search to year 9999 for stops after
MAX_PERIODS_WITHOUT_OCCURRENCE periods without a slot, or at the caller's deadline, counted
inside dateutil's own search; rules with real, if sparse, occurrences are unaffected."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import dateutil.rrule
import pytest

from reminders import recurrence
from reminders.errors import InvalidInput
from reminders.recurrence import (
    MAX_PERIODS_WITHOUT_OCCURRENCE,
    ExpansionBound,
    ExpansionDeadline,
    Recurrence,
    expansion_deadline,
)

AFTER = datetime(2027, 3, 1, tzinfo=UTC)
WEDNESDAY = datetime(2027, 3, 3, 9, 0)


def _never(freq: str = "FREQ=DAILY;INTERVAL=7;BYDAY=TU") -> Recurrence:
    return Recurrence(rrule=freq, tz="Europe/Berlin", local_start=WEDNESDAY)


def test_the_hook_is_where_dateutil_builds_its_search_state() -> None:
    """A dateutil release that moved it would leave every expansion unbounded."""
    assert dateutil.rrule._iterinfo is recurrence._GuardedIterinfo


def test_a_rule_that_never_yields_stops_at_the_bound_with_its_reason() -> None:
    counted: list[int] = []
    period = recurrence._Guard.period

    def spy(guard: recurrence._Guard) -> None:
        counted.append(guard.seen)
        period(guard)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(recurrence._Guard, "period", spy)
        with pytest.raises(ExpansionBound) as err:
            _never().next_after(AFTER)
    assert len(counted) == MAX_PERIODS_WITHOUT_OCCURRENCE + 1
    assert str(err.value) == ("rrule: no occurrence in 5000 days in a row (the expansion's "
                              "bound): the rule has none the service can find")
    assert isinstance(err.value, InvalidInput)  # the Python API refuses it as bad input


def test_the_python_api_refuses_such_a_rule_at_entry() -> None:
    with pytest.raises(InvalidInput, match="produces no occurrence"):
        Recurrence.parse("FREQ=DAILY;INTERVAL=7;BYDAY=TU", "Europe/Berlin", WEDNESDAY)


def test_a_deadline_stops_the_search_inside_dateutil() -> None:
    with expansion_deadline(time.monotonic() - 1), pytest.raises(ExpansionDeadline):
        _never().next_after(AFTER)
    assert _never("FREQ=WEEKLY").next_after(AFTER) is not None  # outside it: as before


def test_sparse_rules_with_occurrences_are_found_across_their_longest_gaps() -> None:
    leap = Recurrence(rrule="FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29", tz="UTC",
                      local_start=datetime(2096, 1, 1, 9, 0))
    found = leap.next_after(datetime(2096, 3, 1, tzinfo=UTC))  # 2100 is no leap year
    assert found is not None and found.utc == datetime(2104, 2, 29, 9, 0, tzinfo=UTC)
    monday = Recurrence(rrule="FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO", tz="UTC",
                        local_start=datetime(2027, 1, 1, 9, 0))
    found = monday.next_after(AFTER)
    assert found is not None and found.utc == datetime(2044, 2, 29, 9, 0, tzinfo=UTC)


def test_other_users_of_dateutil_are_not_counted() -> None:
    plain = dateutil.rrule.rrule(dateutil.rrule.DAILY, dtstart=datetime(2027, 1, 1),
                                 count=MAX_PERIODS_WITHOUT_OCCURRENCE * 2)
    assert len(list(plain)) == MAX_PERIODS_WITHOUT_OCCURRENCE * 2

"""The alarm board on fixed instants: the minutes it jumps are the minutes that change nothing,
its states survive a save and a load, and its summary names what fired and when it cleared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reminders.clock import FixedClock
from reminders.local.twin import board as boards
from reminders.local.twin import watch as watches
from reminders.local.twin.alarms import ALARM, OK
from reminders.local.twin.metrics import MetricStore, StoreMetrics, record_invocation
from tests.twin_templates import template_copy

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@pytest.fixture(scope="module")
def template() -> Any:
    return template_copy("self-publishing")


def fed(store: MetricStore) -> None:
    """A scanner that runs for five minutes, reports a growing lateness, then stops; a dead
    delivery at 09:02; and, three days on, one more run."""
    clock = FixedClock(T0)
    metrics = StoreMetrics(store, clock)
    for minute in range(5):
        clock.set(T0 + minute * MINUTE)
        record_invocation(store, "scanner", clock.now(), duration_ms=40, error=False)
        metrics.put("OldestOverdueSeconds", 200 + 60 * minute, "Seconds")
    clock.set(T0 + 2 * MINUTE)
    metrics.put("Dead", 1)
    clock.set(T0 + timedelta(days=3))
    record_invocation(store, "scanner", clock.now(), duration_ms=40, error=False)


def test_jumping_quiet_minutes_changes_nothing(template: Any) -> None:
    names = boards.local_names(template, "x")
    store = MetricStore()
    fed(store)
    jumping = boards.board_for(template, store, names)
    jumping.advance(T0)
    jumping.advance(T0 + timedelta(days=3, minutes=10))
    stepping = boards.board_for(template, store, names)
    at = T0
    while at <= T0 + timedelta(days=3, minutes=10):
        stepping.lookback = timedelta(days=30)  # never quiet: every minute evaluated
        stepping.advance(at)
        at += MINUTE
    assert jumping.transitions() == stepping.transitions()
    assert jumping.evaluator.state == stepping.evaluator.state
    fired = [(boards.short_name(t.alarm), t.at - T0) for t in jumping.fired()]
    assert ("DeliveriesDead", 5 * MINUTE) in fired
    assert ("OldestOverdueDelivery", 5 * MINUTE) in fired  # 300, 360, 420 s at 09:02-09:04
    assert ("ScannerSilent", 10 * MINUTE) in fired          # silent from 09:05 to 09:09
    # It ran again three days on (OK), and was silent again five minutes later.
    assert [(t.new, t.at - T0) for t in jumping.transitions(T0 + timedelta(days=1))
            if boards.short_name(t.alarm) == "ScannerSilent"] == [
        (OK, timedelta(days=3, minutes=1)), (ALARM, timedelta(days=3, minutes=6))]


def test_a_saved_board_goes_on_where_it_stopped(template: Any, tmp_path: Path) -> None:
    names = boards.local_names(template, "x")
    path = tmp_path / "alarms.json"

    def watch(store: MetricStore) -> watches.AlarmWatch:
        return watches.AlarmWatch(template, FixedClock(T0), endpoint_url="", sqs=None,
                                  queues={}, names=names, store=store)

    first = watch(MetricStore())
    fed(first.store)
    first.board.advance(T0)
    first.board.advance(T0 + 6 * MINUTE)
    assert first.board.state_of("DeliveriesDead") == ALARM
    watches.save(first, path)
    again = watch(MetricStore())
    watches.load(again, path)
    assert again.board.evaluated == T0 + 6 * MINUTE
    assert again.board.transitions() == first.board.transitions()
    again.board.advance(T0 + 11 * MINUTE)
    first.board.advance(T0 + 11 * MINUTE)
    assert again.board.transitions() == first.board.transitions()
    assert again.board.state_of("DeliveriesDead") == OK
    state = watches.read_state(path)
    assert state is not None and [a["name"] for a in state["in_alarm"]] == ["DeliveriesDead"]
    assert boards.alarm_summary(first.board)[:2] == [
        "OldestOverdueDelivery fired at 2027-03-01T09:05:00Z, OK again at "
        "2027-03-01T09:06:00Z",
        "DeliveriesDead fired at 2027-03-01T09:05:00Z, OK again at 2027-03-01T09:10:00Z"]
    assert boards.alarm_summary(boards.board_for(template, MetricStore(), names)) == [
        "no alarm fired"]

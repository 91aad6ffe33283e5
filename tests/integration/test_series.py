"""Recurring series, fan-out and tenants through the whole local pipeline, on fixed instants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from reminders import db, operator, schedules
from reminders.errors import InvalidInput
from reminders.recurrence import Recurrence
from tests.conftest import Harness, make_runtime
from tests.integration.pipeline_helpers import (
    at_most_one_effect_per_key,
    effects,
    register,
    tick,
    work,
)

WEEKLY_MONDAY_9 = "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0"


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def kind(h: Harness, name: str, stale_after: timedelta | None) -> None:
    schedules.set_kind(h.conn, name=name, now=h.clock.now(), stale_after=stale_after)


def recurring(h: Harness, key: str, rule: str, tz: str, start: str, *,
              kind_name: str = "default", recipients: list[str] | None = None,
              url: str | None = None) -> schedules.ScheduleResult:
    url = url or register(h, h.receiver.hook_url(key))
    return schedules.schedule(h.conn, tenant="acme", recipients=recipients or ["alice"],
                              channel="webhook", to=url, now=h.clock.now(), key=key,
                              kind=kind_name, recurrence=Recurrence.parse(rule, tz, start))


def series(h: Harness, key: str) -> list[tuple[datetime, str, str | None]]:
    rows = db.fetch_all(h.conn, "deliveries_of_schedule", {"key": key, "tenant": "acme"})
    return [(r["occurrence_at"], r["state"], r["reason"]) for r in rows]


def pending(h: Harness, key: str) -> list[datetime]:
    return [occ for occ, state, _ in series(h, key) if state in ("scheduled", "retrying",
                                                                  "leased")]


def run_at(h: Harness, instant: datetime) -> None:
    h.clock.set(instant)
    tick(h)
    work(h)


def test_weekly_digest_keeps_nine_local_across_the_spring_change(harness: Harness) -> None:
    h = harness
    recurring(h, "digest", WEEKLY_MONDAY_9, "Europe/Berlin", "2027-03-22T09:00")
    assert pending(h, "digest") == [utc(2027, 3, 22, 8)]  # 09:00 CET
    run_at(h, utc(2027, 3, 22, 8))
    assert pending(h, "digest") == [utc(2027, 3, 29, 7)]  # 09:00 CEST: the clocks moved
    run_at(h, utc(2027, 3, 29, 7))
    assert [s for _, s, _ in series(h, "digest")] == ["sent", "sent", "scheduled"]
    assert pending(h, "digest") == [utc(2027, 4, 5, 7)]
    assert len(effects(h)) == 2
    at_most_one_effect_per_key(h)


def test_late_digest_is_sent_inside_its_window_and_parked_after_it(harness: Harness) -> None:
    h = harness
    kind(h, "digest", timedelta(hours=3))
    recurring(h, "late", WEEKLY_MONDAY_9, "Europe/Berlin", "2027-03-22T09:00",
              kind_name="digest")
    recurring(h, "later", WEEKLY_MONDAY_9, "Europe/Berlin", "2027-03-22T09:00",
              kind_name="digest", recipients=["bob"])
    schedules.set_tenant_paused(h.conn, tenant="acme", paused=True)
    run_at(h, utc(2027, 3, 22, 10))  # 11:00 local, but the tenant is paused
    assert effects(h) == {}
    schedules.set_tenant_paused(h.conn, tenant="acme", paused=False)
    h.conn.execute("update deliveries set state = 'suppressed', reason = 'test: hold back' "
                   "where recipient = 'bob'")
    run_at(h, utc(2027, 3, 22, 10))  # 11:00 local: two hours late, inside the window
    assert [s for _, s, _ in series(h, "late")][:1] == ["sent"]
    # The other recipient's digest is first looked at 13:00 local: past the window.
    h.conn.execute("update deliveries set state = 'scheduled', reason = null "
                   "where recipient = 'bob' and reason = 'test: hold back'")
    run_at(h, utc(2027, 3, 22, 12))
    (first, *_rest) = series(h, "later")
    assert first[1] == "stale" and "missed its window" in (first[2] or "")
    assert pending(h, "later") == [utc(2027, 3, 29, 7)]


def test_three_days_down_sends_only_the_newest_daily_reminder(harness: Harness) -> None:
    h = harness
    recurring(h, "daily", "FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "Europe/London",
              "2027-06-07T09:00")  # Monday; BST, so 08:00Z
    assert pending(h, "daily") == [utc(2027, 6, 7, 8)]
    # Nothing ran from Monday morning until Thursday 10:00 local.
    run_at(h, utc(2027, 6, 10, 9))
    run_at(h, utc(2027, 6, 10, 9, 1))
    states = [(occ.day, state) for occ, state, _ in series(h, "daily")]
    assert states == [(7, "stale"), (8, "stale"), (9, "stale"), (10, "sent"), (11, "scheduled")]
    reasons = [r for _, s, r in series(h, "daily") if s == "stale"]
    assert reasons[0] is not None and reasons[0].startswith("skipped: a newer occurrence")
    assert all(r is not None and r.startswith("skipped") for r in reasons)
    assert len(effects(h)) == 1


def test_three_days_down_across_a_weekly_series_with_a_window(harness: Harness) -> None:
    h = harness
    kind(h, "digest", timedelta(hours=3))
    recurring(h, "weekly", WEEKLY_MONDAY_9, "Europe/Berlin", "2027-06-07T09:00",
              kind_name="digest")
    run_at(h, utc(2027, 6, 9, 12))  # down from Sunday to Wednesday
    assert [s for _, s, _ in series(h, "weekly")] == ["stale", "scheduled"]
    assert pending(h, "weekly") == [utc(2027, 6, 14, 7)]
    assert effects(h) == {}


def test_zone_change_while_a_message_is_in_flight(harness: Harness) -> None:
    h = harness
    recurring(h, "moving", WEEKLY_MONDAY_9, "Europe/Berlin", "2027-03-22T09:00")
    h.clock.set(utc(2027, 3, 22, 8))
    assert tick(h)["published"] == 1  # Berlin's 09:00 is on the queue
    schedules.reschedule(h.conn, tenant="acme", key="moving", now=h.clock.now(),
                         recurrence=Recurrence.parse(WEEKLY_MONDAY_9, "America/New_York",
                                                     "2027-03-22T09:00"))
    work(h)  # the old message is dropped by the re-check
    assert effects(h) == {}
    assert pending(h, "moving") == [utc(2027, 3, 22, 13)]  # 09:00 EDT
    run_at(h, utc(2027, 3, 22, 13))
    assert len(effects(h)) == 1
    assert pending(h, "moving") == [utc(2027, 3, 29, 13)]


def test_count_ends_the_series(harness: Harness) -> None:
    h = harness
    recurring(h, "twice", "FREQ=DAILY;COUNT=2;BYHOUR=9;BYMINUTE=0", "Asia/Kolkata",
              "2027-03-02T09:00")
    run_at(h, utc(2027, 3, 2, 3, 30))
    run_at(h, utc(2027, 3, 3, 3, 30))
    assert [s for _, s, _ in series(h, "twice")] == ["sent", "sent"]
    row = db.fetch_one(h.conn, "schedule_get", {"tenant": "acme", "schedule_key": "twice"})
    assert row is not None and row["state"] == "ended"


def test_fan_out_of_2000_with_3_opted_out(harness: Harness, database_url: str) -> None:
    h = harness
    h.rt.close()
    h.rt = make_runtime(database_url, _urls(h), h.endpoint, h.clock, scan_batch=100,
                        inflight_budget=100)
    url = register(h, h.receiver.hook_url("shipment"))
    people = [f"subscriber-{i:04d}" for i in range(2000)]
    result = schedules.schedule(h.conn, tenant="acme", recipients=people, channel="webhook",
                                to=url, at=h.clock.now(), now=h.clock.now(), key="ship-9")
    assert len({d.delivery_key for d in result.deliveries}) == 2000
    for person in ("subscriber-0007", "subscriber-0500", "subscriber-1999"):
        schedules.opt_out(h.conn, tenant="acme", recipient=person, channel="webhook",
                          now=h.clock.now())
    published = []
    for _ in range(21):  # the in-flight budget meters the fan-out onto the queue
        published.append(tick(h)["published"])
        work(h, max_seconds=120)
    assert published == [100] * 20 + [0]
    counts = {r["state"]: r["n"] for r in h.conn.execute(
        "select state, count(*) as n from deliveries group by state").fetchall()}
    assert counts == {"sent": 1997, "suppressed": 3}
    suppressed = {r["recipient"] for r in h.conn.execute(
        "select recipient from deliveries where state = 'suppressed'").fetchall()}
    assert suppressed == {"subscriber-0007", "subscriber-0500", "subscriber-1999"}
    assert len(effects(h)) == 1997
    at_most_one_effect_per_key(h)


class CountingCursor(psycopg.Cursor[Any]):
    executed = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        CountingCursor.executed += 1
        return super().execute(*args, **kwargs)


def _round_trips(h: Harness, n: int, key: str, url: str) -> int:
    h.conn.cursor_factory = CountingCursor
    CountingCursor.executed = 0
    schedules.schedule(h.conn, tenant="acme", recipients=[f"r{i}" for i in range(n)],
                       channel="webhook", to=url, at=h.clock.now(), now=h.clock.now(), key=key)
    h.conn.cursor_factory = psycopg.Cursor
    return CountingCursor.executed


def test_scheduling_10000_recipients_costs_constant_round_trips(harness: Harness) -> None:
    h = harness
    url = register(h, h.receiver.hook_url("many"))
    small = _round_trips(h, 10, "few", url)
    large = _round_trips(h, 10_000, "many", url)
    assert small == large
    assert large <= 8
    n = h.conn.execute("select count(*) as n from deliveries").fetchone()
    assert n == {"n": 10_010}


def test_paused_tenant_waits_and_loses_nothing(harness: Harness) -> None:
    h = harness
    url = register(h, h.receiver.hook_url("tenants"))
    for tenant in ("acme", "globex"):
        schedules.schedule(h.conn, tenant=tenant, recipients=["a", "b"], channel="webhook",
                           to=url, at=h.clock.now(), now=h.clock.now(), key=f"{tenant}-1")
    schedules.set_tenant_paused(h.conn, tenant="globex", paused=True)
    for _ in range(3):
        tick(h)
        work(h)
        h.clock.advance(timedelta(minutes=10))
    by_tenant = {(r["tenant"], r["state"]) for r in h.conn.execute(
        "select tenant, state from deliveries").fetchall()}
    assert by_tenant == {("acme", "sent"), ("globex", "scheduled")}
    schedules.set_tenant_paused(h.conn, tenant="globex", paused=False)
    tick(h)
    work(h)
    assert {r["state"] for r in h.conn.execute("select state from deliveries").fetchall()} == {
        "sent"}
    assert len(effects(h)) == 4


def _urls(h: Harness) -> Any:
    from reminders.config import QueueUrls

    return QueueUrls(h.rt.deliveries.url, h.rt.dlq.url, h.rt.parking.url)


def test_retrying_an_old_occurrence_beside_a_pending_one_is_refused(harness: Harness) -> None:
    h = harness
    url = register(h, h.receiver.hook_url("gone-daily", codes=[410]))
    recurring(h, "gone", "FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "UTC", "2027-03-02T09:00", url=url)
    run_at(h, utc(2027, 3, 2, 9))
    (failed, _next) = series(h, "gone")
    assert failed[1] == "failed" and pending(h, "gone") == [utc(2027, 3, 3, 9)]
    key = db.fetch_all(h.conn, "deliveries_of_schedule", {"key": "gone",
                                                           "tenant": "acme"})[0]["delivery_key"]
    with pytest.raises(InvalidInput, match="already has a pending delivery"):
        operator.reconcile(h.conn, key=key, tenant="acme", target="retry",
                           reason="endpoint fixed", now=h.clock.now())
    assert pending(h, "gone") == [utc(2027, 3, 3, 9)]


def test_a_new_rule_restarts_an_ended_series(harness: Harness) -> None:
    h = harness
    recurring(h, "short", "FREQ=DAILY;COUNT=1;BYHOUR=9;BYMINUTE=0", "UTC", "2027-03-02T09:00")
    run_at(h, utc(2027, 3, 2, 9))
    row = db.fetch_one(h.conn, "schedule_get", {"tenant": "acme", "schedule_key": "short"})
    assert row is not None and row["state"] == "ended" and pending(h, "short") == []
    schedules.reschedule(h.conn, tenant="acme", key="short", now=h.clock.now(),
                         recurrence=Recurrence.parse("FREQ=WEEKLY;BYHOUR=9;BYMINUTE=0", "UTC",
                                                     "2027-03-02T09:00"))
    row = db.fetch_one(h.conn, "schedule_get", {"tenant": "acme", "schedule_key": "short"})
    assert row is not None and row["state"] == "active"
    assert pending(h, "short") == [utc(2027, 3, 9, 9)]

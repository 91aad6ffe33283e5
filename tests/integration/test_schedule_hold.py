"""Holding one schedule (migration 0023): pause and resume, trigger now, backfill a missed
window, each forced in its unlucky order against the scanner and a consumer, on the real
Postgres, moto's SQS and a real receiver."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reminders import consumer, db, schedule_commands, schedules
from reminders.invariants import violations
from reminders.recurrence import Recurrence
from tests.conftest import Harness
from tests.integration.pipeline_helpers import (
    attempts,
    delivery,
    effects,
    event_for,
    register,
    run_minutes,
    schedule_webhook,
    take_messages,
    tick,
    work,
)

DAILY_9 = "FREQ=DAILY;BYHOUR=9;BYMINUTE=0"


def pause(h: Harness, key: str, paused: bool = True) -> bool:
    row = db.fetch_one(h.conn, "api_pause", {"tenant": "acme", "key": key, "paused": paused,
                                             "now": h.clock.now()})
    assert row is not None
    return bool(row["changed"])


def daily(h: Harness, key: str, start: str, kind: str = "default") -> None:
    url = register(h, h.receiver.hook_url(key))
    schedules.schedule(h.conn, tenant="acme", recipients=["alice"], channel="webhook", to=url,
                       now=h.clock.now(), key=key, kind=kind,
                       recurrence=Recurrence.parse(DAILY_9, "UTC", start))


def of_schedule(h: Harness, key: str) -> list[dict[str, Any]]:
    return h.conn.execute(
        "select d.delivery_key, d.origin, d.occurrence_at, d.state from deliveries d"
        " join schedules s on s.id = d.schedule_id where s.schedule_key = %s"
        " order by d.occurrence_at, d.id", (key,)).fetchall()


def backfill(h: Harness, start: str, end: str, *, dry_run: bool = False) -> Any:
    return schedule_commands.backfill(h.conn, now=h.clock.now(), key="late", tenant=None,
                                      start=start, end=end, limit=100,
                                      who=None if dry_run else "ops", via="cli",
                                      reason="INC-7", dry_run=dry_run)


def test_a_schedule_pause_committed_after_the_recheck_starts_no_attempt(
        harness: Harness) -> None:
    """As a tenant's pause: a schedule paused between the consumer's re-check and the
    statement that starts the attempt sends nothing; its delivery waits, its lease handed back
    unused, and its due entry is held (never walked by a tick) until resumed."""
    h = harness
    (key,) = schedule_webhook(h, "held-late")
    tick(h)
    messages = take_messages(h)
    paused: list[bool] = []

    def pause_now(name: str) -> None:
        if name == "attempts_start" and not paused:
            paused.append(pause(h, "held-late"))

    db.before_statement = pause_now
    try:
        answer = consumer.process_batch(event_for(h, messages), h.rt)
    finally:
        db.before_statement = None
    assert paused == [True]
    assert answer == {"batchItemFailures": []}
    assert effects(h) == {} and attempts(h, key) == []
    row = delivery(h, key)
    assert (row["state"], row["reason"], row["lease_token"]) == (
        "scheduled", "schedule paused; waits until resumed", None)
    counted = h.conn.execute("select leases, empty_receives from deliveries where id = %s",
                             (row["id"],)).fetchone()
    assert counted == {"leases": 0, "empty_receives": 0}
    assert h.conn.execute("select held from due_queue where id = %s", (row["id"],)
                          ).fetchone() == {"held": True}
    run_minutes(h, 2)  # held: not leased, not sent
    assert delivery(h, key)["state"] == "scheduled" and effects(h) == {}
    assert pause(h, "held-late", False)
    run_minutes(h, 1)
    assert delivery(h, key)["state"] == "sent" and effects(h) == {key: 1}
    assert violations(h.conn, now=h.clock.now()) == []


def test_a_paused_schedule_waits_apart_and_nothing_pages(harness: Harness) -> None:
    """A paused schedule's due deliveries are never leased, and the lateness figures count
    them apart (held), from one probe: the other schedules of the tenant go on."""
    h = harness
    (held_key,) = schedule_webhook(h, "held", at=h.clock.now())
    (other,) = schedule_webhook(h, "other", at=h.clock.now())
    assert pause(h, "held") and not pause(h, "held")  # again: no change
    h.clock.advance(timedelta(minutes=10))
    tick(h)
    work(h)
    assert effects(h) == {other: 1}
    assert delivery(h, held_key)["state"] == "scheduled"
    figures = db.fetch_one(h.conn, "oldest_overdue", {"now": h.clock.now(), "cap": 1000})
    assert figures is not None
    assert (figures["seconds"], figures["overdue"], figures["held"]) == (None, 0, 1)
    assert figures["held_seconds"] == 600.0
    assert violations(h.conn, now=h.clock.now()) == []
    assert pause(h, "held", False)
    run_minutes(h, 1)
    assert effects(h) == {other: 1, held_key: 1}


def test_a_pause_while_a_send_is_in_flight_lets_its_outcome_stand(harness: Harness) -> None:
    """The pause lands after the attempt started: the send's outcome is recorded as it was
    (sent), never overridden, and nothing is sent twice."""
    h = harness
    (key,) = schedule_webhook(h, "in-flight")
    tick(h)
    messages = take_messages(h)
    paused: list[bool] = []

    def pause_mid_send(name: str) -> None:
        if name == "attempts_finish" and not paused:
            paused.append(pause(h, "in-flight"))

    db.before_statement = pause_mid_send
    try:
        answer = consumer.process_batch(event_for(h, messages), h.rt)
    finally:
        db.before_statement = None
    assert paused == [True] and answer == {"batchItemFailures": []}
    assert delivery(h, key)["state"] == "sent" and effects(h) == {key: 1}
    assert violations(h.conn, now=h.clock.now()) == []


def test_a_trigger_while_the_series_advances_leaves_the_series(harness: Harness) -> None:
    """A trigger committed after the series' delivery was sent and before its next occurrence
    is made: the series still advances (the triggered delivery is not the series' pending
    one), the triggered send has its own key, and triggering again at that instant makes
    nothing new."""
    h = harness
    h.clock.set(datetime(2027, 3, 1, 8, 59, tzinfo=UTC))
    daily(h, "digest", "2027-03-01T09:00")
    h.clock.set(datetime(2027, 3, 1, 9, 0, tzinfo=UTC))
    tick(h)
    messages = take_messages(h)
    triggered: list[list[dict[str, Any]]] = []

    def trigger_now(name: str) -> None:
        if name == "schedule_share" and not triggered:
            triggered.append(db.fetch_all(h.conn, "api_trigger", {
                "tenant": "acme", "key": "digest", "now": h.clock.now()}))

    db.before_statement = trigger_now
    try:
        consumer.process_batch(event_for(h, messages), h.rt)
    finally:
        db.before_statement = None
    (made,) = triggered[0]
    assert made["delivery_key"].endswith(":trigger:20270301T090000Z:alice:webhook")
    rows = of_schedule(h, "digest")
    series = [(r["occurrence_at"], r["state"]) for r in rows if r["origin"] == "series"]
    assert series == [(datetime(2027, 3, 1, 9, tzinfo=UTC), "sent"),
                      (datetime(2027, 3, 2, 9, tzinfo=UTC), "scheduled")]
    assert db.fetch_all(h.conn, "api_trigger", {"tenant": "acme", "key": "digest",
                                                "now": h.clock.now()}) == []
    tick(h)
    work(h)
    assert delivery(h, made["delivery_key"])["state"] == "sent"
    assert sorted(effects(h).values()) == [1, 1]
    assert [r["state"] for r in of_schedule(h, "digest") if r["origin"] == "series"] == [
        "sent", "scheduled"]
    assert violations(h.conn, now=h.clock.now()) == []


def test_backfill_never_makes_an_occurrence_twice(harness: Harness) -> None:
    """A schedule created late: its missed occurrences are backfilled once (a dry run first,
    changing nothing; twice, the second makes nothing; over a wider window with some already
    delivered, only the missing ones). They are due now and their staleness window counts from
    the backfill, so days-old occurrences are sent, not parked stale."""
    h = harness
    schedules.set_kind(h.conn, name="digests", now=h.clock.now(),
                       stale_after=timedelta(hours=1))
    h.clock.set(datetime(2027, 3, 10, 12, 0, tzinfo=UTC))
    daily(h, "late", "2027-03-01T09:00", kind="digests")  # first due: 11 March
    dry = backfill(h, "2027-03-05T00:00Z", "2027-03-07T23:00Z", dry_run=True)
    assert [d["occurrence_at"] for d in dry.data["would_make"]] == [
        "2027-03-05T09:00:00Z", "2027-03-06T09:00:00Z", "2027-03-07T09:00:00Z"]
    assert len(of_schedule(h, "late")) == 1  # the dry run made nothing
    first = backfill(h, "2027-03-05T00:00Z", "2027-03-07T23:00Z")
    assert len(first.data["made"]) == 3
    again = backfill(h, "2027-03-05T00:00Z", "2027-03-07T23:00Z")
    assert again.data["made"] == []
    tick(h)
    work(h)
    sent = [r for r in of_schedule(h, "late") if r["origin"] == "backfill"]
    assert [r["state"] for r in sent] == ["sent"] * 3  # late on purpose: not stale
    wider = backfill(h, "2027-03-04T00:00Z", "2027-03-20T00:00Z")
    assert [d["occurrence_at"] for d in wider.data["made"]] == [
        "2027-03-04T09:00:00Z", "2027-03-08T09:00:00Z", "2027-03-09T09:00:00Z",
        "2027-03-10T09:00:00Z"]  # never after now; the series' 11 March is its own
    tick(h)
    work(h)
    assert sorted(effects(h).values()) == [1] * 7
    assert [r["origin"] for r in of_schedule(h, "late")].count("series") == 1
    actions = h.conn.execute("select action, who, via, reason from operator_actions"
                             " where object = 'schedule' and name = 'late' order by id"
                             ).fetchall()
    assert actions == [{"action": "backfilled", "who": "ops", "via": "cli", "reason": "INC-7"}
                       ] * 2  # the run that made nothing records nothing
    assert violations(h.conn, now=h.clock.now()) == []


def test_schedules_show_and_list_say_the_state_and_timeline(harness: Harness) -> None:
    h = harness
    h.clock.set(datetime(2027, 3, 1, 8, 0, tzinfo=UTC))
    daily(h, "digest", "2027-03-01T09:00")
    schedule_webhook(h, "once", at=datetime(2027, 3, 2, 9, tzinfo=UTC))
    schedule_commands.hold(h.conn, now=h.clock.now(), key="digest", tenant=None, paused=True,
                           who="ops", via="cli", reason="INC-1")
    shown = schedule_commands.show(h.conn, key="digest", tenant=None, now=h.clock.now()).data
    assert (shown["state"], shown["rule"], shown["tz"], shown["dst"]) == (
        "paused", DAILY_9, "UTC", {"gap": "shift", "overlap": "first"})
    assert [o["utc"] for o in shown["next"]][:2] == ["2027-03-01T09:00:00Z",
                                                      "2027-03-02T09:00:00Z"]
    assert [(a["action"], a["who"], a["reason"]) for a in shown["timeline"]] == [
        ("paused", "ops", "INC-1")]
    assert [len(g["deliveries"]) for g in shown["deliveries"]] == [1]
    page = schedule_commands.list_schedules(h.conn, limit=1, tenant="acme")
    assert [r["schedule_key"] for r in page.data] == ["digest"]
    assert page.json_notes == ["schedules list: more match; next page: --after acme/digest"]
    rest = schedule_commands.list_schedules(h.conn, limit=1, tenant="acme", after="acme/digest")
    assert [(r["schedule_key"], r["state"]) for r in rest.data] == [("once", "active")]
    paused = schedule_commands.list_schedules(h.conn, limit=10, state="paused")
    assert [r["schedule_key"] for r in paused.data] == ["digest"]

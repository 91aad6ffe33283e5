"""Each way the state machine used to break a promise, forced in its unlucky order on the real
Postgres, moto's SQS and a real receiver: outages longer than a lease, a series that cannot
advance, crashed sends, clocks ahead, racing scanners, deadlocks and rows held by an
application's open transaction."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from reminders import consumer, db, operator, redrive, scanner, schedules
from reminders.clock import FixedClock
from reminders.errors import Conflict, InvalidInput
from reminders.invariants import violations
from reminders.queue import Queue
from reminders.recurrence import Recurrence
from tests.conftest import Harness, PgCluster, make_runtime
from tests.faults import drop, labelled
from tests.integration.pipeline_helpers import (
    attempts,
    delivery,
    due_entry,
    effects,
    event_for,
    minutes,
    pending_lease,
    register,
    run_minutes,
    schedule_webhook,
    start_attempt,
    take_messages,
    tick,
    work,
)
from tests.round_trips import count_round_trips


def _urls(h: Harness) -> Any:
    from reminders.config import QueueUrls

    return QueueUrls(h.rt.deliveries.url, h.rt.dlq.url, h.rt.parking.url)


def _scanner_queue(h: Harness) -> Queue:
    """The queue the scanner publishes to: its role's client (``Runtime.for_function``)."""
    return h.rt.functions["scanner"].deliveries


def _runtime(h: Harness, database_url: str, cluster: PgCluster | None = None,
             **limits: int) -> None:
    """The harness's runtime with other limits; ``cluster``: its session limits (the lock and
    statement timeouts) become the login's role settings, as the migrator writes them."""
    h.rt.close()
    h.rt = make_runtime(database_url, _urls(h), h.endpoint, h.clock, **limits)
    if cluster is not None:
        cluster.configure(database_url, h.rt.session_defaults)


def test_a_consumer_outage_of_many_leases_parks_nothing_dead(harness: Harness,
                                                             database_url: str) -> None:
    """Item 1: leases that expire because nobody consumed them are not poison pills."""
    h = harness
    _runtime(h, database_url, max_empty_leases=2, lease_seconds=60)
    keys = schedule_webhook(h, "outage", recipients=["a", "b", "c"])
    for _ in range(12):  # the consumer is down for twelve lease lengths
        tick(h)
        take_messages(h, n=10)  # the messages vanish unread (expired, or a dead consumer)
        h.clock.advance(timedelta(seconds=61))
    assert {delivery(h, k)["state"] for k in keys} <= {"scheduled", "leased"}
    tick(h)
    work(h)
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}
    assert set(effects(h)) == set(keys)


def test_messages_read_after_their_pending_lease_expired_park_nothing_dead(
        harness: Harness, database_url: str) -> None:
    """Item 1: a backlogged consumer reads each message after its lease expired and before the
    next tick reclaims it. Such a message is late, not a poison pill: its pending lease is not
    taken onto the row (which would count a failed receipt when the lease is reclaimed), and
    the message is dropped as late instead of coming back. Taken, two late reads in a row
    parked the reminder `dead` without a single send."""
    h = harness
    _runtime(h, database_url, max_empty_leases=2, lease_seconds=60)
    (key,) = schedule_webhook(h, "late-reads")
    for _ in range(4):  # four lease lengths of a consumer always one lease behind
        tick(h)
        row = delivery(h, key)
        assert row["state"] == "scheduled", row["reason"]  # due again, leased again
        late = take_messages(h)
        assert len(late) == 1
        h.clock.advance(timedelta(seconds=61))  # expired, not reclaimed yet
        assert consumer.process_batch(event_for(h, late), h.rt) == {"batchItemFailures": []}
        assert effects(h) == {}
    tick(h)
    work(h)
    assert delivery(h, key)["state"] == "sent" and effects(h) == {key: 1}
    assert violations(h.conn, now=h.clock.now()) == []


def test_an_operator_retry_of_a_poison_message_starts_its_count_afresh(
        harness: Harness, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    _runtime(h, database_url, max_empty_leases=2, lease_seconds=60)
    (key,) = schedule_webhook(h, "poison-retry")
    real_decide = consumer._decide

    def dies(*args: Any) -> None:
        raise RuntimeError("dies before any send")

    monkeypatch.setattr(consumer, "_decide", dies)
    for _ in range(3):
        tick(h)
        taken = take_messages(h)
        if taken:
            with pytest.raises(RuntimeError):
                consumer.process_batch(event_for(h, taken), h.rt)
        h.clock.advance(timedelta(seconds=61))
    assert delivery(h, key)["state"] == "dead"
    monkeypatch.setattr(consumer, "_decide", real_decide)
    operator.reconcile(h.conn, key=key, tenant="acme", target="retry",
                       reason="fixed the consumer", now=h.clock.now())
    tick(h)
    assert pending_lease(h, key) is not None  # leased again, not parked on the next tick
    work(h)
    assert delivery(h, key)["state"] == "sent" and effects(h) == {key: 1}


def test_an_opt_out_committed_after_the_batch_was_read_stops_its_send(
        harness: Harness) -> None:
    """Item 5: the current-state checks run under the row lock, in the transaction that starts
    the attempt, not on the rows read when the batch arrived."""
    h = harness
    first, second = schedule_webhook(h, "pair", recipients=["amy", "ben"])
    tick(h)
    messages = take_messages(h)

    def opt_out_meanwhile(name: str) -> None:
        if name == "deliveries_lock":
            db.before_statement = None
            with db.connect(h.rt.settings.database_url) as app:
                schedules.opt_out(app, tenant="acme", recipient="ben", channel="webhook",
                                  now=h.clock.now())

    db.before_statement = opt_out_meanwhile
    try:
        answer = consumer.process_batch(event_for(h, messages), h.rt)
    finally:
        db.before_statement = None
    assert answer == {"batchItemFailures": []}
    assert delivery(h, first)["state"] == "sent"
    assert (delivery(h, second)["state"], delivery(h, second)["reason"]) == (
        "suppressed", "opted out of webhook")
    assert effects(h) == {first: 1}


def test_a_series_that_cannot_advance_parks_alone_and_the_tick_goes_on(
        harness: Harness) -> None:
    """Item 2: one delivery's failure never rolls back the tick for every tenant."""
    h = harness
    url = register(h, h.receiver.hook_url("series"))
    rec = Recurrence(rrule="FREQ=DAILY", tz="Europe/Berlin",
                     local_start=h.clock.now().replace(tzinfo=None), gap="shift",
                     overlap="first")
    schedules.schedule(h.conn, tenant="acme", recipients=["ann"], channel="webhook", to=url,
                       recurrence=rec, now=h.clock.now() - minutes(61), key="daily")
    tick(h)
    work(h)  # sent; the consumer advances the series at once
    h.conn.execute("update schedules set rrule = 'FREQ=NEVER' where schedule_key = 'daily'")
    h.conn.execute("update deliveries set state = 'sent', advance_series = true "
                   "where state = 'scheduled'")  # the next one ended too, with a broken rule
    (other,) = schedule_webhook(h, "other-tenant", tenant="globex")
    out = tick(h)
    assert out["advance_failed"] == 1 and out["published"] == 1
    work(h)
    assert delivery(h, other, tenant="globex")["state"] == "sent"
    parked = h.conn.execute("select reason from deliveries where advance_series = false "
                            "and reason like '%series not advanced%'").fetchall()
    assert len(parked) == 1 and "FREQ" in parked[0]["reason"]
    assert tick(h)["advance_failed"] == 0  # parked once, not retried every tick


def test_a_schedule_an_open_transaction_holds_is_skipped_and_the_tick_goes_on(
        harness: Harness) -> None:
    """While an application transaction holds one schedule (an open reschedule), a delivery of
    that schedule whose series waits to advance made every tick wait for the lock and raise
    before it leased anything. Now it is skipped and advanced by the tick after the holder
    ends."""
    h = harness
    url = register(h, h.receiver.hook_url("held"))
    rec = Recurrence(rrule="FREQ=DAILY", tz="UTC",
                     local_start=h.clock.now().replace(tzinfo=None), gap="shift",
                     overlap="first")
    schedules.schedule(h.conn, tenant="acme", recipients=["ann"], channel="webhook", to=url,
                       recurrence=rec, now=h.clock.now() - minutes(1), key="held-daily")
    h.conn.execute("update deliveries set state = 'sent', advance_series = true "
                   "where state = 'scheduled'")  # it ended; its series waits to advance
    (other,) = schedule_webhook(h, "other-tenant", tenant="globex")
    app, _ = labelled(h.rt.settings.database_url)
    try:
        with app.transaction():  # the application's reschedule, not committed yet
            schedules.reschedule(app, tenant="acme", key="held-daily", now=h.clock.now(),
                                 revision="2")
            out = tick(h)
            assert out["published"] == 1 and out["advanced"] == 0, out
            flagged = h.conn.execute("select count(*) as n from deliveries"
                                     " where advance_series").fetchone()
            assert flagged == {"n": 1}  # kept for the next tick
        out = tick(h)  # the holder committed: the series advances now
        assert out["advanced"] == 1, out
    finally:
        app.close()
    work(h)
    assert delivery(h, other, tenant="globex")["state"] == "sent"


def test_a_revision_alone_never_revives_an_ended_series_and_old_retries_are_refused(
        harness: Harness) -> None:
    """Item 2, the path that used to raise: COUNT=1 fails, a revision-only reschedule, and an
    operator's retry of the old delivery."""
    h = harness
    url = register(h, h.receiver.hook_url("gone", codes=[410]))
    rec = Recurrence(rrule="FREQ=DAILY;COUNT=1", tz="UTC",
                     local_start=h.clock.now().replace(tzinfo=None), gap="shift",
                     overlap="first")
    result = schedules.schedule(h.conn, tenant="acme", recipients=["bo"], channel="webhook",
                                to=url, recurrence=rec, now=h.clock.now(), key="once")
    (key,) = [d.delivery_key for d in result.deliveries]
    tick(h)
    work(h)
    assert delivery(h, key)["state"] == "failed"
    state = h.conn.execute("select state from schedules where schedule_key = 'once'").fetchone()
    assert state == {"state": "ended"}
    schedules.reschedule(h.conn, tenant="acme", key="once", now=h.clock.now(), revision="2")
    state = h.conn.execute("select state from schedules where schedule_key = 'once'").fetchone()
    assert state == {"state": "ended"}
    with pytest.raises(InvalidInput, match="rescheduled since; a retry would only be"):
        operator.reconcile(h.conn, key=key, tenant="acme", target="retry", reason="again",
                           now=h.clock.now())
    out = tick(h)
    assert out["advance_failed"] == 0 and out["leased"] == 0


@pytest.mark.resends_allowed
def test_crashed_webhook_sends_stop_at_the_attempt_budget(harness: Harness) -> None:
    """Item 4: a consumer dying mid-send is resent with the same key only within budget."""
    h = harness
    schedules.set_kind(h.conn, name="twice", now=h.clock.now(), max_attempts=2)
    (key,) = schedule_webhook(h, "crashy", kind="twice")
    for _ in range(5):
        tick(h)
        for msg in take_messages(h):  # start the attempt, then die before recording it
            body = json.loads(msg["Body"])
            start_attempt(h, body["delivery_id"], body["lease_token"])
        h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    row = delivery(h, key)
    assert row["state"] == "dead" and "attempt budget spent (2 of 2)" in row["reason"]
    assert [a["outcome"] for a in attempts(h, key)] == ["unknown", "unknown"]


def test_a_huge_retry_after_is_capped_at_the_staleness_deadline_and_the_max_delay(
        harness: Harness) -> None:
    """Item 6: one 503 with Retry-After of 3,000 years moves nothing past its deadline."""
    h = harness
    url = register(h, h.receiver.hook_url("eons", codes=[503], retry_after=94_608_000_000))
    schedules.set_kind(h.conn, name="trip", now=h.clock.now(), stale_after=timedelta(hours=3))
    (stale,) = schedule_webhook(h, "trip-eons", url=url, kind="trip")
    (capped,) = schedule_webhook(h, "digest-eons", url=url, recipients=["cy"])
    tick(h)
    work(h)
    row = delivery(h, stale)
    assert row["state"] == "stale" and "staleness deadline" in row["reason"]
    row = delivery(h, capped)
    assert row["state"] == "retrying"
    assert row["due_at"] == h.clock.now() + timedelta(seconds=h.rt.settings.limits.max_retry_delay)
    assert "capped at the maximum delay" in row["reason"]


def test_a_clock_ahead_never_sends_early_nor_holds_a_lease_for_a_month(
        harness: Harness, database_url: str) -> None:
    """Item 7: the consumer checks due by its own clock; a lease from a clock running ahead is
    taken back by the next scanner with a correct clock."""
    h = harness
    (key,) = schedule_webhook(h, "early", at=h.clock.now() + timedelta(days=30))
    ahead = make_runtime(database_url, _urls(h), h.endpoint,
                         FixedClock(h.clock.now() + timedelta(days=31)))
    assert scanner.tick(ahead).leased == 1
    ahead.close()
    work(h)  # the consumer's own clock says not yet
    row = delivery(h, key)
    assert row["state"] == "scheduled" and row["reason"].startswith("not due yet")
    assert effects(h) == {}
    scanner.tick(make_runtime(database_url, _urls(h), h.endpoint,
                              FixedClock(h.clock.now() + timedelta(days=31))))
    take_messages(h)  # this time the message is lost
    assert pending_lease(h, key) is not None
    out = tick(h)  # the correct clock takes the far-future lease back at once
    assert out["reclaimed"] == {"scheduled": 1}
    assert pending_lease(h, key) is None and due_entry(h, key) is not None


def test_too_little_invocation_time_starts_no_send(harness: Harness) -> None:
    """Item 8: with less than a send's deadline plus the margin left, nothing is attempted and
    every message comes back."""
    h = harness
    keys = schedule_webhook(h, "late", recipients=["a", "b"])
    tick(h)
    messages = take_messages(h)

    class AlmostOut:
        def get_remaining_time_in_millis(self) -> int:
            return 4_000

    answer = consumer.process_batch(event_for(h, messages), h.rt, AlmostOut())
    assert len(answer["batchItemFailures"]) == 2
    assert all(attempts(h, k) == [] for k in keys) and effects(h) == {}


class _Invocation:
    """A Lambda context whose remaining time the test sets as the batch goes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def get_remaining_time_in_millis(self) -> int:
        return int(self.seconds * 1000)


def test_time_spent_taking_the_rows_starts_no_send_it_could_not_record(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The time left is checked again once the rows are locked, before any attempt is
    started: a batch whose invocation time ran out while it waited for its rows sends nothing,
    and its messages come back un-attempted, their leases still theirs, to be sent when they
    come back."""
    h = harness
    keys = schedule_webhook(h, "late-lock", recipients=["a", "b"])
    tick(h)
    messages = take_messages(h)
    invocation = _Invocation(55.0)  # enough to start

    def rows_held_long(name: str) -> None:
        if name == "deliveries_lock":
            invocation.seconds = 20.0  # a send (15 s) fits, recording it (35 s) does not

    monkeypatch.setattr(db, "before_statement", rows_held_long)
    answer = consumer.process_batch(event_for(h, messages), h.rt, invocation)
    monkeypatch.setattr(db, "before_statement", None)
    assert len(answer["batchItemFailures"]) == 2
    assert all(attempts(h, k) == [] for k in keys) and effects(h) == {}
    assert all(delivery(h, k)["state"] == "leased" for k in keys)
    again = consumer.process_batch(event_for(h, messages), h.rt, _Invocation(55.0))
    assert again == {"batchItemFailures": []}
    assert effects(h) == {k: 1 for k in keys}


def test_racing_scanners_never_overshoot_the_in_flight_budget(harness: Harness,
                                                              database_url: str) -> None:
    """Item 12: the queue depth is read under the scanner's turn."""
    h = harness
    url = register(h, h.receiver.hook_url("race-budget"))
    schedules.schedule(h.conn, tenant="acme", recipients=[f"p{i}" for i in range(60)],
                       channel="webhook", to=url, at=h.clock.now(), now=h.clock.now(),
                       key="race-budget")
    runtimes = [make_runtime(database_url, _urls(h), h.endpoint, h.clock, scan_batch=15,
                             inflight_budget=20) for _ in range(4)]
    barrier = threading.Barrier(4)

    def scan(rt: Any) -> None:
        barrier.wait()
        scanner.tick(rt)

    threads = [threading.Thread(target=scan, args=(rt,)) for rt in runtimes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert h.rt.deliveries.depth() == 20
    for rt in runtimes:
        rt.close()


def test_a_deadlock_is_a_retryable_conflict_not_a_database_outage(database_url: str) -> None:
    """Item 10: Postgres aborting a transaction is reported as what it is."""
    with db.connect(database_url) as one, db.connect(database_url) as two:
        one.execute("create table locks (id int primary key)")
        one.execute("insert into locks values (1), (2)")
        ready = threading.Barrier(2)
        errors: list[BaseException] = []

        def grab(conn: db.Connection, first: int, second: int) -> None:
            try:
                with db.transaction(conn):
                    conn.execute("update locks set id = id where id = %s", (first,))
                    ready.wait()
                    with db.translate_errors():
                        conn.execute("update locks set id = id where id = %s", (second,))
            except Conflict as exc:
                errors.append(exc)

        threads = [threading.Thread(target=grab, args=(one, 1, 2)),
                   threading.Thread(target=grab, args=(two, 2, 1))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert len(errors) == 1 and errors[0].retryable  # type: ignore[attr-defined]
    assert "deadlock" in str(errors[0])


def test_a_row_held_by_an_open_application_transaction_fails_only_its_message(
        harness: Harness, database_url: str, pg_cluster: PgCluster) -> None:
    """Item 14: bounded lock waits; the blocked message fails alone and comes back."""
    h = harness
    _runtime(h, database_url, pg_cluster, db_lock_timeout_ms=500)
    (blocked,) = schedule_webhook(h, "held")
    (free,) = schedule_webhook(h, "free", recipients=["bob"])
    tick(h)
    messages = take_messages(h)
    app = psycopg.connect(database_url, autocommit=False)
    try:
        app.execute("select 1 from reminders.deliveries where delivery_key = %s for update",
                    (blocked,))
        answer = consumer.process_batch(event_for(h, messages), h.rt)
        assert len(answer["batchItemFailures"]) == 1
        assert delivery(h, free)["state"] == "sent"
        # Its lease was not taken (the row was held): still pending, no attempt.
        assert delivery(h, blocked)["state"] == "scheduled" and attempts(h, blocked) == []
        assert pending_lease(h, blocked) is not None
    finally:
        app.rollback()
        app.close()
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    tick(h)
    work(h)
    assert delivery(h, blocked)["state"] == "sent" and set(effects(h)) == {blocked, free}


@pytest.mark.resends_allowed
def test_the_service_connection_killed_mid_send_loses_nothing(harness: Harness) -> None:
    """The connection dropped while a send is out (by the proxy, or a failover): the outcome
    cannot be recorded, the message comes back, and the scanner settles the send after its
    deadline (same key resent)."""
    h = harness
    (key,) = schedule_webhook(h, "killed")
    tick(h)
    messages = take_messages(h)
    # The consumer sends through its own channels (its role's clients: Runtime.for_function).
    consumer_clients = h.rt.functions["consumer"]
    webhook = consumer_clients.channels["webhook"]

    class KillsTheConnection:
        name = "webhook"
        honours_idempotency_key = True

        def send(self, message: Any, now: Any) -> Any:
            conn = h.rt._conn
            assert conn is not None
            drop(conn)
            return webhook.send(message, now)

    consumer_clients.channels = {**consumer_clients.channels, "webhook": KillsTheConnection()}
    answer = consumer.process_batch(event_for(h, messages), h.rt)
    assert len(answer["batchItemFailures"]) == 1
    consumer_clients.channels = {**consumer_clients.channels, "webhook": webhook}
    row = delivery(h, key)
    assert row["state"] == "leased" and row["send_attempt"] == 1
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    assert tick(h)["reclaimed"] == {"retrying": 1}
    work(h)
    assert delivery(h, key)["state"] == "sent" and effects(h) == {key: 1}
    assert [a["outcome"] for a in attempts(h, key)] == ["unknown", "sent"]


def test_one_tenants_fan_out_never_holds_back_another_tenants_reminder(
        harness: Harness, database_url: str) -> None:
    """A pass is fair across tenants: a reminder due in the same minute as a large fan-out goes
    out in the first pass, although the fan-out's rows are older."""
    h = harness
    _runtime(h, database_url, scan_batch=20, inflight_budget=20)
    url = register(h, h.receiver.hook_url("fair"))
    schedules.schedule(h.conn, tenant="big", recipients=[f"p{i}" for i in range(500)],
                       channel="webhook", to=url, at=h.clock.now() - minutes(1),
                       now=h.clock.now() - minutes(2), key="digest")
    (small,) = schedule_webhook(h, "one-off", tenant="small", url=url)
    out = tick(h)  # oldest first alone would fill the whole budget with the fan-out
    assert out["leased"] == 20
    assert pending_lease(h, small, tenant="small") is not None


def test_a_tick_drains_until_the_budget_is_full(harness: Harness, database_url: str) -> None:
    h = harness
    _runtime(h, database_url, scan_batch=10, inflight_budget=45)
    schedule_webhook(h, "drain", recipients=[f"p{i}" for i in range(100)])
    out = tick(h)
    assert (out["leased"], out["published"], out["passes"]) == (45, 45, 5)
    assert h.rt.deliveries.depth() == 45
    out = tick(h)  # the budget is full: nothing more until the consumers take some
    assert out["leased"] == 0


def test_a_tick_probes_the_tenants_once_and_shares_each_pass_among_those_still_due(
        harness: Harness, database_url: str) -> None:
    """Each pass says how many tenants may have due work left (one that offered a full share,
    or more than the pass took), so the tick probes every tenant once, not once a pass."""
    h = harness
    _runtime(h, database_url, scan_batch=10, inflight_budget=1000)
    schedule_webhook(h, "big", tenant="big", recipients=[f"p{i}" for i in range(25)])
    schedule_webhook(h, "small", tenant="small", recipients=["a", "b"])
    statements: list[str] = []
    db.before_statement = statements.append
    try:
        out = tick(h)
    finally:
        db.before_statement = None
    assert out["leased"] == 27
    assert statements.count("tenants_with_due_work") == 1
    # Shares of 5 (both tenants: 5 + 2), then 10 and 10 (big alone); big's last pass offered
    # a full share, so one more statement finds nothing.
    assert (out["passes"], statements.count("lease_due")) == (3, 4)


def test_a_reminder_falling_due_while_a_tick_drains_goes_out_in_its_next_pass(
        harness: Harness, database_url: str) -> None:
    """A tick drains for up to most of a minute; each pass leases by the clock as it reads
    then, so another tenant's reminder falling due meanwhile waits one pass, not one tick."""
    h = harness
    _runtime(h, database_url, scan_batch=10, inflight_budget=1000)
    schedule_webhook(h, "fan", tenant="big", recipients=[f"p{i}" for i in range(50)])
    (late,) = schedule_webhook(h, "soon", tenant="small", at=h.clock.now() + minutes(0.5))
    publish = _scanner_queue(h).publish
    passes: list[list[int]] = []

    def recorded(messages: Any, **kw: Any) -> Any:
        passes.append([m.delivery_id for m in messages])
        return publish(messages, **kw)

    class Passing:
        """Each reading of the clock finds it 20 s on from the last: the tick's start reads
        T, its first pass T + 20 s, its second T + 40 s, ..."""

        def now(self) -> Any:
            read = h.clock.now()
            h.clock.advance(timedelta(seconds=20))
            return read

    _scanner_queue(h).publish = recorded  # type: ignore[method-assign]
    h.rt.clock = Passing()
    out = tick(h)
    row = delivery(h, late, tenant="small")
    assert pending_lease(h, late, tenant="small") is not None and out["leased"] == 51
    # Due 30 s in: not in the first pass (it read T + 20 s), in the second (T + 40 s).
    assert row["id"] not in passes[0] and row["id"] in passes[1]


def _leased_count(h: Harness) -> int:
    row = h.conn.execute("select count(*) as n from due_queue where token is not null").fetchone()
    return int(row["n"]) if row else 0


def _released_reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    return sorted({str(r.__dict__.get("reason", "")).split(";")[0]
                   for r in caplog.records if r.getMessage() == "leases released"})


def test_the_next_pass_leases_while_the_last_one_is_handed_over(
        harness: Harness, database_url: str) -> None:
    """The hand-over is pipelined: pass 0's publish is held until pass 1 has leased its rows
    (seen from another connection); a tick publishing one pass after the other would never
    get there, and the wait would time out."""
    h = harness
    _runtime(h, database_url, scan_batch=10, inflight_budget=1000)
    schedule_webhook(h, "fan", recipients=[f"p{i}" for i in range(30)])
    publish = _scanner_queue(h).publish
    overlapped: list[bool] = []

    def held(messages: Any, **kw: Any) -> Any:
        if not overlapped:  # pass 0: wait for pass 1's lease
            deadline = time.monotonic() + 5
            while _leased_count(h) < 20 and time.monotonic() < deadline:
                time.sleep(0.01)
            overlapped.append(_leased_count(h) >= 20)
        return publish(messages, **kw)

    _scanner_queue(h).publish = held  # type: ignore[method-assign]
    out = tick(h)
    assert overlapped == [True]
    assert (out["leased"], out["published"], out["released"], out["passes"]) == (30, 30, 0, 3)
    assert len(take_messages(h, n=30)) == 30


def test_a_refused_pass_releases_the_pass_leased_meanwhile_and_the_tick_stops(
        harness: Harness, database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    from reminders.queue import Rejected

    h = harness
    _runtime(h, database_url, scan_batch=10, inflight_budget=1000)
    keys = schedule_webhook(h, "fan", recipients=[f"p{i}" for i in range(30)])
    handed: list[int] = []

    def refusing(messages: Any, **kw: Any) -> Any:
        handed.append(len(messages))
        return [Rejected(m, "ThrottlingException: slow down") for m in messages]

    _scanner_queue(h).publish = refusing  # type: ignore[method-assign]
    out = tick(h)
    # Pass 0 was refused; pass 1 had leased meanwhile and went back unpublished; no pass 2.
    assert handed == [10]
    assert (out["leased"], out["published"], out["released"], out["passes"]) == (20, 0, 20, 2)
    rows = [delivery(h, k) for k in keys]
    assert {r["state"] for r in rows} == {"scheduled"}
    assert all(r["lease_token"] is None for r in rows)
    # Every lease went back to the due set; the delivery rows were never written.
    assert [k for k in keys if pending_lease(h, k) or not due_entry(h, k)] == []
    assert _released_reasons(caplog) == [
        "not handed over: the queue refused the pass before it",
        "queue refused the message (or its publisher was not invoked)"]


def test_a_publisher_that_raises_refuses_its_whole_pass(harness: Harness,
                                                        database_url: str) -> None:
    h = harness
    _runtime(h, database_url, scan_batch=10, inflight_budget=1000)
    keys = schedule_webhook(h, "fan", recipients=[f"p{i}" for i in range(5)])

    def raising(messages: Any, **kw: Any) -> Any:
        raise ConnectionResetError("the queue hung up")

    _scanner_queue(h).publish = raising  # type: ignore[method-assign]
    out = tick(h)
    assert (out["leased"], out["published"], out["released"]) == (5, 0, 5)
    assert {delivery(h, k)["state"] for k in keys} == {"scheduled"}


def test_a_publisher_raising_a_base_exception_leaves_no_lease_unreleased(
        harness: Harness, database_url: str) -> None:
    """A BaseException (an interrupt) out of a pass's hand-over, caught when it is settled
    after the next pass leased: both passes go back, fenced, before it propagates."""
    h = harness
    _runtime(h, database_url, scan_batch=10, inflight_budget=1000)
    keys = schedule_webhook(h, "fan", recipients=[f"p{i}" for i in range(30)])

    def interrupted(messages: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    _scanner_queue(h).publish = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        tick(h)
    rows = [delivery(h, k) for k in keys]
    assert {r["state"] for r in rows} == {"scheduled"}
    # Pass 0 and pass 1 were released to the due set; pass 2 was never leased.
    assert [k for k in keys if pending_lease(h, k) or not due_entry(h, k)] == []
    assert _leased_count(h) == 0


def test_a_lease_an_application_is_ending_does_not_stop_a_refused_pass_going_back(
        harness: Harness, database_url: str, pg_cluster: PgCluster) -> None:
    """An application reschedules a delivery of a refused pass in a transaction still open:
    its trigger is ending that pending lease. Handing the pass back skips that lease instead of
    waiting for it (invariant 7: one held row never fails the rest): the pass's other leases
    and the pass leased meanwhile go back, the tick ends without an error, and once the
    application commits the delivery is due at its new time, with no lease."""
    from reminders.queue import Rejected

    h = harness
    # A short lock wait: waiting for the held lease would fail the tick with Conflict.
    _runtime(h, database_url, pg_cluster, scan_batch=10, inflight_budget=1000,
             db_lock_timeout_ms=300)
    keys = schedule_webhook(h, "fan", recipients=[f"p{i}" for i in range(20)])
    app = psycopg.connect(database_url, autocommit=False)
    publish = _scanner_queue(h).publish
    held: list[int] = []

    def refusing_while_a_lease_is_ending(messages: Any, **kw: Any) -> Any:
        if held:  # the first tick is over: the queue takes them again
            return publish(messages, **kw)
        held.append(messages[0].delivery_id)
        app.execute("set search_path to reminders")  # as the service's sessions have it
        app.execute("update deliveries set due_at = due_at + interval '1 minute' "
                    "where id = %s", (held[0],))
        return [Rejected(m, "ThrottlingException: slow down") for m in messages]

    _scanner_queue(h).publish = refusing_while_a_lease_is_ending  # type: ignore[method-assign]
    try:
        out = tick(h)
        pending = [k for k in keys if pending_lease(h, k) is not None]
    finally:
        app.commit()
        app.close()
    assert (out["leased"], out["published"], out["released"]) == (20, 0, 19)
    assert [delivery(h, k)["id"] for k in pending] == held
    assert [k for k in keys if pending_lease(h, k)] == []  # the commit ended the held one
    assert violations(h.conn, now=h.clock.now()) == []
    out = tick(h)
    assert (out["leased"], out["published"]) == (19, 19)  # the rescheduled one is due later
    h.clock.advance(minutes(1))
    assert tick(h)["leased"] == 1


def test_a_paused_tenants_backlog_is_reported_apart_from_the_systems_lateness(
        harness: Harness) -> None:
    h = harness
    schedule_webhook(h, "held", tenant="sleepy", at=h.clock.now() - minutes(30))
    schedules.set_tenant_paused(h.conn, tenant="sleepy", paused=True)
    out = tick(h)
    assert out["leased"] == 0 and out["oldest_overdue_seconds"] == 0.0
    assert out["paused_overdue_seconds"] == 1800.0


def test_a_batch_costs_four_database_round_trips_whatever_its_size(harness: Harness) -> None:
    """Mark received; lock and read; decide and start (committed before any send); finish."""
    h = harness
    keys = schedule_webhook(h, "trips", recipients=[f"p{i}" for i in range(10)])
    tick(h)
    messages = take_messages(h, n=10)
    conn = h.rt.connection()
    syncs = count_round_trips(conn, lambda: consumer.process_batch(event_for(h, messages), h.rt))
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}
    assert syncs == 4



def test_a_failure_inside_a_pipeline_keeps_nothing_half_done(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "half")
    tick(h)
    row = delivery(h, key)
    with pytest.raises(RuntimeError), db.pipeline(h.conn):
        db.submit(h.conn, "attempts_start", {
            "ids": [row["id"]], "tokens": [row["lease_token"]],
            "deadlines": [h.clock.now() + timedelta(seconds=30)], "now": h.clock.now()})
        raise RuntimeError("the process fails before the rest is written")
    assert attempts(h, key) == [] and delivery(h, key)["send_attempt"] is None


def test_retention_removes_old_finished_deliveries_in_bounded_batches(
        harness: Harness, database_url: str) -> None:
    """Terminal deliveries past their kind's retention go, with attempts and events; pending
    ones and younger ones stay; status says what was removed."""
    h = harness
    _runtime(h, database_url, retention_batch=2)
    schedules.set_kind(h.conn, name="brief", now=h.clock.now(), retention=timedelta(days=1))
    old = schedule_webhook(h, "old", recipients=["a", "b", "c"], kind="brief")
    (kept,) = schedule_webhook(h, "kept", recipients=["d"])  # the default kind: 30 days
    (later,) = schedule_webhook(h, "later", recipients=["e"], kind="brief",
                                at=h.clock.now() + timedelta(days=5))
    tick(h)
    work(h)
    assert {delivery(h, k)["state"] for k in [*old, kept]} == {"sent"}
    h.clock.advance(timedelta(days=2))
    assert tick(h)["purged"] == 2  # bounded per tick
    assert tick(h)["purged"] == 1
    assert tick(h)["purged"] == 0
    left = {r["delivery_key"] for r in h.conn.execute("select delivery_key from deliveries")}
    assert left == {kept, later}
    assert h.conn.execute("select count(*) as n from attempts a join deliveries d "
                          "on d.id = a.delivery_id").fetchone() == {"n": 1}
    status = operator.status(h.conn, now=h.clock.now())
    assert status["retention_removed"]["last_7_days"]["deliveries"] == 3
    assert status["retention_removed"]["last_7_days"]["attempts"] == 3


def test_a_tick_goes_on_handing_over_while_consumers_make_room(
        harness: Harness, database_url: str) -> None:
    """The budget bounds what is out at once, not what a tick may hand over in all."""
    from reminders.local import pipeline

    h = harness
    _runtime(h, database_url, scan_batch=10, inflight_budget=20)
    keys = schedule_webhook(h, "stream", recipients=[f"p{i}" for i in range(50)])
    publish = _scanner_queue(h).publish
    # The consumers run on the hand-over thread while the scanner leases its next pass: they
    # have their own runtime (and connection), as they would in their own Lambda functions.
    consumers = make_runtime(database_url, _urls(h), h.endpoint, h.clock)

    def publish_and_consume(messages: Any, **kw: Any) -> Any:
        rejected = publish(messages, **kw)
        # consumers keep up: every lease this pass handed over is settled at once
        assert pipeline.work(consumers)["idle"]
        return rejected

    _scanner_queue(h).publish = publish_and_consume  # type: ignore[method-assign]
    try:
        out = tick(h)
    finally:
        consumers.close()
    assert out["leased"] == 50 and out["passes"] == 5
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}


def test_the_same_reschedule_twice_changes_nothing_the_second_time(harness: Harness) -> None:
    h = harness
    (first,) = schedule_webhook(h, "moved", at=h.clock.now() + minutes(30))
    later = h.clock.now() + minutes(60)
    once = schedules.reschedule(h.conn, tenant="acme", key="moved", now=h.clock.now(), at=later)
    again = schedules.reschedule(h.conn, tenant="acme", key="moved", now=h.clock.now(),
                                 at=later)
    assert [d.delivery_key for d in again.deliveries] == [d.delivery_key for d in once.deliveries]
    assert delivery(h, first)["state"] == "suppressed"
    assert h.conn.execute("select generation from schedules where schedule_key = 'moved'"
                          ).fetchone() == {"generation": 1}
    assert h.conn.execute("select count(*) as n from deliveries").fetchone() == {"n": 2}


def test_the_steps_after_the_drain_end_with_the_tick_s_time(
        harness: Harness, database_url: str) -> None:
    """A tick never outlives its time: the lateness read after the drain, blocked (here by a
    session holding the due set whole), is cut off at the tick's end, not left to the lock
    timeout, and reported as not measured (never as 0) instead of failing the tick."""
    h = harness
    _runtime(h, database_url, scan_seconds=1)
    schedule_webhook(h, "budget")
    blocker = db.connect(database_url)
    held: list[bool] = []

    def hold_the_due_set(name: str) -> None:
        if name == "oldest_overdue" and not held:
            held.append(True)
            blocker.execute("begin")
            blocker.execute("lock table due_queue in access exclusive mode")

    db.before_statement = hold_the_due_set
    try:
        summary = scanner.tick(h.rt)
    finally:
        db.before_statement = None
        blocker.execute("rollback")
        blocker.close()
    assert held == [True]
    assert (summary.leased, summary.published) == (1, 1)
    assert summary.oldest_overdue_seconds is None and summary.skipped is None
    assert scanner.tick(h.rt).oldest_overdue_seconds == 0.0  # measured again next tick


def test_a_pause_committed_after_the_recheck_starts_no_attempt(harness: Harness) -> None:
    """The pause is decided in the statement that starts the attempt: a tenant paused between
    the consumer's re-check and that statement sends nothing, and its delivery waits, its
    lease handed back unused (not counted toward the poison-message limit)."""
    h = harness
    (key,) = schedule_webhook(h, "paused-late")
    tick(h)
    messages = take_messages(h)
    paused: list[bool] = []

    def pause_now(name: str) -> None:
        if name == "attempts_start" and not paused:
            paused.append(True)
            db.execute(h.conn, "tenant_set_paused", {"tenant": "acme", "paused": True})

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
        "scheduled", "tenant paused; waits until resumed", None)
    counted = h.conn.execute("select leases, empty_receives from deliveries where id = %s",
                             (row["id"],)).fetchone()
    assert counted == {"leases": 0, "empty_receives": 0}  # handed back unused
    db.execute(h.conn, "tenant_set_paused", {"tenant": "acme", "paused": False})
    run_minutes(h, 1)
    assert delivery(h, key)["state"] == "sent" and effects(h) == {key: 1}


def test_a_retry_starts_the_redrive_budget_afresh(harness: Harness) -> None:
    """Parked dead for a spent redrive budget, then retried by an operator: its next visit to
    the dead-letter queue replays it (the budget was counted from the retry), instead of
    parking it dead again at once."""
    h = harness
    (key,) = schedule_webhook(h, "redriven")
    budget = h.rt.settings.limits.redrive_budget
    for _ in range(budget + 1):  # each visit replays it, until the budget is spent
        tick(h)
        redrive.process_batch(event_for(h, take_messages(h)), h.rt)
        h.clock.advance(timedelta(seconds=1))
    row = delivery(h, key)
    assert (row["state"], row["redrives"]) == ("dead", budget), row["reason"]
    operator.reconcile(h.conn, key=key, tenant="acme", target="retry",
                       reason="receiver fixed", now=h.clock.now(), who="ops")
    assert delivery(h, key)["redrives"] == 0
    tick(h)
    redrive.process_batch(event_for(h, take_messages(h)), h.rt)
    row = delivery(h, key)
    assert (row["state"], row["redrives"]) == ("scheduled", 1)  # replayed: due again

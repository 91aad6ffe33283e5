"""Leases kept apart from the delivery row (migration 0013), under the unlucky orders of events
the delivery row's lock no longer orders by itself: each test holds one transaction open
between two of its statements while another runs into it, over the real Postgres.

- A change to a due delivery (cancel, reschedule) that waits on a scanner's uncommitted lease
  of it ends that lease once the lease commits: the change is never overridden, and the due
  set is never left holding the delivery twice.
- A change that waits on a reclaim moving the pending lease back leaves one due entry, at
  the new due time.
- A consumer whose row was held when it took its batch's leases fails that message alone and
  takes the lease when it comes back, instead of dropping it for a lease period.
- The redrive takes a dead-lettered message's pending lease under the row lock it decides
  under, so a row held until just before it locks is replayed, not dropped with its lease
  left pending for a lease period.
- Two consumers taking one message at once: one takes the lease, the other's message fails
  alone and, when it comes back, finds the send made; one effect.
- A consumer's take waiting on a reclaim of its pending lease, and a cancel waiting on the
  consumer's row lock: no deadlock, the take finds no lease, the cancel stands.
- An application's REPEATABLE READ transaction that cancels after a lease committed since its
  snapshot gets a retryable Conflict (never a raw database error); its retry ends the lease.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from reminders import consumer, db, redrive, scanner, schedules
from reminders.errors import Conflict
from reminders.invariants import violations
from tests.conftest import Harness
from tests.faults import labelled, waits_on_a_lock
from tests.integration.pipeline_helpers import (
    bodies,
    delivery,
    due_entry,
    effects,
    event_for,
    minutes,
    pending_lease,
    schedule_webhook,
    take_messages,
    tick,
)

LEASE = {"batch": 100, "share": 100, "lease_seconds": 300}


def _waits_on_a_lock(h: Harness, thread: threading.Thread, label: str) -> bool:
    """True once the session ``label`` names waits on a lock (bounded), False if the thread
    ended."""
    return waits_on_a_lock(h.conn, label, thread.is_alive)


def _run_into(h: Harness, holder: db.Connection,
              change: Callable[[db.Connection], object]) -> None:
    """Run ``change`` on an application connection of its own while ``holder``'s transaction
    is open; check it waits on a lock ``holder`` holds, then commit ``holder`` and let it end."""
    errors: list[BaseException] = []
    app, label = labelled(h.rt.settings.database_url)

    def go() -> None:
        try:
            change(app)
        except BaseException as exc:  # noqa: BLE001 (surfaced below)
            errors.append(exc)

    thread = threading.Thread(target=go)
    thread.start()
    try:
        assert _waits_on_a_lock(h, thread, label), \
            "the change never waited on the open transaction"
        holder.execute("commit")
        thread.join(15)
        assert not thread.is_alive() and errors == []
    finally:
        app.close()


@contextlib.contextmanager
def _row_held_until(h: Harness, key: str, statement: str) -> Iterator[None]:
    """An application holds the delivery's row (an open transaction) until the service is
    about to run the named ``statement``, and lets go then."""
    app = db.connect(h.rt.settings.database_url)
    app.execute("begin")
    app.execute("select 1 from deliveries where delivery_key = %s for update", (key,))
    held = [True]

    def let_go(name: str) -> None:
        if name == statement and held:
            app.execute("rollback")
            held.clear()

    db.before_statement = let_go
    try:
        yield
    finally:
        db.before_statement = None
        app.close()


def _open_lease(h: Harness) -> tuple[db.Connection, list[db.Row]]:
    """A scanner's lease, its transaction left open (not committed)."""
    scanner_conn = db.connect(h.rt.settings.database_url)
    scanner_conn.execute("begin")
    leased = db.fetch_all(scanner_conn, "lease_due", {"now": h.clock.now(), **LEASE})
    return scanner_conn, leased


def test_a_cancel_waiting_on_an_uncommitted_lease_ends_that_lease(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "cancelled-meanwhile", at=h.clock.now())
    scanner_conn, leased = _open_lease(h)
    try:
        assert len(leased) == 1
        _run_into(h, scanner_conn, lambda app: schedules.cancel(
            app, tenant="acme", key="cancelled-meanwhile", now=h.clock.now()))
    finally:
        scanner_conn.close()
    assert delivery(h, key)["state"] == "suppressed"  # what a cancel makes of a due one
    assert pending_lease(h, key) is None and due_entry(h, key) is None
    assert violations(h.conn, now=h.clock.now()) == []


def test_a_reschedule_waiting_on_an_uncommitted_lease_ends_it_and_is_due_once(
        harness: Harness) -> None:
    """Without the lease ended, the delivery would be both leased and due: the next lease of
    it would collide with the lease left over (a tick failing on a duplicate key), or it
    would be handed to the queue twice."""
    h = harness
    (key,) = schedule_webhook(h, "moved-meanwhile", at=h.clock.now())
    later = h.clock.now() + minutes(30)
    scanner_conn, leased = _open_lease(h)
    try:
        assert len(leased) == 1
        _run_into(h, scanner_conn, lambda app: schedules.reschedule(
            app, tenant="acme", key="moved-meanwhile", now=h.clock.now(), at=later))
    finally:
        scanner_conn.close()
    (moved,) = [r for r in _deliveries(h, "moved-meanwhile") if r["state"] == "scheduled"]
    assert pending_lease(h, moved["delivery_key"]) is None
    entry = due_entry(h, moved["delivery_key"])
    assert entry is not None and entry["due_at"] == later
    assert violations(h.conn, now=h.clock.now()) == []
    h.clock.set(later)
    assert tick(h)["leased"] == 1
    assert len(take_messages(h)) == 1
    # The old occurrence, superseded by the reschedule, holds no lease and no due entry.
    assert delivery(h, key)["state"] == "suppressed"
    assert pending_lease(h, key) is None and due_entry(h, key) is None


def test_a_reschedule_waiting_on_a_reclaim_leaves_one_due_entry_at_the_new_time(
        harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "reclaimed-meanwhile", at=h.clock.now())
    tick(h)  # leased, the message lost
    assert pending_lease(h, key) is not None
    after = h.clock.now() + timedelta(seconds=301)
    later = h.clock.now() + minutes(30)
    reclaim_conn = db.connect(h.rt.settings.database_url)
    reclaim_conn.execute("begin")
    try:
        back = db.fetch_all(reclaim_conn, "pending_leases_reclaim", {
            "now": after, "lease_seconds": 300, "limit": 100})
        assert len(back) == 1
        _run_into(h, reclaim_conn, lambda app: schedules.reschedule(
            app, tenant="acme", key="reclaimed-meanwhile", now=h.clock.now(), at=later))
    finally:
        reclaim_conn.close()
    (moved,) = [r for r in _deliveries(h, "reclaimed-meanwhile") if r["state"] == "scheduled"]
    entry = due_entry(h, moved["delivery_key"])
    assert entry is not None and entry["due_at"] == later
    assert pending_lease(h, moved["delivery_key"]) is None
    assert violations(h.conn, now=after) == []


def test_a_message_whose_row_was_held_while_its_lease_was_taken_comes_back_for_it(
        harness: Harness) -> None:
    """The batch takes its leases while an application holds one row, and that application
    lets go before the batch locks its rows: the row is free, its lease still pending. The
    message fails alone and takes its lease when it comes back; dropped, the reminder would
    wait out a whole lease period."""
    h = harness
    (key,) = schedule_webhook(h, "held-at-take", at=h.clock.now())
    tick(h)
    messages = take_messages(h)
    with _row_held_until(h, key, "deliveries_lock"):
        answer: dict[str, Any] = consumer.process_batch(event_for(h, messages), h.rt)
    assert [f["itemIdentifier"] for f in answer["batchItemFailures"]] == [
        messages[0]["MessageId"]]
    assert delivery(h, key)["state"] == "scheduled" and pending_lease(h, key) is not None
    assert effects(h) == {}
    answer = consumer.process_batch(event_for(h, messages), h.rt)  # it comes back
    assert answer == {"batchItemFailures": []}
    assert delivery(h, key)["state"] == "sent" and effects(h) == {key: 1}


def test_a_scanner_tick_takes_no_delivery_row_lock(harness: Harness) -> None:
    """An application holding every due row (an open transaction) does not slow a tick down:
    the scanner leases from the due set, never from the rows."""
    h = harness
    keys = schedule_webhook(h, "all-held", recipients=[f"p{i}" for i in range(5)])
    app = db.connect(h.rt.settings.database_url)
    try:
        app.execute("begin")
        app.execute("select 1 from deliveries for update")
        out = scanner.tick(h.rt)
    finally:
        app.execute("rollback")
        app.close()
    assert (out.leased, out.published) == (5, 5)
    assert all(pending_lease(h, k) for k in keys)


def test_a_dead_lettered_message_whose_row_was_held_until_the_redrive_locked_it_is_replayed(
        harness: Harness) -> None:
    """Its consumers failed before taking the lease (the row was held each time), so the
    message reached the dead-letter queue with its lease still pending. An application holds
    the row until just before the redrive locks it: the redrive must take the lease under its
    own row lock and replay the delivery now. Taking it before the lock, it found the row
    held, then the row free and `scheduled`, and dropped the message as "already due again"
    while its lease stayed pending: the reminder waited out a whole lease period."""
    h = harness
    (key,) = schedule_webhook(h, "held-at-redrive", at=h.clock.now())
    tick(h)
    messages = take_messages(h)  # dead-lettered without ever being taken
    with _row_held_until(h, key, "deliveries_lock"):
        answer: dict[str, Any] = redrive.process_batch(event_for(h, messages), h.rt)
    assert answer == {"batchItemFailures": []}
    assert pending_lease(h, key) is None
    row = delivery(h, key)
    assert (row["state"], row["redrives"]) == ("scheduled", 1)
    entry = due_entry(h, key)
    assert entry is not None and entry["due_at"] == h.clock.now()  # due again now
    assert violations(h.conn, now=h.clock.now()) == []
    assert tick(h)["leased"] == 1  # and the next tick hands it over


def test_two_consumers_taking_one_message_at_once_make_one_effect(harness: Harness) -> None:
    """SQS hands one message to two consumers. The first's take holds the row (uncommitted)
    while the second takes the same lease: the second skips the row, fails that message alone,
    and when it comes back finds the lease taken; the first then finds the send made."""
    h = harness
    (key,) = schedule_webhook(h, "two-at-once", at=h.clock.now())
    tick(h)
    messages = take_messages(h)
    (lease,) = [(int(b["delivery_id"]), b["lease_token"]) for b in bodies(messages)]
    first = db.connect(h.rt.settings.database_url)
    try:
        first.execute("begin")
        assert db.execute(first, "deliveries_take_leases", {
            "ids": [lease[0]], "tokens": [lease[1]], "now": h.clock.now()}) == 1
        answer: dict[str, Any] = consumer.process_batch(event_for(h, messages), h.rt)
        assert [f["itemIdentifier"] for f in answer["batchItemFailures"]] == [
            messages[0]["MessageId"]]
        assert effects(h) == {}
        first.execute("commit")
    finally:
        first.close()
    row = delivery(h, key)
    assert (row["state"], str(row["lease_token"])) == ("leased", lease[1])
    assert pending_lease(h, key) is None and due_entry(h, key) is None
    assert consumer.process_batch(event_for(h, messages), h.rt) == {"batchItemFailures": []}
    assert consumer.process_batch(event_for(h, messages), h.rt) == {"batchItemFailures": []}
    assert delivery(h, key)["state"] == "sent" and effects(h) == {key: 1}
    assert violations(h.conn, now=h.clock.now()) == []


def test_a_take_waiting_on_a_reclaim_and_a_cancel_waiting_on_the_take_do_not_deadlock(
        harness: Harness) -> None:
    """The lock order of the three writers of one pending lease: the reclaim (its clock past
    the expiry) holds the `due_queue` row; the consumer's take (its clock a lease behind, so
    the lease is live by it) holds the delivery row and waits on it; a cancel
    waits on the delivery row. The reclaim commits, the take finds the lease ended and takes
    nothing, the cancel suppresses the delivery, and the message finds no lease."""
    h = harness
    (key,) = schedule_webhook(h, "three-writers", at=h.clock.now())
    tick(h)
    messages = take_messages(h)
    (lease,) = [(int(b["delivery_id"]), b["lease_token"]) for b in bodies(messages)]
    after = h.clock.now() + timedelta(seconds=301)
    reclaim_conn = db.connect(h.rt.settings.database_url)
    take_conn, take_label = labelled(h.rt.settings.database_url)
    cancel_conn, cancel_label = labelled(h.rt.settings.database_url)
    taken: list[int] = []
    errors: list[BaseException] = []

    def take() -> None:
        try:
            taken.append(db.execute(take_conn, "deliveries_take_leases", {  # its clock behind
                "ids": [lease[0]], "tokens": [lease[1]], "now": h.clock.now()}))
        except BaseException as exc:  # noqa: BLE001 (surfaced below)
            errors.append(exc)

    def cancel() -> None:
        try:
            schedules.cancel(cancel_conn, tenant="acme", key="three-writers", now=after)
        except BaseException as exc:  # noqa: BLE001 (surfaced below)
            errors.append(exc)

    try:
        reclaim_conn.execute("begin")
        assert len(db.fetch_all(reclaim_conn, "pending_leases_reclaim", {
            "now": after, "lease_seconds": 300, "limit": 100})) == 1
        taker = threading.Thread(target=take)
        taker.start()
        assert _waits_on_a_lock(h, taker, take_label)
        canceller = threading.Thread(target=cancel)
        canceller.start()
        assert _waits_on_a_lock(h, canceller, cancel_label)
        reclaim_conn.execute("commit")
        taker.join(15)
        canceller.join(15)
        assert not taker.is_alive() and not canceller.is_alive() and errors == []
    finally:
        for c in (reclaim_conn, take_conn, cancel_conn):
            c.close()
    assert taken == [0]
    assert delivery(h, key)["state"] == "suppressed"
    assert pending_lease(h, key) is None and due_entry(h, key) is None
    h.clock.set(after)
    assert consumer.process_batch(event_for(h, messages), h.rt) == {"batchItemFailures": []}
    assert delivery(h, key)["state"] == "suppressed" and effects(h) == {}
    assert violations(h.conn, now=after) == []


def test_a_repeatable_read_cancel_after_a_lease_committed_is_a_retryable_conflict(
        harness: Harness) -> None:
    """An application's REPEATABLE READ transaction took its snapshot before the scanner's
    lease committed: its cancel cannot end a lease it does not see, so Postgres refuses it
    and the application gets a retryable Conflict; the retry ends the lease."""
    h = harness
    (key,) = schedule_webhook(h, "rr-cancel", at=h.clock.now())
    app = db.connect(h.rt.settings.database_url)
    try:
        app.execute("begin isolation level repeatable read")
        app.execute("select count(*) from deliveries")  # the snapshot is taken
        tick(h)
        assert pending_lease(h, key) is not None
        with pytest.raises(Conflict) as refused:
            schedules.cancel(app, tenant="acme", key="rr-cancel", now=h.clock.now())
        assert refused.value.retryable
        app.execute("rollback")
        schedules.cancel(app, tenant="acme", key="rr-cancel", now=h.clock.now())
    finally:
        app.close()
    assert delivery(h, key)["state"] == "suppressed"
    assert pending_lease(h, key) is None and due_entry(h, key) is None
    messages = take_messages(h)
    assert consumer.process_batch(event_for(h, messages), h.rt) == {"batchItemFailures": []}
    assert effects(h) == {}
    assert violations(h.conn, now=h.clock.now()) == []


def _deliveries(h: Harness, schedule_key: str) -> list[db.Row]:
    return h.conn.execute(
        "select d.delivery_key, d.state from deliveries d join schedules s "
        "on s.id = d.schedule_id where s.schedule_key = %s", (schedule_key,)).fetchall()



def test_a_tick_neither_leases_nor_waits_for_a_delivery_an_open_transaction_is_cancelling(
        harness: Harness) -> None:
    """The other order: an application's cancel has run, not committed, when a tick leases.
    The trigger holds the due entry it is deleting: the tick skips it (no lease of a delivery
    about to be suppressed, and no wait), and the commit leaves nothing due."""
    h = harness
    (key,) = schedule_webhook(h, "cancel-open", at=h.clock.now())
    (other,) = schedule_webhook(h, "other", at=h.clock.now(), recipients=["bob"])
    app = db.connect(h.rt.settings.database_url)
    try:
        app.execute("begin")
        schedules.cancel(app, tenant="acme", key="cancel-open", now=h.clock.now())
        # This thread holds the lock: a tick that waited for it would wait out its lock
        # timeout and fail with Conflict.
        out = scanner.tick(h.rt)
        assert (out.leased, out.published) == (1, 1)
        assert pending_lease(h, other) is not None and pending_lease(h, key) is None
        app.execute("commit")
    finally:
        app.close()
    assert delivery(h, key)["state"] == "suppressed" and due_entry(h, key) is None
    assert violations(h.conn, now=h.clock.now()) == []

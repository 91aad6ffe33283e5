"""A row the service cannot read back (an instant outside the years 1-9999, a payload psycopg's
JSON reader cannot load), written before the entry checks or by hand, costs only itself: every
reader that loads rows (scanner, consumer, status, show, list) loads each on its own terms, and
the other rows go on."""

from __future__ import annotations

from typing import Any

import pytest

from reminders import consumer, db, operator, redrive
from tests.conftest import Harness
from tests.integration.cli_helpers import Cli
from tests.integration.pipeline_helpers import (
    bodies,
    delivery,
    effects,
    event_for,
    schedule_webhook,
    take_leases,
    take_messages,
    tick,
    work,
)

INSTANTS = ["0500-01-01 00:00:00+00 BC", "infinity", "-infinity", "12000-01-01 00:00:00+00"]


def _set_due(h: Harness, key: str, instant: str) -> None:
    """What only the superuser (or a row from before the checks) can write."""
    h.conn.execute("update deliveries set due_at = %s::timestamptz"
                   " where schedule_id = (select id from schedules where schedule_key = %s)",
                   (instant, key))
    h.conn.execute("update due_queue set due_at = %s::timestamptz where id in (select d.id"
                   " from deliveries d join schedules s on s.id = d.schedule_id"
                   " where s.schedule_key = %s)", (instant, key))


@pytest.mark.parametrize("instant", INSTANTS)
def test_a_due_instant_out_of_range_costs_only_its_delivery(harness: Harness,
                                                              instant: str) -> None:
    h = harness
    (bad,) = schedule_webhook(h, "out-of-range")
    (good,) = schedule_webhook(h, "in-range", recipients=["bob"])
    _set_due(h, "out-of-range", instant)
    tick(h)
    work(h)
    assert delivery(h, good)["state"] == "sent" and effects(h) == {good: 1}
    row = h.conn.execute("select state, reason from deliveries where delivery_key = %s",
                         (bad,)).fetchone()
    assert row is not None and row["state"] == "failed", row
    assert row["reason"].startswith("its due instant cannot be read back: "), row["reason"]
    assert "outside the years 1-9999" in row["reason"]
    # The next tick finds nothing more to do with it, and the operator's reads load it.
    assert tick(h)["unreadable"] == 0
    status = operator.status(h.conn, now=h.rt.clock.now())
    assert status["by_state"]["failed"] == 1 and status["by_state"]["sent"] == 1


@pytest.mark.parametrize("instant", ["infinity", "0500-01-01 00:00:00+00 BC"])
def test_the_operator_s_reads_show_a_row_they_cannot_hold_and_the_rest(
        cli: Cli, conn: db.Connection, instant: str) -> None:
    """Before a tick parks it (or in a column no tick rewrites): `show`, `list` and `status`
    each load the row on its own terms, showing the instant as Postgres wrote it, and every
    other row as ever; exit 0."""
    for key, who in (("odd", "a@example.com"), ("fine", "b@example.com")):
        cli("schedule", "--tenant", "acme", "--channel", "email", "--at", "2027-03-01T09:05:00Z",
            "--recipient", who, "--key", key, "--json").json()
    conn.execute("update deliveries set due_at = %s::timestamptz, occurrence_at = %s::timestamptz"
                 " where schedule_id = (select id from schedules where schedule_key = 'odd')",
                 (instant, instant))
    shown = cli("show", "odd", "--tenant", "acme", "--json").json()
    (only,) = shown["deliveries"]
    assert only["due_at"] == only["occurrence_at"] != ""
    assert only["due_at"].endswith("(outside the years 1-9999)") and instant in only["due_at"]
    text = cli("show", "odd", "--tenant", "acme")
    assert text.code == 0 and "outside the years 1-9999" in text.out, text
    listed = cli("list", "--tenant", "acme", "--json").json()
    assert sorted(d["schedule_key"] for d in listed) == ["fine", "odd"]
    assert cli("status", "--json").json()["by_state"]["scheduled"] == 2


# What a re-check loads that a hand (or a row from before the entry checks) can put out of
# range once the scanner has leased the row: the occurrence, the due instant, the schedule's
# local start.
RECHECKED = [
    ("update deliveries set occurrence_at = %s::timestamptz where delivery_key = %s",
     "occurrence_at", "infinity"),
    ("update deliveries set occurrence_at = %s::timestamptz where delivery_key = %s",
     "occurrence_at", "0500-01-01 00:00:00+00 BC"),
    ("update deliveries set due_at = %s::timestamptz where delivery_key = %s",
     "due_at", "12000-01-01 00:00:00+00"),
    ("update schedules set local_start = %s::timestamp where id = (select schedule_id"
     " from deliveries where delivery_key = %s)", "local_start", "-infinity"),
]


def _spoil(h: Harness, messages: list[dict[str, Any]], statement: str, instant: str,
           key: str) -> None:
    """Put ``instant`` in the row. Its due instant once its lease was taken (a consumer that
    took the batch's leases and stopped; before that, a change of it ends the pending lease and
    the scanner parks it, as tested above)."""
    if "due_at" in statement:
        take_leases(h, [(b["delivery_id"], b["lease_token"]) for b in bodies(messages)])
    h.conn.execute(statement, (instant, key))


def _parked_alone(h: Harness, bad: str, column: str, instant: str) -> None:
    row = h.conn.execute("select state, reason, empty_receives from deliveries"
                         " where delivery_key = %s", (bad,)).fetchone()
    assert row is not None and row["state"] == "failed", row
    assert row["reason"] == (f"its {column} cannot be read back: {instant} "
                             "(outside the years 1-9999)"), row["reason"]
    assert row["empty_receives"] == 0  # parked for its reason, never as a poison message


def _operator_reads(h: Harness, bad: str, good: str) -> None:
    """The operator's reads load the parked row and its neighbour: show, list, status."""
    conn = db.connect(h.rt.settings.database_url, readable_instants=True)
    try:
        shown = operator.show(conn, key="unreadable", tenant="acme")
        assert [d["delivery_key"] for d in shown["deliveries"]] == [bad]
        assert "cannot be read back" in operator.show_text(shown)
        listed, _ = operator.deliveries(conn, limit=10)
        assert {d["delivery_key"] for d in listed} == {bad, good}
        status = operator.status(conn, now=h.rt.clock.now())
        assert status["by_state"]["failed"] == 1
    finally:
        conn.close()


@pytest.mark.parametrize(("statement", "column", "instant"), RECHECKED,
                         ids=[f"{c}={i}" for _, c, i in RECHECKED])
def test_the_consumer_s_recheck_parks_a_row_it_cannot_read_and_sends_the_rest(
        harness: Harness, statement: str, column: str, instant: str) -> None:
    """Leased, then an instant put out of range: the consumer's re-check loads each row of
    its batch on its own terms, fails that delivery with the column and the instant in its
    reason, and sends the innocent one batched with it; no message of the batch fails."""
    h = harness
    (bad,) = schedule_webhook(h, "unreadable")
    (good,) = schedule_webhook(h, "readable", recipients=["bob"])
    tick(h)
    messages = take_messages(h)
    assert len(messages) == 2
    _spoil(h, messages, statement, instant, bad)
    answer = consumer.process_batch(event_for(h, messages), h.rt)
    assert answer == {"batchItemFailures": []}
    assert delivery(h, good)["state"] == "sent" and effects(h) == {good: 1}
    _parked_alone(h, bad, column, instant)
    _operator_reads(h, bad, good)


@pytest.mark.parametrize(("statement", "column", "instant"), RECHECKED,
                         ids=[f"{c}={i}" for _, c, i in RECHECKED])
def test_the_redrive_s_recheck_parks_a_row_it_cannot_read_and_replays_the_rest(
        harness: Harness, statement: str, column: str, instant: str) -> None:
    """Dead-lettered, then an instant put out of range: the redrive reads the batch's rows
    and re-checks each on its own terms; that delivery fails with its reason, the other is
    replayed, and no message of the batch fails or is parked on the parking queue."""
    h = harness
    (bad,) = schedule_webhook(h, "unreadable")
    (good,) = schedule_webhook(h, "readable", recipients=["bob"])
    tick(h)
    messages = take_messages(h)  # dead-lettered, as maxReceiveCount failures would
    assert len(messages) == 2
    _spoil(h, messages, statement, instant, bad)
    answer = redrive.process_batch(event_for(h, messages), h.rt)
    assert answer == {"batchItemFailures": []}
    replayed = delivery(h, good)
    assert (replayed["state"], replayed["redrives"]) == ("scheduled", 1)
    _parked_alone(h, bad, column, instant)
    assert take_messages(h, h.rt.parking.url) == []
    tick(h)  # the replayed one goes out; the parked one stays parked
    work(h)
    assert delivery(h, good)["state"] == "sent" and effects(h) == {good: 1}
    _operator_reads(h, bad, good)


@pytest.mark.parametrize("payload", ['{"n": 1e5000}', '{"a": ' + "[" * 1100 + "]" * 1100 + "}"],
                         ids=["number", "nesting"])
def test_the_redrive_parks_a_payload_it_cannot_read_back_and_replays_the_rest(
        harness: Harness, payload: str) -> None:
    """As the consumer does (tests/integration/test_pipeline.py): the redrive's re-check reads
    each payload on its own; that delivery fails with the reason, its neighbour is replayed."""
    h = harness
    (bad,) = schedule_webhook(h, "unreadable")
    (good,) = schedule_webhook(h, "readable", recipients=["bob"])
    tick(h)
    messages = take_messages(h)
    h.conn.execute("update schedules set payload = %s::jsonb where schedule_key = 'unreadable'",
                   (payload,))
    assert redrive.process_batch(event_for(h, messages), h.rt) == {"batchItemFailures": []}
    assert (delivery(h, good)["state"], delivery(h, good)["redrives"]) == ("scheduled", 1)
    row = h.conn.execute("select state, reason, empty_receives from deliveries"
                         " where delivery_key = %s", (bad,)).fetchone()
    assert row is not None and row["state"] == "failed" and row["empty_receives"] == 0, row
    assert row["reason"].startswith("payload cannot be read back: "), row["reason"]
    assert take_messages(h, h.rt.parking.url) == []

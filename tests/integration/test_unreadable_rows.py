"""A row the service cannot read back (an instant outside the years 1-9999, a payload psycopg's
JSON reader cannot load), written before the entry checks or by hand, costs only itself: every
reader that loads rows (scanner, consumer, status, show, list) loads each on its own terms, and
the other rows go on."""

from __future__ import annotations

import pytest

from reminders import db, operator
from tests.conftest import Harness
from tests.integration.cli_helpers import Cli
from tests.integration.pipeline_helpers import (
    delivery,
    effects,
    schedule_webhook,
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

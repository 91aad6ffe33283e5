"""A schedule row the scanner cannot read (a local start, a zone or a rule written by hand,
outside what the service represents) costs only that schedule: its series advance, or its first
occurrence, ends with a reason naming the problem, and every other schedule's advance and the
tick's leasing go on."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reminders import schedules
from reminders.recurrence import Recurrence
from tests.conftest import Harness
from tests.integration.pipeline_helpers import (
    delivery,
    minutes,
    register,
    schedule_webhook,
    tick,
    work,
)
from tests.integration.test_sql_api import Client, clients

__all__ = ["clients"]  # the fixture, used by name below

# What only the administrator (or a row from before the entry checks) can put in a schedule.
SPOILED = [
    ("local_start", "infinity", "infinity"),
    ("local_start", "-infinity", "-infinity"),
    ("local_start", "12000-01-01 09:00:00", "12000-01-01 09:00:00"),
    ("local_start", "0500-01-01 09:00:00 BC", "0500-01-01 09:00:00 BC"),
    ("local_start", "9500-01-01 09:00:00", "local_start"),
    ("tz", "Mars/Olympus", "Mars/Olympus"),
    ("rrule", "FREQ=SOMETIMES", "FREQ"),
]
IDS = [f"{column}={value}" for column, value, _ in SPOILED]
# ... and the occurrence of the delivery whose series waits to advance.
SERIES_SPOILED = [*SPOILED, ("occurrence_at", "infinity",
                             "its occurrence_at cannot be read back: infinity")]
SERIES_IDS = [*IDS, "occurrence_at=infinity"]


def _spoil(h: Harness, key: str, column: str, value: str) -> None:
    if column == "occurrence_at":
        h.conn.execute("update deliveries set occurrence_at = %s::timestamptz where"
                       " schedule_id = (select id from schedules where schedule_key = %s)",
                       (value, key))
        return
    cast = "::timestamp" if column == "local_start" else ""
    h.conn.execute(f"update schedules set {column} = %s{cast} where schedule_key = %s",
                   (value, key))


def _daily(h: Harness, key: str, tenant: str) -> None:
    url = register(h, h.receiver.hook_url("series"))
    rec = Recurrence(rrule="FREQ=DAILY", tz="Europe/Berlin",
                     local_start=h.clock.now().replace(tzinfo=None), gap="shift",
                     overlap="first")
    schedules.schedule(h.conn, tenant=tenant, recipients=["ann"], channel="webhook", to=url,
                       recurrence=rec, now=h.clock.now() - minutes(1), key=key)


@pytest.mark.parametrize(("column", "value", "named"), SERIES_SPOILED, ids=SERIES_IDS)
def test_a_series_the_scanner_cannot_read_parks_alone_and_the_others_advance(
        harness: Harness, column: str, value: str, named: str) -> None:
    """Two series waiting for their advance, one of them spoiled by hand, and a one-off due in
    a third tenant: the tick advances the readable series, parks the other's delivery with
    what it could not read, and leases and publishes the one-off."""
    h = harness
    _daily(h, "spoiled", "acme")
    _daily(h, "readable", "globex")
    ended = h.conn.execute("update deliveries set state = 'sent', advance_series = true"
                           " where state = 'scheduled' returning delivery_key, tenant").fetchall()
    assert len(ended) == 2  # both ended; each series waits to advance
    _spoil(h, "spoiled", column, value)
    (other,) = schedule_webhook(h, "one-off", tenant="initech")
    out = tick(h)
    assert (out["advanced"], out["advance_failed"], out["published"]) == (1, 1, 1), out
    work(h)
    assert delivery(h, other, tenant="initech")["state"] == "sent"
    rows = h.conn.execute(
        "select s.schedule_key, d.state, d.reason, d.advance_series from deliveries d"
        " join schedules s on s.id = d.schedule_id where s.schedule_key in"
        " ('spoiled', 'readable') order by s.schedule_key, d.occurrence_at").fetchall()
    readable = [r for r in rows if r["schedule_key"] == "readable"]
    assert [r["state"] for r in readable] == ["sent", "scheduled"]  # the next one is made
    (spoiled,) = [r for r in rows if r["schedule_key"] == "spoiled"]
    assert spoiled["state"] == "sent" and not spoiled["advance_series"], spoiled
    assert spoiled["reason"].startswith("series not advanced: "), spoiled["reason"]
    assert named in spoiled["reason"], spoiled["reason"]
    assert tick(h)["advance_failed"] == 0  # parked once, not tried every tick


FIRST = ("select * from reminders.schedule(key => %s, recipients => array['a@example.com'],"
         " channel => 'email', rrule => 'FREQ=DAILY', tz => 'Europe/Berlin',"
         " local_start => '2027-03-03 09:00')")


@pytest.mark.parametrize(("column", "value", "named"), SPOILED, ids=IDS)
def test_a_first_occurrence_the_scanner_cannot_read_ends_its_schedule_alone(
        harness: Harness, clients: Callable[[str | None], Client], column: str, value: str,
        named: str) -> None:
    """Schedules recorded through SQL wait for their first occurrence; one spoiled by hand
    ends with the problem in ``problem``, the other gets its first occurrence, and the tick
    leases a one-off due meanwhile."""
    h = harness
    app = clients("sqlapp")
    with app.conn.transaction():
        for key in ("spoiled", "readable"):
            app.conn.execute(FIRST, (key,))
    _spoil(h, "spoiled", column, value)
    (due,) = schedule_webhook(h, "one-off", tenant="initech")
    out = tick(h)
    assert (out["first_materialised"], out["first_failed"], out["leased"]) == (1, 1, 1), out
    rows = {r["schedule_key"]: r for r in h.conn.execute(
        "select schedule_key, state, pending_first, problem from schedules"
        " where tenant = 'sqlapp'").fetchall()}
    assert rows["readable"]["state"] == "active" and not rows["readable"]["pending_first"]
    spoiled = rows["spoiled"]
    assert (spoiled["state"], spoiled["pending_first"]) == ("ended", False), spoiled
    assert spoiled["problem"].startswith("the rule cannot be expanded: "), spoiled["problem"]
    assert named in spoiled["problem"], spoiled["problem"]
    work(h)
    assert delivery(h, due, tenant="initech")["state"] == "sent"
    assert tick(h)["first_failed"] == 0

"""A paused schedule's pending deliveries are counted apart, as "paused", in every figure an
operator reads (`status` and its JSON, the scanner's metrics), never as overdue; and the SQL
API's `my_schedules` says which of an application's schedules are paused."""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from reminders import db, operator, scanner
from tests.conftest import Harness
from tests.integration.pipeline_helpers import delivery, schedule_webhook


def pause(h: Harness, key: str, paused: bool = True) -> bool:
    row = db.fetch_one(h.conn, "api_pause", {"tenant": "acme", "key": key, "paused": paused,
                                             "now": h.clock.now()})
    assert row is not None
    return bool(row["changed"])


class Recorded:
    """The metrics a tick put, by name (a port the runtime owns)."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def put(self, name: str, value: float, unit: str = "Count",
            dimensions: dict[str, str] | None = None) -> None:
        self.values[name] = value

    def flush(self) -> None:
        return None


def test_a_paused_schedules_deliveries_are_counted_apart_never_as_overdue(
        harness: Harness) -> None:
    h = harness
    start = h.clock.now()
    (held_key,) = schedule_webhook(h, "held", at=start)
    (later_key,) = schedule_webhook(h, "held-later", at=start + timedelta(hours=2))
    (late_key,) = schedule_webhook(h, "late", at=start + timedelta(minutes=1))
    assert pause(h, "held") and pause(h, "held-later")
    h.clock.advance(timedelta(minutes=10))  # nothing ticks: "late" is 9 minutes overdue
    data = operator.status(h.conn, now=h.clock.now())
    # The held delivery is the oldest due one, and is not the oldest overdue: it waits.
    assert data["oldest_overdue_delivery"] is not None
    assert data["oldest_overdue_delivery"]["delivery_key"] == late_key
    assert data["oldest_overdue_seconds"] == 540.0
    assert data["paused_schedules"] == {"schedules": 2, "held": 2, "held_due": 1,
                                        "oldest_held_due_seconds": 600.0,
                                        "counted_up_to": operator.HELD_COUNT_CAP}
    assert {r["overdue"] for r in data["overdue_by"]} == {1}
    text = operator.status_text(data)
    assert ("paused schedules: 2, holding 2 pending deliveries (1 already due, the oldest "
            "10m late; apart from the overdue figures)") in text
    # One tenant's figures: the same, filtered.
    assert operator.status(h.conn, now=h.clock.now(), tenant="nobody")["paused_schedules"][
        "held"] == 0

    recorded = Recorded()
    rt = h.rt
    rt.metrics = recorded
    summary = scanner.tick(rt, refill=False)
    assert (summary.held_overdue, summary.held_overdue_seconds) == (1, 600.0)
    assert recorded.values["PausedSchedulesOverdue"] == 1
    assert recorded.values["PausedSchedulesOldestOverdueSeconds"] == 600.0
    # the system's lateness is the unheld one's alone
    assert recorded.values["OldestOverdueSeconds"] == 540.0
    assert delivery(h, held_key)["state"] == "scheduled"
    assert delivery(h, later_key)["state"] == "scheduled"

    assert pause(h, "held", False) and pause(h, "held-later", False)
    after = operator.status(h.conn, now=h.clock.now())["paused_schedules"]
    assert (after["schedules"], after["held"], after["held_due"]) == (0, 0, 0)
    assert "paused schedules" not in operator.status_text(
        operator.status(h.conn, now=h.clock.now()))


def test_my_schedules_carries_the_paused_flag(harness: Harness, database_url: str) -> None:
    """An application sees which of its own schedules are paused, by itself or an operator."""
    h = harness
    schedule_webhook(h, "kept")
    schedule_webhook(h, "stopped")
    login = f"app_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    role = sql.Identifier(login)
    with db.connect(database_url) as admin:
        admin.execute(sql.SQL("create role {} login password 'pw'").format(role))
        admin.execute(sql.SQL("grant reminders_client to {}").format(role))
        admin.execute("select reminders.grant_tenant(%s, %s)", (login, "acme"))
        try:
            url = make_conninfo(database_url, user=login, password="pw")
            with psycopg.connect(url, row_factory=dict_row, autocommit=True) as app:
                def listed() -> list[dict[str, Any]]:
                    return app.execute("select schedule_key, paused from reminders.my_schedules"
                                       " order by schedule_key").fetchall()

                assert listed() == [{"schedule_key": "kept", "paused": False},
                                    {"schedule_key": "stopped", "paused": False}]
                assert app.execute("select reminders.pause('stopped') as changed"
                                   ).fetchone() == {"changed": True}
                assert listed() == [{"schedule_key": "kept", "paused": False},
                                    {"schedule_key": "stopped", "paused": True}]
                assert app.execute("select reminders.resume('stopped') as changed"
                                   ).fetchone() == {"changed": True}
                assert listed()[1] == {"schedule_key": "stopped", "paused": False}
        finally:
            admin.execute(sql.SQL("drop owned by {}").format(role))
            admin.execute(sql.SQL("drop role {}").format(role))

"""The counts `status` and the console read (``delivery_counts``, kept by triggers on
deliveries, migration 0011) equal a count of the rows after every kind of state change the
service makes, driven through the real scanner, consumer, application API and operator paths;
and a counter never makes one transaction wait for another."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from reminders import db, invariants, operator, schedules
from reminders.db.queries import CHECKS
from reminders.errors import RemindersError
from reminders.recurrence import Recurrence
from tests.conftest import Harness
from tests.integration.pipeline_helpers import (
    delivery,
    minutes,
    register,
    schedule_webhook,
    start_attempt,
    take_messages,
    tick,
    work,
)

ROWS_BY_GROUP = """
select d.tenant, s.kind, d.channel, d.state, count(*) as n
from deliveries d join schedules s on s.id = d.schedule_id
group by d.tenant, s.kind, d.channel, d.state
order by d.tenant, s.kind, d.channel, d.state
"""


def agree(h: Harness) -> list[dict[str, Any]]:
    """`status` (read off the counters) equals a full count of the rows, group by group, and
    the invariant checker finds nothing; returns the groups."""
    rows = [dict(r) for r in h.conn.execute(ROWS_BY_GROUP).fetchall()]
    status = operator.status(h.conn, now=h.clock.now())
    assert status["by_tenant_kind_channel"] == rows
    assert status["total"] == sum(r["n"] for r in rows)
    assert db.fetch_all(h.conn, "check_delivery_counts", source=CHECKS) == []
    return rows


def test_counts_follow_every_state_change_the_service_makes(harness: Harness) -> None:
    h = harness
    now = h.clock.now
    seen: set[str] = set()

    def check() -> None:
        seen.update(r["state"] for r in agree(h))

    schedules.set_kind(h.conn, name="brief", now=now(), retention=timedelta(days=1),
                       max_attempts=2)
    ok = register(h, h.receiver.hook_url("ok"))
    flaky = register(h, h.receiver.hook_url("flaky", codes=[500]))
    refused = register(h, h.receiver.hook_url("refused", codes=[400]))
    check()  # nothing yet: no groups, no counters
    # schedule: one-offs in two tenants and two kinds, a fan-out, a recurring series
    schedule_webhook(h, "sent", url=ok, recipients=[f"p{i}" for i in range(12)])
    schedule_webhook(h, "brief", url=ok, recipients=["a", "b"], kind="brief", tenant="globex")
    schedule_webhook(h, "retry", url=flaky, recipients=["r1", "r2"], kind="brief")
    schedule_webhook(h, "fail", url=refused, recipients=["f1"])
    cancelled = schedule_webhook(h, "cancel", url=ok, recipients=["c1", "c2"],
                                 at=now() + timedelta(hours=2))
    schedule_webhook(h, "move", url=ok, recipients=["m1"], at=now() + timedelta(hours=3))
    schedule_webhook(h, "optout", url=ok, recipients=["o1"])
    rec = Recurrence(rrule="FREQ=DAILY;COUNT=3", tz="UTC",
                     local_start=now().replace(tzinfo=None))
    schedules.schedule(h.conn, tenant="acme", recipients=["d1"], channel="webhook", to=ok,
                       recurrence=rec, now=now(), key="daily")
    email = schedules.schedule(h.conn, tenant="acme", recipients=["e@example.com"],
                               channel="email", at=now(), now=now(), key="mail")
    check()
    schedules.opt_out(h.conn, tenant="acme", recipient="o1", channel="webhook", now=now())
    # lease (a whole pass in one statement), then a consumer that dies holding the e-mail's
    # message mid-send, and every other message settled: sent, retrying, failed, suppressed
    tick(h)
    check()
    messages: list[dict[str, Any]] = []
    while batch := take_messages(h):
        messages += batch
    lost = next(m for m in messages
                if json.loads(m["Body"])["delivery_id"] == delivery(
                    h, email.deliveries[0].delivery_key)["id"])
    body = json.loads(lost["Body"])
    assert start_attempt(h, body["delivery_id"], body["lease_token"]) is not None
    check()
    for m in messages:
        if m is not lost:
            h.rt.deliveries.send_raw(m["Body"], {})
    work(h)
    check()
    # cancel (supersede pending) and reschedule (supersede, then a new generation)
    assert schedules.cancel(h.conn, tenant="acme", key="cancel", now=now()) == 2
    schedules.reschedule(h.conn, tenant="acme", key="move", now=now(), at=now() + minutes(5))
    check()
    # reclaim: the e-mail's lease expires mid-send (unknown); retries come due again, and the
    # two-attempt budget of `brief` parks them dead; the series advances
    h.clock.advance(timedelta(hours=1))
    tick(h)
    check()
    work(h)
    check()
    for _ in range(3):
        h.clock.advance(timedelta(hours=1))
        tick(h)
        work(h)
        check()
    # operator: reconcile the unknown e-mail as sent, and a bulk retry of the dead ones
    operator.reconcile(h.conn, key=email.deliveries[0].delivery_key, tenant="acme",
                       target="sent", reason="the provider shows it", now=now())
    check()
    out = operator.reconcile_bulk(h.conn, state="dead", target="retry", reason="endpoint fixed",
                                  limit=10, now=now(), actor="ops", tenant="acme")
    assert out["reconciled"] and not out["failed"], out
    check()
    assert {delivery(h, k)["state"] for k in cancelled} == {"suppressed"}
    assert {"scheduled", "leased", "sent", "failed", "suppressed", "unknown", "dead",
            "retrying"} <= seen, seen
    # retention: `brief` keeps a day; what is terminal and older goes, a bounded batch a tick
    count = "select count(*) as n from deliveries"
    before = h.conn.execute(count).fetchone()
    h.clock.advance(timedelta(days=2))
    purged = 0
    for _ in range(5):
        purged += tick(h)["purged"]
        check()
    after = h.conn.execute(count).fetchone()
    assert before is not None and after is not None
    assert purged > 0 and after["n"] == before["n"] - purged
    # The scanner folded every backend's counter rows: one row per group is left.
    shards = h.conn.execute("select count(*) as n, count(*) filter (where shard <> 0) as live "
                            "from delivery_counts").fetchone()
    assert shards == {"n": len(agree(h)), "live": 0}


def test_the_checker_reports_counts_that_drift_from_the_rows(harness: Harness) -> None:
    """Invariant (f) can fail: a state change the triggers did not see is reported."""
    h = harness
    (key,) = schedule_webhook(h, "drift", recipients=["x"])
    assert invariants.violations(h.conn, now=h.clock.now()) == []
    with db.transaction(h.conn):
        h.conn.execute("alter table deliveries disable trigger delivery_counts_updated")
        h.conn.execute("update deliveries set state = 'dead' where delivery_key = %s", (key,))
        h.conn.execute("alter table deliveries enable trigger delivery_counts_updated")
    assert sorted(invariants.violations(h.conn, now=h.clock.now())) == [
        "counts differ from the rows: acme/default/webhook/dead: delivery_counts says 0, the "
        "deliveries number 1",
        "counts differ from the rows: acme/default/webhook/scheduled: delivery_counts says 1, "
        "the deliveries number 0",
    ]


def test_a_counter_never_makes_one_transaction_wait_for_another(
        harness: Harness, database_url: str) -> None:
    """Two open transactions change deliveries of the same group: neither waits on a counter
    (each backend adds to its own rows), and both commits count."""
    h = harness
    keys = schedule_webhook(h, "same", recipients=["a", "b", "c"])
    others = [db.connect(database_url) for _ in range(3)]
    try:
        for conn in others:
            conn.execute("set lock_timeout = '2s'")
            conn.execute("begin")
        for conn, key in zip(others, keys, strict=True):
            conn.execute("update deliveries set state = 'suppressed' where delivery_key = %s",
                         (key,))  # a lock wait here would raise after 2 s
        done = threading.Event()

        def fold() -> None:  # the scanner's fold skips the rows the open transactions hold
            with db.connect(database_url) as conn:
                db.fetch_one(conn, "delivery_counts_fold", {"limit": 100})
            done.set()

        folder = threading.Thread(target=fold)
        folder.start()
        assert done.wait(5), "the fold waited on an open transaction"
        folder.join()
        for conn in others:
            conn.execute("commit")
    finally:
        for conn in others:
            conn.close()
    assert agree(h) == [{"tenant": "acme", "kind": "default", "channel": "webhook",
                         "state": "suppressed", "n": 3}]


def test_a_schedules_kind_is_fixed(harness: Harness) -> None:
    """The counts key on the schedule's kind; nothing may move a schedule to another kind."""
    h = harness
    schedules.set_kind(h.conn, name="other", now=h.clock.now())
    schedule_webhook(h, "fixed", recipients=["k"])
    with pytest.raises((psycopg.Error, RemindersError), match="kind cannot change"):
        h.conn.execute("update schedules set kind = 'other' where schedule_key = 'fixed'")
    h.conn.execute("update schedules set kind = 'default' where schedule_key = 'fixed'")
    agree(h)

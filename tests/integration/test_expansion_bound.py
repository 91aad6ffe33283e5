"""A tick's time budget covers one schedule's expansion: rules that never yield, made through
the SQL API (which accepts them: only the expansion can tell), cannot keep a tick from leasing
due work, and each is ended once, with its reason, rather than costing every tick."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from reminders import config, scanner, series
from tests.conftest import Harness, make_runtime
from tests.integration.pipeline_helpers import schedule_webhook
from tests.integration.test_sql_api import Client, clients

__all__ = ["clients"]  # the fixture, used by name below

# Every 7th day from a Wednesday, on Tuesdays: never. dateutil searches to year 9999 for it.
NEVER = ("select * from reminders.schedule(key => %s, recipients => array['a@example.com'],"
         " channel => 'email', rrule => 'FREQ=DAILY;INTERVAL=7;BYDAY=TU',"
         " tz => 'Europe/Berlin', local_start => '2027-03-03 09:00')")
SCHEDULES = 100


def test_never_yielding_rules_cannot_keep_the_first_tick_from_leasing_due_work(
        harness: Harness, clients: Callable[[str | None], Client], database_url: str,
        queue_urls: config.QueueUrls) -> None:
    """Before, a one-second tick spent its whole time (and more: the deadline was read only
    between two rules) expanding them, and leased nothing."""
    h = harness
    app = clients("spammer")
    with app.conn.transaction():
        for i in range(SCHEDULES):
            app.conn.execute(NEVER, (f"never-{i}",))
    (due,) = schedule_webhook(h, "ordinary", tenant="acme",
                              at=h.clock.now() - timedelta(seconds=1))
    h.rt.close()
    h.rt = make_runtime(database_url, queue_urls, h.endpoint, h.clock, scan_seconds=1)
    summary = scanner.tick(h.rt)
    assert summary.leased == 1, summary
    row = h.conn.execute("select state from deliveries where delivery_key = %s",
                         (due,)).fetchone()
    assert row == {"state": "scheduled"}  # its lease pending: the message is on the queue
    assert summary.first_materialised + summary.first_failed < SCHEDULES  # time was up
    # What a tick did not reach is done by the next ones, each rule once: ended, with why.
    series.materialise_first(h.conn, SCHEDULES, h.clock.now())
    ended = h.conn.execute("select state, pending_first, problem from schedules"
                           " where tenant = 'spammer'").fetchall()
    assert len(ended) == SCHEDULES
    assert {(r["state"], r["pending_first"]) for r in ended} == {("ended", False)}
    assert {r["problem"] for r in ended} == {
        "the rule cannot be expanded: ExpansionBound: rrule: no occurrence in 5000 days in a "
        "row (the expansion's bound): the rule has none the service can find"}
    assert scanner.tick(h.rt).first_failed == 0  # nothing left to cost a tick

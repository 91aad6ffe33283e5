"""Demo-like traffic for the console's tests and screenshots: the demo's mix, plus a second
tenant whose endpoints fail (410 Gone: `failed`; 500 every time on a two-attempt kind: `dead`)
and whose weekly digest (Europe/Berlin) goes out, and a paused tenant with overdue work, run to
quiet on the simulated clock through the real scanner, consumer and redrive handlers, moto's SQS
and a real receiver."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from reminders import db, endpoints, schedules
from reminders.clock import FixedClock
from reminders.local import demo, pipeline
from reminders.recurrence import Recurrence
from reminders.runtime import Runtime

T0 = demo.START


def build(rt: Runtime, conn: db.Connection, clock: FixedClock, receiver: Any) -> datetime:
    """Schedule the mix at ``clock``'s time, run it to quiet; return the clock's time then."""
    now = clock.now()
    minute = timedelta(minutes=1)
    with db.transaction(conn):
        assert rt.secret_box is not None
        box = rt.secret_box
        demo.setup(conn, box, receiver.url, receiver.secret, now)

        def hook(name: str, query: str = "") -> str:
            url = f"{receiver.url}/hooks/{name}{query}"
            endpoints.register(conn, box, tenant=None, url=url, secret=receiver.secret,
                               now=now)
            return url

        schedules.set_kind(conn, name="digest", now=now, stale_after=timedelta(hours=6),
                           max_attempts=2, backoff_base=timedelta(seconds=30))
        gone, broken = hook("globex-gone", "?codes=410"), hook("globex-down", "?codes=500")
        schedules.schedule(conn, tenant="globex", key="renewal-7", channel="webhook", to=gone,
                           recipients=["ann", "ben", "cat"], at=now + 2 * minute,
                           kind="digest", now=now)
        schedules.schedule(conn, tenant="globex", key="invoice-8", channel="webhook",
                           to=broken, recipients=["dan", "eve", "fay", "gus"],
                           at=now + 3 * minute, kind="digest", now=now)
        schedules.schedule(conn, tenant="globex", key="weekly-digest", channel="webhook",
                           to=hook("globex-digest"), recipients=["hal"],
                           recurrence=Recurrence.parse("FREQ=WEEKLY;BYDAY=MO;BYHOUR=10",
                                                       "Europe/Berlin", "2027-03-01T10:00"),
                           now=now)
        schedules.schedule(conn, tenant="initech", key="reminder-1", channel="webhook",
                           to=hook("initech"), recipients=["ida", "ike"], at=now + minute,
                           now=now)
        schedules.set_tenant_paused(conn, tenant="initech", paused=True)
    demo.drive(lambda: pipeline.run(rt, max_seconds=30), conn, clock)
    return clock.now()

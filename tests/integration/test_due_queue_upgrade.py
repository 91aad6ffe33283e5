"""A deployment upgraded to migration 0013 with work in flight: deliveries due, a delivery
leased on its row (its message on the queue), one sent. After the upgrade the due set agrees
with the rows, the leased one's message is taken as before, the due one is leased from the
due set, and each is sent once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reminders import consumer, db, scanner, schedules
from reminders.db import migrate
from reminders.db.queries import CHECKS
from reminders.queue import LeaseMessage
from tests.conftest import T0
from tests.integration.test_interleavings import HOOK, World, event
from tests.integration.test_migrations import empty_database

__all__ = ["empty_database"]  # the fixture, used by name below


def test_work_in_flight_before_0013_goes_out_once_after_it(
        empty_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    every = migrate.available()
    assert [m.version for m in every][12] == 13, "0013 is the 13th migration"
    objects = migrate.objects()
    with db.connect(empty_database) as conn:
        # That release's migrator: its functions and triggers were its migrations' own.
        monkeypatch.setattr(migrate, "available", lambda: every[:12])
        monkeypatch.setattr(migrate, "objects", lambda: [])
        assert migrate.apply(conn) == list(range(1, 13))
    world = World(empty_database)
    try:
        def one(key: str, recipient: str) -> str:
            result = schedules.schedule(world.app, tenant="acme", recipients=[recipient],
                                        channel="webhook", to=HOOK, now=T0, at=T0, key=key)
            return result.deliveries[0].delivery_key

        due, leased, sent = one("due", "ann"), one("leased", "bob"), one("sent", "cy")
        row = world.app.execute(
            "update deliveries set state = 'leased', lease_token = gen_random_uuid(), "
            "lease_expires_at = %s, leases = 1 where delivery_key = %s "
            "returning id, lease_token", (T0 + timedelta(minutes=5), leased)).fetchone()
        assert row is not None
        old_message = LeaseMessage(int(row["id"]), row["lease_token"]).body()
        world.app.execute("update deliveries set state = 'sent' where delivery_key = %s",
                          (sent,))

        monkeypatch.setattr(migrate, "available", lambda: every)
        monkeypatch.setattr(migrate, "objects", lambda: objects)
        assert migrate.apply(world.app) == [m.version for m in every[12:]]

        assert db.fetch_all(world.app, "check_due_queue", source=CHECKS) == []
        entries = world.app.execute(
            "select d.delivery_key, q.token from due_queue q join deliveries d on d.id = q.id"
        ).fetchall()
        assert entries == [{"delivery_key": due, "token": None}]

        rt = world.runtime(timedelta(seconds=1))
        assert scanner.tick(rt).leased == 1  # the due one; the leased one's lease is live
        answer = consumer.process_batch(event([old_message, *world.queue.take()]), rt)
        rt.close()
        assert answer == {"batchItemFailures": []}
        states = {r["delivery_key"]: r["state"] for r in world.app.execute(
            "select delivery_key, state from deliveries").fetchall()}
        assert states == {due: "sent", leased: "sent", sent: "sent"}
        assert {key: world.sends(key) for key in (due, leased, sent)} == {
            due: 1, leased: 1, sent: 0}
        assert db.fetch_all(world.app, "check_due_queue", source=CHECKS) == []
    finally:
        world.close()

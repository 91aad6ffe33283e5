"""The service's functions, views and triggers are defined once, in repeatable files
(``reminders/db/objects/<kind>/<name>.sql``) the migrator re-applies when they change.

A database at the last release before them (migrations 0001-0017, its objects as those
migrations made them) with work in flight upgrades to them and loses nothing, and ends in
exactly the catalog a fresh database gets, function bodies and view queries included."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from psycopg import sql

from reminders import consumer, db, scanner, schedules, timezones
from reminders.config import DEFAULT_SCHEMA
from reminders.db import migrate
from reminders.db.queries import CHECKS
from reminders.queue import LeaseMessage, parse_body
from reminders.recurrence import Recurrence
from tests.conftest import T0, PgCluster
from tests.integration.test_interleavings import HOOK, World, event
from tests.integration.test_migrations import empty_database, render_schema

__all__ = ["empty_database"]  # the fixture, used by name below

LAST_RELEASE = 17  # the last migration shipped before the repeatable objects


@pytest.fixture
def fresh_database(pg_cluster: PgCluster) -> Iterator[str]:
    """Another empty database, migrated by the current code from nothing."""
    name = f"fresh_{uuid.uuid4().hex[:12]}"
    url = db.create_database(pg_cluster.direct, name)
    with db.connect(url) as conn:
        migrate.apply(conn)
    yield url
    with db.connect(pg_cluster.direct) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(name)))


def at_last_release(conn: db.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migrations up to 0017 and nothing else, as the last release's migrator applied them."""
    every = migrate.available()
    assert every[LAST_RELEASE - 1].version == LAST_RELEASE
    with monkeypatch.context() as m:
        m.setattr(migrate, "available", lambda: every[:LAST_RELEASE])
        m.setattr(migrate, "objects", lambda: [])
        assert migrate.apply(conn) == list(range(1, LAST_RELEASE + 1))
    assert conn.execute("select to_regclass('schema_objects') as t").fetchone() == {"t": None}


def rows(conn: db.Connection) -> dict[str, list[dict[str, Any]]]:
    return {
        "deliveries": conn.execute(
            "select id, delivery_key, state, due_at, lease_token, lease_expires_at, received,"
            " attempts_made, generation from deliveries order by id").fetchall(),
        # the columns the last release had (0023 adds `held`, 0024 the entries' priority)
        "due_queue": conn.execute("select id, tenant, state, due_at, token, expires_at"
                                  " from due_queue order by id").fetchall(),
        "counts": conn.execute(
            "select tenant, kind, channel, state, sum(n)::bigint as n from delivery_counts"
            " group by 1, 2, 3, 4 having sum(n) <> 0 order by 1, 2, 3, 4").fetchall(),
        "schedules": conn.execute(
            "select id, schedule_key, state, generation, pending_first, request_hash"
            " from schedules order by id").fetchall(),
    }


def test_work_in_flight_at_the_last_release_upgrades_to_the_objects_and_goes_out_once(
        empty_database: str, fresh_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with db.connect(empty_database) as conn:
        at_last_release(conn, monkeypatch)
    world = World(empty_database)
    try:
        app = world.app

        def one(key: str, recipient: str, at: datetime) -> str:
            result = schedules.schedule(app, tenant="acme", recipients=[recipient],
                                        channel="webhook", to=HOOK, now=T0, at=at, key=key)
            return result.deliveries[0].delivery_key

        pending = one("pending", "ann", T0)  # its lease pending: the message on the queue
        taken = one("taken", "bob", T0)  # leased on its row: a consumer took the message
        later = one("later", "cy", T0 + timedelta(hours=1))  # scheduled, not due yet
        retrying = one("retrying", "dee", T0 + timedelta(hours=2))
        series = schedules.schedule(
            app, tenant="acme", recipients=["eve"], channel="webhook", to=HOOK, now=T0,
            key="daily", recurrence=Recurrence("FREQ=DAILY;COUNT=2", "UTC",
                                               datetime(2027, 3, 2, 9, 0)))
        daily = series.deliveries[0].delivery_key
        rt = world.runtime(timedelta(seconds=1))
        # This code's scanner reads what later migrations add (deliveries.kind, 0020;
        # due_queue.held and deliveries.origin, 0023; its priority, 0024): the last release's
        # tick is played as its lease wrote the due entries (a token and an expiry) and
        # published their ids.
        now = rt.clock.now()
        leased = app.execute(
            "update due_queue set token = gen_random_uuid(), expires_at = %s"
            " where token is null and due_at <= %s returning id, token",
            (now + timedelta(seconds=rt.settings.limits.lease_seconds), now)).fetchall()
        assert len(leased) == 2
        world.queue.publish([LeaseMessage(r["id"], r["token"]) for r in leased])
        rt.close()
        messages = {parse_body(b).delivery_id: b for b in world.queue.take()}
        ids = {r["delivery_key"]: r["id"] for r in app.execute(
            "select id, delivery_key from deliveries").fetchall()}
        token = app.execute("select token from due_queue where id = %s",
                            (ids[taken],)).fetchone()
        assert token is not None
        assert db.execute(app, "deliveries_take_leases", {
            "ids": [ids[taken]], "tokens": [token["token"]], "now": T0}) == 1
        app.execute("update deliveries set state = 'retrying', attempts_made = 1,"
                    " due_at = %s where delivery_key = %s",
                    (T0 + timedelta(minutes=3), retrying))
        before = rows(app)
        assert {r["delivery_key"]: r["state"] for r in before["deliveries"]} == {
            pending: "scheduled", taken: "leased", later: "scheduled", retrying: "retrying",
            daily: "scheduled"}

        assert migrate.apply(app) == [m.version for m in migrate.available()
                                      if m.version > LAST_RELEASE]
        recorded = {r["name"]: r["digest"] for r in app.execute(
            "select name, digest from schema_objects").fetchall()}
        assert recorded.pop(migrate.TIME_ZONES)
        assert recorded == {o.key: o.digest for o in migrate.objects()}
        assert {r["name"] for r in app.execute("select name from time_zones")} == (
            timezones.available_zones())
        assert rows(app) == before
        assert app.execute("select count(*) as n from due_queue where held").fetchone() == {
            "n": 0}
        assert {r["priority"] for r in app.execute("select priority from due_queue")} == {5}
        assert db.fetch_all(app, "check_due_queue", source=CHECKS) == []
        assert db.fetch_all(app, "check_delivery_counts", source=CHECKS) == []

        with db.connect(fresh_database) as fresh:
            assert render_schema(app, bodies=True) == render_schema(fresh, bodies=True)

        rt = world.runtime(timedelta(seconds=2))
        answer = consumer.process_batch(event(list(messages.values())), rt)
        rt.close()
        assert answer == {"batchItemFailures": []}
        for minutes in (4, 61, 24 * 60 + 1, 2 * 24 * 60 + 1):
            rt = world.runtime(timedelta(minutes=minutes))
            scanner.tick(rt)
            consumer.process_batch(event(world.queue.take()), rt)
            rt.close()
        states = {r["delivery_key"]: r["state"] for r in app.execute(
            "select delivery_key, state from deliveries").fetchall()}
        assert set(states.values()) == {"sent"} and len(states) == 6  # the series' 2nd too
        assert {key: world.sends(key) for key in (pending, taken, later, retrying, daily)} == {
            pending: 1, taken: 1, later: 1, retrying: 1, daily: 1}
        assert db.fetch_all(app, "check_due_queue", source=CHECKS) == []
        assert db.fetch_all(app, "check_delivery_counts", source=CHECKS) == []
    finally:
        world.close()


def test_every_function_view_and_trigger_is_defined_in_exactly_one_file(
        conn: db.Connection) -> None:
    present = sorted((r["kind"], r["name"]) for r in db.fetch_all(conn, "schema_objects_present"))
    files = sorted((o.kind, o.name) for o in migrate.objects())
    assert len(files) == len(set(files))
    assert present == files


def test_an_unchanged_object_is_not_applied_again_and_a_changed_one_is(
        empty_database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with db.connect(empty_database) as conn:
        migrate.apply(conn)
    with db.connect(empty_database) as conn:  # on the schema's search path now
        with db.transaction(conn):
            assert migrate.apply_objects(conn) == []
        before = {r["name"]: r["applied_at"] for r in conn.execute(
            "select name, applied_at from schema_objects").fetchall()}

        every = migrate.objects()
        index = next(i for i, o in enumerate(every) if o.key == "functions/check_revision")
        changed = replace(every[index], sql=every[index].sql.replace(
            "at most 100 characters", "at most 100 characters (changed)"))
        monkeypatch.setattr(migrate, "objects",
                            lambda: [*every[:index], changed, *every[index + 1:]])
        assert migrate.apply(conn) == []
        with pytest.raises(Exception, match=r"\(changed\)"):
            conn.execute("select check_revision('')")
        after = {r["name"]: r["applied_at"] for r in conn.execute(
            "select name, applied_at from schema_objects").fetchall()}
        assert [name for name, at in before.items() if after[name] != at] == [
            "functions/check_revision"]
        assert conn.execute("select digest from schema_objects where name = %s",
                            (changed.key,)).fetchone() == {"digest": changed.digest}


def test_an_object_a_migration_dropped_is_made_again_though_its_file_did_not_change(
        empty_database: str) -> None:
    with db.connect(empty_database) as conn:
        migrate.apply(conn)
    with db.connect(empty_database) as conn:
        conn.execute("drop view my_opt_outs")
        conn.execute("drop trigger due_queue_changed on deliveries")
        with db.transaction(conn):
            assert migrate.apply_objects(conn) == ["views/my_opt_outs",
                                                   "triggers/due_queue_changed"]
        assert conn.execute("select has_table_privilege('reminders_client', 'my_opt_outs',"
                            " 'select') as ok").fetchone() == {"ok": True}


def test_the_objects_go_in_the_schema_being_migrated(empty_database: str) -> None:
    with db.connect(empty_database) as conn:
        migrate.apply(conn, "svc_reminders")
        found = conn.execute(
            "select n.nspname, count(*) as n from pg_proc p"
            " join pg_namespace n on n.oid = p.pronamespace"
            " where p.proname = 'schedule_for' group by 1").fetchall()
        assert found == [{"nspname": "svc_reminders", "n": 1}]
        assert conn.execute("select to_regnamespace(%s) as s",
                            (DEFAULT_SCHEMA,)).fetchone() == {"s": None}

"""One tenant's input can never delay, drop or block another's: what the SQL API refuses by
size before it reads an element, and the statement timeout every application login carries.
Each through a real ``reminders_client`` login mapped with ``grant_tenant``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from reminders import db, operator, schedules
from reminders.db import migrate
from reminders.errors import QuotaExceeded
from reminders.recurrence import Recurrence
from tests.conftest import T0, PgCluster
from tests.faults import waits_on_a_lock
from tests.integration.test_sql_api import Client, clients, sqlstate

__all__ = ["clients"]  # the fixture, used by name below

SCHEDULE = ("select * from reminders.schedule(key => %s, recipients => %s,"
            " channel => 'email', at => '2027-03-01 09:00Z', payload => %s::jsonb)")


def _track_function_calls(pg_cluster: PgCluster, database_url: str) -> None:
    """Sessions of this database from now on count their calls of PL/pgSQL functions
    (``pg_stat_xact_user_functions``), a superuser setting written on the server itself."""
    name = str(conninfo_to_dict(database_url)["dbname"])
    with db.connect(db.with_database(pg_cluster.direct, name)) as admin:
        admin.execute(sql.SQL("alter database {} set track_functions = 'pl'").format(
            sql.Identifier(name)))


def _calls_while_refused(client: Client, query: str, params: Any) -> tuple[psycopg.Error,
                                                                           dict[str, int]]:
    """The refusal of one call, and the calls of the service's functions it made (counted in
    its own transaction: a savepoint takes the refusal, the counters stay)."""
    with client.conn.transaction():
        with pytest.raises(psycopg.Error) as err, client.conn.transaction():
            client.conn.execute(query, params)
        calls = {r["funcname"]: int(r["calls"]) for r in client.conn.execute(
            "select funcname, calls from pg_stat_xact_user_functions"
            " where schemaname = 'reminders'")}
    return err.value, calls


def test_a_300_000_element_recipients_array_is_refused_by_its_length_before_any_is_read(
        clients: Callable[[str | None], Client], pg_cluster: PgCluster,
        database_url: str) -> None:
    """Before, every element went through check_recipient (300,000 calls) and duplicates
    were dropped before the count was compared with the limit."""
    _track_function_calls(pg_cluster, database_url)
    acme = clients("acme")
    people = [f"p{i}@example.com" for i in range(300_000)]
    err, calls = _calls_while_refused(acme, SCHEDULE, ("big", people, "{}"))
    assert calls.get("check_recipient", 0) == 0, calls
    assert calls.get("check_destinations", 0) == 0, calls
    assert sqlstate(err) == ("RM400", "recipients: 300000 elements in one call; the limit is "
                                      "50000")
    # Duplicates count too: the limit is on what the caller sends.
    err, _ = _calls_while_refused(acme, SCHEDULE, ("dup", ["a@example.com"] * 50_001, "{}"))
    assert sqlstate(err) == ("RM400", "recipients: 50001 elements in one call; the limit is "
                                      "50000")
    assert acme.rows("select count(*) as n from reminders.my_schedules") == [{"n": 0}]


def test_a_300_000_element_payload_array_is_refused_by_its_size_before_any_is_read(
        clients: Callable[[str | None], Client], pg_cluster: PgCluster,
        database_url: str) -> None:
    """The payload's size was measured as its JSON text (every element written out) and the
    recipients were all checked first."""
    _track_function_calls(pg_cluster, database_url)
    acme = clients("acme")
    payload = '{"items": [' + ",".join(["1"] * 300_000) + "]}"
    err, calls = _calls_while_refused(acme, SCHEDULE, ("big", ["a@example.com"], payload))
    assert calls.get("check_payload", 0) == 0 and calls.get("check_recipient", 0) == 0, calls
    state, message = sqlstate(err)
    assert state == "RM400"
    assert message is not None and message.startswith("payload is ") and message.endswith(
        " bytes as stored; the limit is 16384 bytes of JSON text"), message


# ---------------------------------------------------------------- quotas

SCHEDULE_TO = ("select * from reminders.schedule(key => %s, recipients => %s,"
               " channel => 'email', at => '2027-03-01 09:00Z')")


def _limits(conn: db.Connection, tenant: str, *, max_pending: int | None = None,
            schedules_per_minute: int | None = None) -> None:
    operator.set_tenant_limits(conn, tenant=tenant, max_pending=max_pending,
                               schedules_per_minute=schedules_per_minute, now=T0,
                               actor="test", create=True)


def _pending(conn: db.Connection, tenant: str) -> int:
    row = conn.execute("select count(*) as n from deliveries where tenant = %s"
                       " and state in ('scheduled', 'retrying', 'leased')", (tenant,)).fetchone()
    assert row is not None
    return int(row["n"])


def test_two_concurrent_calls_cannot_both_pass_a_pending_limit_they_exceed_together(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    """Each call alone is within acme's 3 pending deliveries, both together are not: the
    second waits for the first (the tenant's row), then sees its committed deliveries and is
    refused. Before, both committed: nothing limited a tenant's pending deliveries."""
    _limits(conn, "acme", max_pending=3)
    first, second = clients("acme"), clients("acme")
    globex = clients("globex")
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["rows"] = second.rows(SCHEDULE_TO, ("b", ["c@example.com",
                                                             "d@example.com"]))
        except psycopg.Error as exc:
            outcome["error"] = exc

    with first.conn.transaction():
        first.conn.execute(SCHEDULE_TO, ("a", ["a@example.com", "b@example.com"]))
        waiter = threading.Thread(target=call)
        waiter.start()
        assert waits_on_a_lock(conn, second.login, waiter.is_alive)
        # Another tenant's call never waits on acme's.
        assert len(globex.rows(SCHEDULE_TO, ("g", ["g@example.com"]))) == 1
    waiter.join(timeout=30)
    assert "rows" not in outcome, outcome
    assert sqlstate(outcome["error"]) == (
        "RM429", "tenant 'acme' is at its limit of 3 pending deliveries (max_pending): "
                 "2 pending, this call adds 2")
    assert _pending(conn, "acme") == 2
    # Within the limit, it passes; a replay of an existing key adds nothing and is answered.
    assert len(second.rows(SCHEDULE_TO, ("c", ["c@example.com"]))) == 1
    assert len(first.rows(SCHEDULE_TO, ("a", ["a@example.com", "b@example.com"]))) == 2
    err = first.refused(SCHEDULE_TO, ("d", ["e@example.com"]))
    assert sqlstate(err)[0] == "RM429"


def test_schedules_a_minute_are_limited_per_tenant_on_the_injected_clock(
        conn: db.Connection) -> None:
    """The Python API refuses as the SQL API does (QuotaExceeded, RM429's message); the
    minute is the caller's ``now``."""
    _limits(conn, "acme", schedules_per_minute=2)

    def one(key: str, now: datetime) -> None:
        schedules.schedule(conn, tenant="acme", recipients=["a@example.com"], channel="email",
                           at=T0 + timedelta(days=1), now=now, key=key)

    one("k1", T0)
    one("k2", T0 + timedelta(seconds=30))
    with pytest.raises(QuotaExceeded) as err:
        one("k3", T0 + timedelta(seconds=59))
    assert str(err.value) == ("tenant 'acme' is at its limit of 2 schedules created a minute "
                              "(schedules_per_minute); try again later, or ask the operator "
                              "to raise it")
    one("k1", T0 + timedelta(seconds=59))  # the same request again creates nothing: answered
    one("k3", T0 + timedelta(seconds=61))  # k1 is more than a minute old
    schedules.schedule(conn, tenant="globex", recipients=["a@example.com"], channel="email",
                       at=T0 + timedelta(days=1), now=T0 + timedelta(seconds=59), key="k3")
    assert conn.execute("select tenant, count(*) as n from schedules group by tenant"
                        " order by tenant").fetchall() == [
        {"tenant": "acme", "n": 3}, {"tenant": "globex", "n": 1}]


def test_a_series_advances_although_its_tenant_is_at_its_pending_limit(
        conn: db.Connection) -> None:
    """The limit bounds what applications add: a recurring schedule's next occurrence is the
    service's own write and still materialises (a series keeps one pending delivery a
    recipient, so it never grows the count)."""
    from reminders.series import advance_after_terminal

    _limits(conn, "acme", max_pending=1)
    made = schedules.schedule(conn, tenant="acme", recipients=["a@example.com"],
                              channel="email", now=T0, key="daily",
                              recurrence=Recurrence.parse("FREQ=DAILY", "Europe/Berlin",
                                                          datetime(2027, 3, 1, 10, 0)))
    with pytest.raises(QuotaExceeded):
        schedules.schedule(conn, tenant="acme", recipients=["b@example.com"], channel="email",
                           at=T0 + timedelta(days=1), now=T0, key="one-more")
    first = conn.execute("select id, occurrence_at from deliveries").fetchone()
    assert first is not None
    with db.transaction(conn):
        conn.execute("update deliveries set state = 'sent' where id = %s", (first["id"],))
        advance_after_terminal(conn, "acme", made.schedule_id, "a@example.com",
                               T0 + timedelta(hours=2), after=first["occurrence_at"])
    assert [r["state"] for r in conn.execute(
        "select state from deliveries order by occurrence_at")] == ["sent", "scheduled"]


def test_the_deployment_default_applies_where_a_tenant_has_no_limit_of_its_own(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    operator.set_tenant_limits(conn, tenant=None, max_pending=1, now=T0, actor="test")
    _limits(conn, "globex", max_pending=5)
    acme, globex = clients("acme"), clients("globex")
    acme.rows(SCHEDULE_TO, ("a", ["a@example.com"]))
    assert sqlstate(acme.refused(SCHEDULE_TO, ("b", ["b@example.com"])))[1] == (
        "tenant 'acme' is at its limit of 1 pending deliveries (max_pending): 1 pending, "
        "this call adds 1")
    assert len(globex.rows(SCHEDULE_TO, ("a", ["a@example.com", "b@example.com"]))) == 2
    listed = {r["tenant"]: r for r in operator.tenants(conn)}
    assert (listed["acme"]["max_pending"], listed["globex"]["max_pending"]) == (1, 5)


# ---------------------------------------------------------------- statement timeout


def test_an_application_login_s_long_statement_is_cancelled(
        clients: Callable[[str | None], Client], conn: db.Connection,
        pg_cluster: PgCluster, database_url: str) -> None:
    """grant_tenant gives the login the deployment's statement timeout as a role setting;
    before, an application login had none, and a 3 s statement ran to its end."""
    with db.transaction(conn):
        conn.execute("update tenant_defaults set client_statement_timeout_ms = 300")
    acme = clients("acme")
    err = acme.refused("select pg_sleep(3)")
    assert err.sqlstate == "57014"  # query_canceled: canceling statement due to statement timeout
    # Every migration run writes it again, as it writes the service login's.
    name = str(conninfo_to_dict(database_url)["dbname"])
    with db.connect(db.with_database(pg_cluster.direct, name)) as admin:
        admin.execute(sql.SQL("alter role {} in database {} reset statement_timeout").format(
            sql.Identifier(acme.login), sql.Identifier(name)))
        assert _role_timeout(admin, acme.login) is None
        migrate.apply(admin)
        assert _role_timeout(admin, acme.login) == "statement_timeout=300ms"


def _role_timeout(admin: db.Connection, login: str) -> str | None:
    row = admin.execute(
        "select s.setting from pg_db_role_setting r, unnest(r.setconfig) s(setting)"
        " where r.setrole = (select oid from pg_roles where rolname = %s)"
        " and r.setdatabase = (select oid from pg_database where datname = current_database())"
        " and s.setting like 'statement_timeout=%%'", (login,)).fetchone()
    return None if row is None else str(row["setting"])
